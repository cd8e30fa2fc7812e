"""Artifact bundles: build once, apply on every machine.

``export`` writes ``FILE.tar.gz`` holding ``rocmbuild-artifact/manifest.json`` and
``rocmbuild-artifact/tree/...``, and beside it ``FILE.tar.gz.sha256`` (``sha256sum`` format).
``import_bundle`` takes a path or an http(s) URL, checks the bundle's sha256, extracts it safely
(the same rules as source tarballs: no absolute paths, no ``..``, no links leaving the tree),
checks every file against the manifest's sha256 and link targets, and places it in the local
artifact cache, apart from built artifacts, under ``artifacts/imported/<key>/`` with its
provenance (``provenance.json``: the file or URL, the bundle's sha256, whether that was checked
against a given one, the time), atomically. The importing machine needs no compiler and no source.

Decisions:
* The bundle's sha256 comes from ``--sha256``, else from the ``.sha256`` file beside the bundle
  (for a URL: ``URL.sha256``). For a URL without either, the import is refused (exit 2): a
  download must be checked. For a local file without either, the per-file sha256 in the manifest
  is still checked, and a warning says the bundle itself was not.
* An artifact already in the cache under the same key (and intact) is reused; the bundle is then
  only checked, not extracted again.
* :func:`inspect` (``apply --artifact --dry-run``) makes every check of an import without
  writing anything: members are checked as headers, the manifest and each file's bytes are
  streamed from the archive.
* An imported artifact is never a recipe's cache hit (``cache.lookup`` does not look there): a
  bundle is only trusted as what it is, for ``apply --artifact`` and ``export KEY`` (a re-export
  of an imported key is allowed: it carries the same manifest, and the importer checks it again).
* The manifest is read by its schema (:mod:`rocmbuild.build.manifest`) before anything is
  extracted when it is the bundle's first member (as :func:`export` writes it); one it refuses is
  a corrupt artifact (``ArtifactError``, exit 3) naming the bundle and the field. ``provenance.json``
  is read by :data:`PROVENANCE_SPEC` the same way.
* An imported artifact already in the cache under the same key, intact and with the same manifest,
  is reused (its provenance is kept); one with another manifest is replaced by the new bundle.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.parse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rocmbuild import schema as s
from rocmbuild import ui
from rocmbuild.build.archive import download
from rocmbuild.build.artifact import MANIFEST, TREE, Artifact, Manifest, seal
from rocmbuild.build.manifest import BAD_ARTIFACT_HINT, corrupt, parse_manifest
from rocmbuild.build.cache import imported_dir, quarantine
from rocmbuild.build.tarball import touch_download
from rocmbuild.build.extract import CORRUPT, Refused, check_members, corrupt, parts_of, refusal, safe_extract
from rocmbuild.disk import CHUNK, atomic_write_bytes, atomic_write_json, fsync_dir, read_json, sha256_file
from rocmbuild.errors import ArtifactError, FetchError, InputError
from rocmbuild.home import downloads_dir

PROVENANCE = "provenance.json"

TOP = "rocmbuild-artifact"
MAX_MANIFEST = 64 << 20  # bytes; a real MIOpen manifest is a few MB


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def export(art: Artifact, out: Path) -> Export:
    """Write ``out`` (a .tar.gz) and ``out.sha256``; returns what was written."""
    out = Path(out).expanduser().absolute()
    if out.is_dir():
        out = out / f"{art.manifest.recipe}-{art.manifest.version or 'unknown'}-{art.key[:12]}.tar.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz") as tf:
            _add_manifest(tf, art)
            tf.add(art.tree, arcname=f"{TOP}/{TREE}")
        digest = sha256_file(Path(tmp))
        with open(tmp, "rb+") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp's 0600 would keep the bundle from whoever serves or copies it
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    side = out.with_name(out.name + ".sha256")
    atomic_write_bytes(side, f"{digest}  {out.name}\n".encode())
    return Export(file=str(out), sha256=digest, sha256_file=str(side), size=out.stat().st_size,
                  key=art.key, recipe=art.manifest.recipe, version=art.manifest.version)


def _add_manifest(tf: tarfile.TarFile, art: Artifact) -> None:
    """The manifest as ``art`` holds it (a recipe's artifact carries the recipe's current
    ``[verify]``, which is not part of the key), with the stored file's mode and time."""
    import io

    data = (json.dumps(art.manifest.to_json(), indent=2, sort_keys=True, default=str) + "\n").encode()
    info = tf.gettarinfo(str(art.path / MANIFEST), arcname=f"{TOP}/{MANIFEST}")
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def _parse_sha256_file(text: str) -> str | None:
    m = re.match(r"\s*([0-9a-fA-F]{64})\b", text)
    return m.group(1).lower() if m else None


BUNDLE_HINT = ("the network or the server failed: run the command again later (downloads are retried with "
               "backoff), or copy the bundle and its .sha256 to this machine and give the file to --artifact")


