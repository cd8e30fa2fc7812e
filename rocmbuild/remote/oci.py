"""An OCI registry as a binary cache (``oci://HOST[:PORT]/REPO``), spoken with ``requests`` over
the OCI distribution API (docs/caches.md has the layout).

Per artifact key, in the repository ``REPO``:
* tag ``<key>``: an OCI image manifest (``artifactType`` ``application/vnd.rocmbuild.artifact.v1``)
  whose config blob is the artifact's manifest (exact bytes, ``application/vnd.rocmbuild.manifest.v1+json``)
  and whose one layer is the bundle (``application/vnd.rocmbuild.bundle.v1.tar+gzip``): the
  layer's digest *is* the bundle's sha256;
* tag ``<key>.sig``: a manifest with the empty config and one layer, the signature file
  (``application/vnd.rocmbuild.signature.v1+json``), for readers of releases before the key's
  manifest carried it. A tag, not an OCI referrer: the referrers API is OCI 1.1, missing from
  the CNCF distribution registry 2.x (Debian's docker-registry).

**Pushes that race.** The distribution API has no compare-and-swap of a tag (the last ``PUT``
wins), so the key's manifest carries its own signature (annotation :data:`SIG_ANNOTATION`, the
signature file in base64; a reader takes it before any ``.sig`` tag): whichever manifest holds the
tag is one pusher's bundle and signature, never a mix. A push looks for the tag before its blobs
and again just before tagging (found: nothing tagged, ``False``), puts the ``.sig`` tag and then
the key's, waits :data:`SETTLE` seconds and reads the tag back: another pusher's manifest there
means this push lost (``False``; it puts the winner's signature back under ``.sig``). Two
pushes report ``True`` only if one's tag, wait and read-back all fall between the other's last
look and its tag (two requests apart): the entry is still whole.

Why not the ``oras`` package (0.2.x): its retry decorator retries *any* exception five times,
sleeping 3 + 3**n seconds (a refused connection or a failed login is reported minutes later as a
bare ``ValueError``), deaf to ``ROCMBUILD_DOWNLOAD_RETRIES``; ``download_blob`` checks no digest.
The API needed is small (manifests, blobs, monolithic uploads, tags list, Basic and Bearer token
auth), so it is spoken directly.

The distribution API itself (auth, the origin rules for credentials, TLS, bounded reads, uploads)
is :mod:`.registry`'s; the bundle's download (:mod:`.download`) resumes with a ``Range`` request.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests

from rocmbuild.config import CacheConfig
from rocmbuild.errors import FetchError, InputError
from rocmbuild.remote import Entry, Fetched, bundle_manifest, check_key, side_files
from rocmbuild.remote import download
from rocmbuild.remote.registry import MANIFEST_TYPE, MAX_MANIFEST, MAX_SMALL, Registry  # noqa: F401
from rocmbuild.fs.root import Root

ARTIFACT_TYPE = "application/vnd.rocmbuild.artifact.v1"
CONFIG_TYPE = "application/vnd.rocmbuild.manifest.v1+json"
BUNDLE_TYPE = "application/vnd.rocmbuild.bundle.v1.tar+gzip"
SIG_TYPE = "application/vnd.rocmbuild.signature.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
MAX_SIG = 64 << 10  # a signature blob (about 400 bytes)
MAX_BUNDLE = 1 << 40  # a bundle layer: 1 TiB, more than any library set
SIG_ANNOTATION = "dev.rocmbuild.signature"  # the key's manifest carries its signature (base64)
SETTLE = 0.5  # seconds between putting the key's tag and reading it back (module notes)
_TAG = re.compile(r"^[0-9a-f]{64}$")


def _descriptor(media_type: str, data_digest: str, size: int) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": f"sha256:{data_digest}", "size": size}


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def __enter__(self) -> bytes:
        return self.data

    def __exit__(self, *exc) -> None:
        pass


def _embedded(doc: dict[str, Any] | None) -> bytes | None:
    """The signature file a key's manifest carries (:data:`SIG_ANNOTATION`, base64); None: none
    there (an older push), b"" when it is not base64 of at most :data:`MAX_SIG` bytes (trust
    then says the artifact is not signed)."""
    annotations = doc.get("annotations") if isinstance(doc, dict) else None
    text = annotations.get(SIG_ANNOTATION) if isinstance(annotations, dict) else None
    if text is None:
        return None
    try:
        data = base64.b64decode(text, validate=True) if isinstance(text, str) and len(text) <= MAX_SIG * 2 else b""
    except ValueError:
        data = b""
    return data if len(data) <= MAX_SIG else b""


def _layer(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    layers = doc.get("layers") if doc else None
    first = layers[0] if isinstance(layers, list) and layers and isinstance(layers[0], dict) else None
    return first if first and str(first.get("digest", "")).startswith("sha256:") else None


class OciCache:
    def __init__(self, cfg: CacheConfig) -> None:
        self.cfg, self.url, self.reg = cfg, cfg.url, Registry(cfg)

    def lookup(self, key: str) -> Entry | None:
        return self._entry(key, self.reg.get_manifest(check_key(key)))

    def _entry(self, key: str, doc: dict[str, Any] | None) -> Entry | None:
        """The entry the key's manifest ``doc`` describes (None: a miss). Its signature is the one
        inside it (:data:`SIG_ANNOTATION`); a manifest pushed before that (no such annotation)
        takes the ``<key>.sig`` tag's."""
        layer, config = _layer(doc), (doc or {}).get("config")
        if layer is None or not isinstance(config, dict) or not str(config.get("digest", "")).startswith("sha256:"):
            return None
        size = self._size(key, layer, MAX_BUNDLE, "bundle")
        self._size(key, config, MAX_SMALL, "manifest")
        manifest = self.reg.small_blob(config["digest"], "read the artifact's manifest")
        sig = _embedded(doc)
        if sig is None:
            sig_layer = _layer(self.reg.get_manifest(f"{key}.sig"))
            if sig_layer:
                self._size(key, sig_layer, MAX_SIG, "signature")
            sig = self.reg.small_blob(sig_layer["digest"], "read the signature", MAX_SIG) if sig_layer else None
        return Entry(self.url, key, manifest, layer["digest"].removeprefix("sha256:"), size, sig or None)

    def _size(self, key: str, descriptor: dict[str, Any], cap: int, what: str) -> int:
        """A descriptor's ``size``: a whole number of bytes up to ``cap``, else refused (exit 3)."""
        size = descriptor.get("size")
        if type(size) is not int or not 0 <= size <= cap:
            shown = json.dumps(size)[:40] if size is None or isinstance(size, (int, float, str, bool)) else type(size).__name__
            raise FetchError(f"{self.url}: artifact {key[:16]} declares its {what} as {shown} bytes, which is not a "
                             f"size rocmbuild takes (a whole number up to {cap})",
                             "the registry's copy is damaged or forged: push the artifact again from the builder",
                             details={"key": key, "size": shown})
        return size

    def fetch(self, key: str, dest_root: Root) -> Fetched:
        e = self.lookup(key)
        if e is None:
            raise InputError(f"{self.url}: no artifact {key[:16]}", "see `rocmbuild cache list --remote URL`")
        blob = self.reg.url(f"blobs/sha256:{e.bundle_sha256}")

        def get(headers: dict[str, str]) -> requests.Response:
            resp = self.reg.request("GET", blob, action="download the bundle", ok=(200, 206, 416), stream=True,
                                    headers=headers)
            if resp.status_code == 404:
                resp.close()
                raise FetchError(f"{self.url}: the registry lost the bundle of {key[:16]}", "push it again")
            return resp

        bundle = download.pull(dest_root, f"{key}.tar.gz", lambda offset: download.http_open(get, offset),
                               e.bundle_sha256, url=self.url, key=key, size=e.size or None)
        return side_files(dest_root, e, bundle)

    def push(self, key: str, bundle: Path, sha256: str, signature: bytes | None, force: bool = False) -> bool:
        """Upload the blobs, then tag the key with one manifest that carries the signature
        (module notes, "Pushes that race"); False when the key was there before the tag was put,
        or another push's manifest holds the tag when it is read back."""
        check_key(key)
        if not force and self.reg.get_manifest(key) is not None:
            return False
        manifest = bundle_manifest(bundle)
        mdigest = hashlib.sha256(manifest).hexdigest()
        self.reg.put_blob(mdigest, lambda: _Bytes(manifest), len(manifest))
        size = bundle.stat().st_size
        self.reg.put_blob(sha256, lambda: open(bundle, "rb"), size)
        info = Entry(self.url, key, manifest, sha256, size, None).info()
        annotations = {"dev.rocmbuild.key": key, "dev.rocmbuild.recipe": str(info["recipe"]),
                       "dev.rocmbuild.version": str(info["version"]),
                       "dev.rocmbuild.gpu-targets": ",".join(info["gpu_targets"] or [])}
        if signature is not None:
            annotations[SIG_ANNOTATION] = base64.b64encode(signature).decode()
        doc = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": ARTIFACT_TYPE,
               "config": _descriptor(CONFIG_TYPE, mdigest, len(manifest)),
               "layers": [_descriptor(BUNDLE_TYPE, sha256, size)], "annotations": annotations}
        if not force and self.reg.get_manifest(key) is not None:  # placed while the blobs went up
            return False
        if signature is not None:
            self._push_signature(key, signature)  # for readers of an older release: before the key's tag
        self.reg.put_manifest(key, doc)
        time.sleep(SETTLE)
        held = self.reg.get_manifest(key)
        if held == doc:
            return True
        theirs = _embedded(held)
        if theirs:  # another push tagged the key after this one: its signature tag goes with its manifest
            self._push_signature(key, theirs)
        return False

    def _push_signature(self, key: str, signature: bytes) -> None:
        empty, sdigest = hashlib.sha256(EMPTY).hexdigest(), hashlib.sha256(signature).hexdigest()
        self.reg.put_blob(empty, lambda: _Bytes(EMPTY), len(EMPTY))
        self.reg.put_blob(sdigest, lambda: _Bytes(signature), len(signature))
        self.reg.put_manifest(f"{key}.sig", {"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": SIG_TYPE,
                                             "config": _descriptor(EMPTY_TYPE, empty, len(EMPTY)),
                                             "layers": [_descriptor(SIG_TYPE, sdigest, len(signature))]})

    def tags(self) -> list[str]:
        out: list[str] = []
        path: str | None = "tags/list?n=1000"
        while path:
            resp = self.reg.call("GET", path, action="list the tags", stream=True)
            if resp.status_code == 404:
                resp.close()
                return []
            try:
                doc = json.loads(self.reg.read(resp, "list the tags", MAX_SMALL))
            except (ValueError, RecursionError):
                doc = None
            tags = doc.get("tags") if isinstance(doc, dict) else None
            if not isinstance(doc, dict) or not isinstance(tags, (list, type(None))):
                doc = None
            if doc is None:
                raise FetchError(f"{self.url}: the registry's tag list is not the JSON object the distribution API "
                                 "answers", "check the cache URL (is it a registry?), or tell whoever runs it")
            out += [t for t in (tags or []) if isinstance(t, str)]
            nxt = resp.links.get("next", {}).get("url")
            path = urljoin(self.reg.url("tags/list"), nxt).removeprefix(self.reg.url("")) if nxt else None
        return out

    def list(self) -> list[Entry]:
        return [e for t in sorted(self.tags()) if _TAG.match(t) and (e := self.lookup(t)) is not None]
