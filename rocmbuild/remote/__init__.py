"""Binary caches by URL, behind one protocol (docs/caches.md).

* ``file:///DIR`` and ``https://HOST/PATH`` (:mod:`.static`): a directory or a static web server
  holding, per artifact key, ``<key>.tar.gz``, ``<key>.tar.gz.sha256``, ``<key>.manifest.json``
  (the manifest's exact bytes, so lookups and listings need not download a bundle) and
  ``<key>.sig``. ``http://`` only to a loopback host or an ``insecure`` cache.
* ``oci://HOST[:PORT]/REPO`` (:mod:`.oci`): an OCI registry, one artifact per key.

Every backend answers :class:`Cache`: ``lookup(key)`` -> :class:`Entry` or None (a miss),
``fetch(key, dest_root)`` -> the files written into the :class:`~rocmbuild.fs.root.Root` ``dest_root``
(the bundle downloaded by :mod:`.download`: progress, retries, resumed from a partial file kept
in ``dest_root``, its bytes checked against its sha256 on the way), ``push(key, bundle, sha256,
signature, force)`` -> False when the key was already there, or another push of it placed its
entry first (nothing of this push is the entry; ``force`` replaces one), ``list()``. Of two pushes
of one key at once one entry wins whole, the bundle and signature of one pusher (the backends
say how).
Trust (:mod:`.trust`) is checked by the caller, on the entry, before anything is imported.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from rocmbuild.config import CacheConfig, check_cache_url
from rocmbuild.errors import FetchError, InputError
from rocmbuild.fs.root import Root

MANIFEST_MEMBER = "rocmbuild-artifact/manifest.json"
MAX_MANIFEST = 64 << 20


@dataclass(frozen=True)
class Entry:
    """One artifact in a cache: its key, its exact manifest bytes, the bundle's sha256 and size,
    and the signature file (None: unsigned)."""

    url: str  # the cache
    key: str
    manifest: bytes
    bundle_sha256: str
    size: int | None
    signature: bytes | None

    def info(self) -> dict[str, Any]:
        """recipe, version, gpu_targets from the manifest (None when it cannot be read)."""
        try:
            d = json.loads(self.manifest)
        except (ValueError, RecursionError):
            d = {}
        d = d if isinstance(d, dict) else {}
        targets = d.get("gpu_targets")
        return {"recipe": d.get("recipe"), "version": d.get("version"),
                "gpu_targets": list(targets) if isinstance(targets, list) else None}


@dataclass(frozen=True)
class Fetched:
    """What :meth:`Cache.fetch` wrote into its destination root (paths as shown by the root)."""

    bundle: str
    sha256_file: str
    signature: str | None
    entry: Entry


class Cache(Protocol):
    url: str

    def lookup(self, key: str) -> Entry | None: ...

    def fetch(self, key: str, dest_root: Root) -> Fetched: ...

    def push(self, key: str, bundle: Path, sha256: str, signature: bytes | None, force: bool = False) -> bool: ...

    def list(self) -> list[Entry]: ...


def open_cache(cfg: CacheConfig) -> Cache:
    """The backend for ``cfg.url``; an unknown scheme, or a URL holding credentials, is exit 2."""
    check_cache_url(cfg.url)
    scheme = urlparse(cfg.url).scheme
    if scheme == "oci":
        from rocmbuild.remote.oci import OciCache

        return OciCache(cfg)
    if scheme in ("file", "http", "https"):
        from rocmbuild.remote.static import FileCache, HttpCache

        return FileCache(cfg) if scheme == "file" else HttpCache(cfg)
    raise InputError(f"{cfg.url}: not a cache URL", "use oci://HOST[:PORT]/REPO, file:///DIR or https://HOST/PATH")


def check_key(key: str) -> str:
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise InputError(f"{key!r} is not an artifact key (64 hex digits)", "see `rocmbuild cache list`")
    return key


def bundle_manifest(bundle: Path) -> bytes:
    """The exact bytes of the manifest inside a bundle (what a signature covers)."""
    try:
        with tarfile.open(bundle, "r:*") as tf:
            m = tf.getmember(MANIFEST_MEMBER)
            if not m.isreg() or m.size > MAX_MANIFEST:
                raise KeyError(MANIFEST_MEMBER)
            f = tf.extractfile(m)
            if f is None:  # not a regular file after all
                raise KeyError(MANIFEST_MEMBER)
            with f:
                return f.read()
    except (KeyError, tarfile.TarError, OSError, EOFError) as exc:
        raise InputError(f"{bundle} is not a rocmbuild artifact bundle ({exc})", "export it again") from exc


def digest_mismatch(url: str, key: str, expected: str, got: str) -> FetchError:
    return FetchError(f"{url}: the bundle of {key[:16]} does not match its digest (expected sha256 {expected[:16]}..., "
                      f"got {got[:16]}...): nothing was imported",
                      "the cache entry is damaged or was changed: push it again from the builder",
                      details={"key": key, "expected": expected, "actual": got})


def side_files(dest_root: Root, e: Entry, bundle: str) -> Fetched:
    """Write the entry's manifest, ``.sha256`` and signature beside the fetched bundle."""
    dest_root.write_atomic(f"{e.key}.manifest.json", e.manifest)
    dest_root.write_atomic(f"{e.key}.tar.gz.sha256", f"{e.bundle_sha256}  {e.key}.tar.gz\n".encode())
    if e.signature is not None:
        dest_root.write_atomic(f"{e.key}.sig", e.signature)
    return Fetched(bundle, dest_root.show(f"{e.key}.tar.gz.sha256"),
                   dest_root.show(f"{e.key}.sig") if e.signature is not None else None, e)