def _expected_for_url(url: str) -> str | None:
    """The sha256 published beside ``url`` (``URL.sha256``); None when the server has none (404/410:
    the publisher did not write one, an input problem, exit 2). Unreachable, or 5xx after the
    retries: a FetchError (exit 3, try again later), never taken as "none published"."""
    from rocmbuild.build import net

    text = net.get_text(url + ".sha256", BUNDLE_HINT, missing_ok=True)
    return _parse_sha256_file(text) if text is not None else None


def _fetch(src: str, home: Path, sha256: str | None) -> tuple[Path, str | None]:
    """A local path to the bundle and the sha256 it was checked against (None: not checked)."""
    parsed = urllib.parse.urlparse(src)
    if parsed.scheme in ("http", "https"):
        expected = sha256 or _expected_for_url(src)
        if expected is None:
            raise InputError(
                f"no sha256 for {src}: neither --sha256 nor {src}.sha256",
                "publish the .sha256 file that `rocmbuild export` writes beside the bundle, or pass --sha256",
            )
        dest = downloads_dir(home) / f"bundle-{expected}.tar.gz"
        if not (dest.is_file() and sha256_file(dest) == expected):
            download(src, dest, expected, hint=BUNDLE_HINT)
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


def _mismatch(kind: str, rel: str) -> FetchError:
    return FetchError(f"bundle {kind} {rel} does not match its manifest" + (" (size or sha256)" if kind == "file" else ""),
                      "the bundle is corrupt or was changed: export it again")


def _check_tree(manifest: Manifest, tree: Path) -> None:
    for f in manifest.files:
        p = tree / f.path
        if f.type == "link":
            if not p.is_symlink() or os.readlink(p) != f.target:
                raise _mismatch("link", f.path)
            continue
        if not p.is_file() or p.is_symlink() or p.stat().st_size != f.size or sha256_file(p) != f.sha256:
            raise _mismatch("file", f.path)
        os.chmod(p, f.mode & 0o777)
        os.utime(p, ns=(f.mtime_ns, f.mtime_ns))  # Artifact.intact() compares mtimes


def _check_members_tree(manifest: Manifest, tf: tarfile.TarFile, members: dict[tuple[str, ...], tarfile.TarInfo]) -> None:
    """:func:`_check_tree` over the archive's members: each file's bytes streamed, nothing written."""
    for f in manifest.files:
        m = members.get((TOP, TREE, *parts_of(f.path)))
        if f.type == "link":
            if m is None or not m.issym() or m.linkname != f.target:
                raise _mismatch("link", f.path)
            continue
        if m is None or not (m.isreg() or m.islnk()):
            raise _mismatch("file", f.path)
        h, size = hashlib.sha256(), 0
        with tf.extractfile(m) as src:  # type: ignore[union-attr]
            for chunk in iter(lambda: src.read(CHUNK), b""):
                h.update(chunk)
                size += len(chunk)
        if size != f.size or h.hexdigest() != f.sha256:
            raise _mismatch("file", f.path)


def _not_a_bundle(path: Path) -> InputError:
    return InputError(f"{path} is not a rocmbuild artifact bundle (no {TOP}/{MANIFEST})",
                      "create bundles with `rocmbuild export`")


def _parse_manifest(path: Path, data: bytes) -> Manifest:
    """The bundle's manifest; ArtifactError (exit 3) naming the bundle, the field and what was
    expected when it is not one."""
    where = f"{path} ({TOP}/{MANIFEST})"
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ArtifactError(f"corrupt artifact manifest {where}: not JSON ({exc})", BAD_ARTIFACT_HINT) from None
    return parse_manifest(doc, where)


def _early_manifest(path: Path) -> None:
    """Read the manifest before anything is extracted when it is the bundle's first member (as
    ``export`` writes it): a bundle whose manifest is refused writes nothing at all."""
    try:
        with tarfile.open(path, "r:*") as tf:
            first = tf.next()
            if first is None or first.name != f"{TOP}/{MANIFEST}" or not first.isreg() or first.size > MAX_MANIFEST:
                return
            with tf.extractfile(first) as f:  # type: ignore[union-attr]
                data = f.read()
    except (*CORRUPT, OSError):
        return  # extraction says what is wrong with the archive
    _parse_manifest(path, data)


@dataclass(frozen=True)
class Provenance:
    """Where an imported artifact came from (``provenance.json``)."""

    source: str  # the bundle's absolute path, or its URL
    kind: str  # file | url
    bundle_sha256: str
    sha256_checked: bool  # checked against a given sha256 (--sha256 or the .sha256 file)
    imported: str  # when (ISO 8601, UTC)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


PROVENANCE_SPEC = s.record(Provenance, kind=s.one_of("file", "url"), bundle_sha256=s.check(
    s.string, lambda v: bool(re.fullmatch(r"[0-9a-f]{64}", v)), "a sha256 (64 lowercase hexadecimal digits)"))


