"""Artifact bundles: build once, apply on every machine (docs/cache.md, "Bundles").

``export`` writes ``FILE.tar.gz`` holding ``rocmbuild-artifact/manifest.json`` (always the first
member) and ``rocmbuild-artifact/tree/...``, and beside it ``FILE.tar.gz.sha256`` (``sha256sum``
format). ``import_bundle`` takes a path or an http(s) URL, checks the bundle's sha256, reads the
manifest first and every header against it, then writes only what the manifest lists, each file
checked against its size and sha256 on the way (:mod:`rocmbuild.store.unbundle`), into the local
artifact cache, apart from built artifacts, under ``artifacts/imported/<key>/`` with its
provenance (``provenance.json``: the file or URL, the bundle's sha256, whether that was checked
against a given one, the time), atomically. The importing machine needs no compiler and no source.

Decisions:
* Confinement: every write into an export directory and into the cache's imported area goes
  through a :class:`~rocmbuild.fs.root.Root` of that directory (``artifacts/`` for an import: its
  temp dir, the rename into ``imported/``, setting aside an old entry): a temp name beneath it,
  ``fchmod`` 0644, fsync, ``renameat``, fsync of the directory. The export's file name is built
  only from values checked by :mod:`rocmbuild.names` (:func:`~rocmbuild.store.unbundle.checked_names`):
  a manifest's recipe name or version outside the grammar is a corrupt artifact (exit 3), refused
  at import and again at export (an artifact imported by an older rocmbuild).
* ``-o``: an existing directory, or a path ending in ``/`` (created if missing, decision: a
  trailing slash means a directory, like ``cp``), gets ``RECIPE-VERSION-KEY12.tar.gz``; any
  other path names the bundle itself (its directory created if missing).
* Reproducible bundles (decision): the same artifact exports to the same bytes on any machine,
  any day, whatever the umask, the user or the files' times: PAX format; the manifest, then the
  tree's directories, files and links sorted by path (directories only as the parents of listed
  entries); uid/gid 0, empty user and group names, mtime 0 for every member (the manifest records
  each file's mtime; ``SOURCE_DATE_EPOCH`` is not read: there is no date to carry); modes 0644 or
  0755 (files, by the manifest's exec bit), 0755 (directories); gzip level 9 with no name and
  time 0 in its header. Only what the manifest lists is written, each file's bytes hashed on the
  way and compared with it (a mismatch quarantines the cached artifact, exit 3). The compressed
  bytes depend on the zlib that deflates them (zlib-ng deflates differently): the tar stream is
  identical everywhere, the .tar.gz wherever the zlib is the same.
* The bundle's sha256 comes from ``--sha256``, else from the ``.sha256`` file beside the bundle
  (for a URL: ``URL.sha256``). For a URL without either, the import is refused (exit 2): a
  download must be checked. For a local file without either, the per-file sha256 in the manifest
  is still checked, and a warning says the bundle itself was not.
* :func:`inspect` (``apply --artifact --dry-run``) makes every check of an import without
  writing anything: the same header pass, then each file's bytes streamed from the archive.
* An imported artifact is never a recipe's cache hit (``cache.lookup`` does not look there): a
  bundle is only trusted as what it is, for ``apply --artifact`` and ``export KEY`` (a re-export
  of an imported key is allowed: it carries the same manifest, and the importer checks it again).
  The one exception is a *substituted* artifact (provenance kind ``cache``, written only by
  :mod:`rocmbuild.flows.substitute` after the signature check): see :func:`rocmbuild.store.cache.lookup`.
* The manifest is read by its schema (:mod:`rocmbuild.store.manifest`) before anything is
  extracted when it is the bundle's first member (as :func:`export` writes it); one it refuses is
  a corrupt artifact (``ArtifactError``, exit 3) naming the bundle and the field. ``provenance.json``
  is read by :data:`PROVENANCE_SPEC` the same way.
* An imported artifact already in the cache under the same key, intact and with the same manifest,
  is reused after the header pass (its provenance is kept; nothing is extracted); one with another
  manifest (or damaged) is set aside and replaced once the new one is complete.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
import hashlib
import io
import json
import os
import re
import secrets
import stat
import tarfile
import urllib.parse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Iterator

from rocmbuild import ui
from rocmbuild.store import unbundle
from rocmbuild.sources.archive import download
from rocmbuild.store.artifact import MANIFEST, TREE, Artifact, FileEntry, Manifest
from rocmbuild.store.cache import corrupt, imported_dir
from rocmbuild.store.provenance import (PROVENANCE, PROVENANCE_SPEC, Provenance, parse_provenance,  # noqa: F401
                                         read_provenance)
from rocmbuild.sources.tarball import touch_download
from rocmbuild.store.unbundle import MAX_MANIFEST, TOP, checked_names  # noqa: F401 (re-exported)
from rocmbuild.fs.disk import CHUNK, sha256_fd, sha256_file
from rocmbuild.config import redact_url
from rocmbuild.errors import FetchError, InputError
from rocmbuild.names import recipe_version, safe_text
from rocmbuild.home import artifacts_dir, downloads_dir
from rocmbuild.fs.root import Root, file_mode



@dataclass(frozen=True)
class Export:
    """What :func:`export` wrote (``to_json()``: the keys of the ``export`` verb)."""

    file: str
    sha256: str
    sha256_file: str
    size: int
    key: str
    recipe: str
    version: str | None
    changed: bool = True  # False: the file held exactly these bytes already (a reproducible re-export)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def destination(out: str | os.PathLike, default_name: str) -> tuple[Path, str]:
    """(directory, file name) for ``-o out`` (see the module notes)."""
    text = os.fspath(out)
    if not text:
        raise InputError("export: -o names no file", "give the bundle's path (FILE.tar.gz) or a directory")
    path = Path(text).expanduser().absolute()
    if text.endswith("/") or path.is_dir():
        return path, default_name
    return path.parent, path.name


def export(art: Artifact, out: str | os.PathLike) -> Export:
    """Write the bundle of ``art`` and its ``.sha256`` (see the module notes); what was written."""
    recipe, version = checked_names(art.manifest, f"artifact {art.key[:16]}")
    directory, name = destination(out, f"{recipe}-{version or 'unknown'}-{art.key[:12]}.tar.gz")
    try:
        root = Root.open(directory, "the export directory", create=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise InputError(f"cannot write the bundle into {directory}: {exc.strerror}",
                         "give -o a directory or a file in one") from None
    with root:
        old = _open_old(root, name)
        try:
            digest, size = _write(root, name, art)
            same = old is not None and os.fstat(old).st_size == size and sha256_fd(old) == digest
        finally:
            if old is not None:
                os.close(old)
        root.write_atomic(f"{name}.sha256", f"{digest}  {name}\n".encode(), 0o644)
    shown = Path(os.path.normpath(directory))  # kept/../x reads x (the real path if a link made them differ)
    shown = shown if shown.exists() and os.path.samefile(shown, directory) else Path(os.path.realpath(directory))
    return Export(file=str(shown / name), sha256=digest, sha256_file=str(shown / f"{name}.sha256"),
                  size=size, key=art.key, recipe=recipe, version=version, changed=not same)


def _open_old(root: Root, name: str) -> int | None:
    """The file ``name`` already holds (a regular file, opened beneath ``root``), kept open across
    the rename so that its bytes can be compared with the new bundle's (hashed only when the sizes
    match); None when there is none."""
    try:
        fd = root.open_file(name, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _write(root: Root, name: str, art: Artifact) -> tuple[str, int]:
    """``name`` beneath ``root``, whole or not at all: a temp beside it, 0644, fsync, rename."""
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = root.open_file(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            with open(fd, "wb", closefd=False) as raw:
                write_bundle(raw, art)
            os.fchmod(fd, 0o644)  # not the umask's say: whoever serves or copies the bundle reads it
            root.own_like(fd, root.lstat())
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
            digest, size = sha256_fd(fd), os.fstat(fd).st_size
        finally:
            os.close(fd)
        root.replace(tmp, name)  # renameat, then the directory fsynced
    except BaseException:
        with contextlib.suppress(OSError):
            root.unlink(tmp, sync=False)
        raise
    return digest, size


def _info(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def _tree_rows(manifest: Manifest) -> list[tuple[tuple[str, ...], FileEntry | None]]:
    """The tree's members in order: every listed entry and its parent directories (None), by path."""
    dirs: set[tuple[str, ...]] = {()}
    rows: list[tuple[tuple[str, ...], FileEntry | None]] = []
    for f in manifest.files:
        p = tuple(x for x in f.path.split("/") if x not in ("", "."))
        dirs.update(p[:i] for i in range(1, len(p)))
        rows.append((p, f))
    return sorted([(d, None) for d in dirs] + rows, key=lambda r: (r[0], r[1] is not None))


def write_bundle(raw: IO[bytes], art: Artifact) -> None:
    """The reproducible bundle of ``art`` into ``raw`` (see the module notes)."""
    data = (json.dumps(art.manifest.to_json(), indent=2, sort_keys=True, default=str) + "\n").encode()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz, \
            tarfile.TarFile(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, copybufsize=CHUNK) as tf, \
            Root.open(art.tree, "the artifact cache") as tree:
        tf.addfile(_info(f"{TOP}/{MANIFEST}", tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
        for parts, f in _tree_rows(art.manifest):
            name = "/".join((TOP, TREE, *parts))
            if f is None:
                tf.addfile(_info(name, tarfile.DIRTYPE, 0o755))
            elif f.type == "link":
                tf.addfile(_info(name, tarfile.SYMTYPE, 0o777, link=f.target or ""))
            else:
                _add_file(tf, tree, name, f, art)


class _Hashing:
    """A file descriptor read whole-chunk by ``tarfile``, every byte hashed."""

    def __init__(self, fd: int) -> None:
        self.fd, self.h = fd, hashlib.sha256()

    def read(self, n: int = CHUNK) -> bytes:
        out = bytearray()
        while len(out) < n and (chunk := os.read(self.fd, n - len(out))):
            out += chunk
        self.h.update(out)
        return bytes(out)


def _add_file(tf: tarfile.TarFile, tree: Root, name: str, f: FileEntry, art: Artifact) -> None:
    """The cached file ``f`` (opened beneath the tree, never through a link), hashed on the way."""
    fd = tree.open_file(f.path)
    try:
        size = os.fstat(fd).st_size
        if size != f.size:
            raise corrupt(art, [f"{f.path}: size {size}, manifest {f.size}"])
        src = _Hashing(fd)
        tf.addfile(_info(name, tarfile.REGTYPE, file_mode(f.mode), f.size), src)
        if src.h.hexdigest() != f.sha256:
            raise corrupt(art, [f"{f.path}: sha256 differs from the manifest"])
    finally:
        os.close(fd)


def _parse_sha256_file(text: str) -> str | None:
    m = re.match(r"\s*([0-9a-fA-F]{64})\b", text)
    return m.group(1).lower() if m else None


BUNDLE_HINT = ("the network or the server failed: run the command again later (downloads are retried with "
               "backoff), or copy the bundle and its .sha256 to this machine and give the file to --artifact")


def _expected_for_url(url: str) -> str | None:
    """The sha256 published beside ``url`` (``URL.sha256``); None when the server has none (404/410:
    the publisher did not write one, an input problem, exit 2). Unreachable, or 5xx after the
    retries: a FetchError (exit 3, try again later), never taken as "none published"."""
    from rocmbuild.sources import net

    text = net.get_text(url + ".sha256", BUNDLE_HINT, missing_ok=True)
    return _parse_sha256_file(text) if text is not None else None


def _fetch(src: str, home: Path, sha256: str | None) -> tuple[Path, str | None]:
    """A local path to the bundle and the sha256 it was checked against (None: not checked)."""
    parsed = urllib.parse.urlparse(src)
    if parsed.scheme in ("http", "https"):
        if "@" in parsed.netloc:  # a user:password@ would be echoed in every message and the JSON
            raise InputError(f"{safe_text(redact_url(src))}: the artifact URL holds credentials (user:password@), "
                             "which are refused: they would be shown in messages and JSON",
                             "remove them from the URL; put them in ~/.netrc (machine HOST login USER password "
                             "SECRET), which the download reads", details={"url": redact_url(src)})
        expected = sha256 or _expected_for_url(src)
        if expected is None:
            raise InputError(
                f"no sha256 for {src}: neither --sha256 nor {src}.sha256",
                "publish the .sha256 file that `rocmbuild export` writes beside the bundle, or pass --sha256",
            )
        dest = downloads_dir(home) / f"bundle-{expected}.tar.gz"
        if not (dest.is_file() and sha256_file(dest) == expected):
            download(src, dest, expected, hint=BUNDLE_HINT, home=home)
        touch_download(dest)  # its last use, for `cache gc`
        return dest, expected
    path = Path(urllib.parse.unquote(parsed.path) if parsed.scheme == "file" else src).expanduser()
    if not path.is_file():
        raise InputError(f"artifact bundle not found: {path}", "give the .tar.gz that `rocmbuild export` wrote, or its URL")
    side = path.with_name(path.name + ".sha256")
    expected = sha256 or (_parse_sha256_file(side.read_text()) if side.is_file() else None)
    if expected is None:
        ui.warn(f"no {side.name} beside {path.name}: the bundle's own checksum was not checked "
                "(every file is still checked against the manifest)")
        return path, None
    got = sha256_file(path)
    if got != expected.lower():
        raise FetchError(
            f"sha256 mismatch for {path}: expected {expected}, got {got}",
            "the bundle is corrupt or was changed: copy it again with its .sha256 file",
            details={"expected": expected, "actual": got},
        )
    return path, expected


def _provenance(src: str, path: Path, checked: str | None) -> Provenance:
    url = is_url(src)
    return Provenance(source=src if url else str(Path(path).absolute()), kind="url" if url else "file",
                      bundle_sha256=checked or sha256_file(path), sha256_checked=checked is not None,
                      imported=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


def is_url(src: str) -> bool:
    return urllib.parse.urlparse(src).scheme in ("http", "https")


@contextlib.contextmanager
def _planned(path: Path) -> Iterator[tuple[tarfile.TarFile, unbundle.Plan]]:
    """The open bundle and its plan (pass 1: the manifest first, every header judged; nothing written)."""
    with unbundle.open_bundle(path) as tf:
        yield tf, unbundle.read_plan(tf, path)


def inspect(src: str, *, home: Path, sha256: str | None = None) -> Artifact:
    """What ``apply --artifact --dry-run`` needs, read without extracting anything: the bundle's
    sha256, the manifest, every header, and every file's size and sha256 streamed from the
    archive. ``home`` is used only to download a URL. The artifact's path names the bundle itself
    (``BUNDLE/rocmbuild-artifact``): nothing exists there."""
    path, _checked = _fetch(src, home, sha256)
    with _planned(path) as (tf, plan):
        unbundle.check_streamed(tf, plan)
    return Artifact(path / TOP, plan.manifest, cached=False)


def import_bundle(src: str, *, home: Path, sha256: str | None = None, signed: tuple[str, bytes] | None = None,
                  origin: Provenance | None = None) -> Artifact:
    """Check and place a bundle in the local cache (apart from built artifacts); returns it.

    ``signed`` (a substitution): (the key asked for, the exact manifest bytes the checked signature
    covers); a bundle whose first member is not exactly those bytes is refused (exit 3) before
    anything is written. ``origin``: the provenance to record instead of the bundle's path."""
    path, checked = _fetch(src, home, sha256)
    with _planned(path) as (tf, plan):
        manifest = plan.manifest
        if signed is not None and (plan.manifest_bytes != signed[1] or manifest.key != signed[0]):
            raise FetchError(f"{src}: the bundle's manifest is not the signed manifest of artifact {signed[0][:16]}: "
                             "nothing was imported", "the cache entry is damaged or forged: push it again from the builder")
        with Root.under(home, artifacts_dir(home), "the artifact cache", create=True) as root:
            existing = _reusable(root, manifest)
            if existing is not None:
                ui.info(f"artifact {manifest.key[:16]} is already in the cache (imported)")
                return existing
            _place(tf, plan, root, origin or _provenance(src, path, checked))
    ui.info(f"imported {recipe_version(manifest.recipe, manifest.version)} ({manifest.key[:16]}) from {src}")
    return Artifact(imported_dir(home) / manifest.key, manifest, cached=True)


def _place(tf: tarfile.TarFile, plan: unbundle.Plan, root: Root, provenance: "Provenance") -> None:
    """Pass 2 into ``artifacts/.tmp-import-<pid>/``, then one rename to ``imported/<key>``
    (``imported/`` itself is made only then), all beneath ``root``."""
    tmp, final = f".tmp-import-{os.getpid()}", f"imported/{plan.manifest.key}"
    root.rmtree(tmp)  # a killed import's leftover of this pid
    root.mkdir(tmp)
    try:
        unbundle.extract_into(tf, plan, root, tmp)
        root.write_atomic(f"{tmp}/{PROVENANCE}", (json.dumps(provenance.to_json(), indent=2, sort_keys=True) + "\n").encode())
        root.makedirs("imported")
        _set_aside(root, final)
        root.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            root.rmtree(tmp)
        raise


def _reusable(root: Root, manifest: Manifest) -> Artifact | None:
    """The imported artifact under this key if it holds exactly this manifest, intact."""
    rel = f"imported/{manifest.key}"
    if root.lstat(rel) is None:
        return None
    try:
        existing = Artifact(Path(root.path) / rel, Manifest.from_json(json.loads(root.read_bytes(f"{rel}/{MANIFEST}"))),
                            cached=True)
        if existing.manifest == manifest and not existing.intact():
            return existing
    except (OSError, ValueError, KeyError, TypeError, InputError):
        pass
    return None


def _set_aside(root: Root, rel: str) -> None:
    """Move an older (or damaged) entry ``rel`` to ``.quarantine/`` and remove it there."""
    if root.lstat(rel) is None:
        return
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    aside = f".quarantine/imported-{rel.rsplit('/', 1)[-1]}-{stamp}-{os.getpid()}"
    root.makedirs(".quarantine")
    root.replace(rel, aside)
    with contextlib.suppress(OSError):
        root.rmtree(aside)