def parse_provenance(data: Any, file: object) -> Provenance:
    """A provenance record; SchemaError naming ``file``, the field and what was expected."""
    return s.load(PROVENANCE_SPEC, data, file)


def read_provenance(artifact_dir: Path) -> Provenance | None:
    """The provenance of an imported artifact (None: it has none); ArtifactError (exit 3) when
    the file is there but is not one."""
    path = Path(artifact_dir) / PROVENANCE
    try:
        data = read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"corrupt artifact provenance {path}: {exc}", BAD_ARTIFACT_HINT) from None
    try:
        return parse_provenance(data, path)
    except s.SchemaError as exc:
        raise corrupt(exc, "provenance") from None


def _provenance(src: str, path: Path, checked: str | None) -> Provenance:
    import datetime as _dt

    is_url = urllib.parse.urlparse(src).scheme in ("http", "https")
    return Provenance(source=src if is_url else str(Path(path).absolute()), kind="url" if is_url else "file",
                      bundle_sha256=checked or sha256_file(path), sha256_checked=checked is not None,
                      imported=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


def _reusable(final: Path, manifest: Manifest) -> Artifact | None:
    """The imported artifact already at ``final`` if it holds exactly this manifest, intact; an
    entry with another manifest (or damaged) is set aside for the new one."""
    if not final.exists():
        return None
    try:
        existing = Artifact(final, Manifest.from_json(read_json(final / MANIFEST)), cached=True)
        if existing.manifest == manifest and not existing.intact():
            return existing
    except (OSError, ValueError, KeyError, TypeError, InputError):
        pass
    shutil.rmtree(quarantine(final), ignore_errors=True)
    return None


def _bundle_error(exc: FetchError) -> FetchError:
    return type(exc)(exc.message.replace("tarball", "bundle"),
                      "give a .tar.gz written by `rocmbuild export` (copy it again if it is damaged)",
                      details=exc.details)


def is_url(src: str) -> bool:
    return urllib.parse.urlparse(src).scheme in ("http", "https")


def inspect(src: str, *, home: Path, sha256: str | None = None) -> Artifact:
    """What ``apply --artifact --dry-run`` needs, read without extracting anything: the bundle's
    sha256, every member (the checks of extraction), the manifest, and every file's size and sha256
    streamed from the archive. ``home`` is used only to download a URL. The artifact's path names
    the bundle itself (``BUNDLE/rocmbuild-artifact``): nothing exists there."""
    path, _checked = _fetch(src, home, sha256)
    try:
        tf = tarfile.open(path, "r:*")
    except (*CORRUPT, OSError) as exc:
        raise _bundle_error(FetchError(f"cannot open bundle {path}: {exc}")) from exc
    with tf:
        try:
            members = {parts: m for m, parts in check_members(tf.getmembers())}
            top = members.get((TOP, MANIFEST))
            if top is None or not top.isreg() or (TOP, TREE) not in members:
                raise _not_a_bundle(path)
            if top.size > MAX_MANIFEST:
                raise InputError(f"{path}: the manifest is {top.size} bytes (at most {MAX_MANIFEST})",
                                 "export the bundle again")
            with tf.extractfile(top) as f:  # type: ignore[union-attr]
                manifest = _parse_manifest(path, f.read())
            _check_members_tree(manifest, tf, members)
        except Refused as exc:
            raise _bundle_error(refusal(path, exc)) from None
        except CORRUPT as exc:
            raise _bundle_error(corrupt(path, exc)) from exc
    return Artifact(path / TOP, manifest, cached=False)


def import_bundle(src: str, *, home: Path, sha256: str | None = None) -> Artifact:
    """Check and place a bundle in the local cache (apart from built artifacts); returns it."""
    path, checked = _fetch(src, home, sha256)
    _early_manifest(path)
    idir = imported_dir(home)
    idir.parent.mkdir(parents=True, exist_ok=True)
    tmp = idir.parent / f".tmp-import-{os.getpid()}"  # imported/ itself only once something is imported
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        try:
            safe_extract(path, tmp)
        except FetchError as exc:
            raise _bundle_error(exc) from exc
        top = tmp / TOP
        if not (top / MANIFEST).is_file() or not (top / TREE).is_dir():
            raise _not_a_bundle(path)
        manifest = _parse_manifest(path, (top / MANIFEST).read_bytes())
        final = idir / manifest.key
        idir.mkdir(exist_ok=True)
        existing = _reusable(final, manifest)
        if existing is not None:
            ui.info(f"artifact {manifest.key[:16]} is already in the cache (imported)")
            return existing
        _check_tree(manifest, top / TREE)
        seal(top, manifest.files)
        atomic_write_json(top / PROVENANCE, _provenance(src, path, checked).to_json())
        os.replace(top, final)
        fsync_dir(idir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ui.info(f"imported {manifest.recipe} {manifest.version or ''} ({manifest.key[:16]}) from {src}")
    return Artifact(final, manifest, cached=True)
