"""Reading an artifact bundle: the manifest first, then only what it lists (docs/cache.md, "Bundles").

A bundle is read in two passes over the archive; the first writes nothing.

**Pass 1, the headers** (:func:`read_plan`):

1. The first member (after at most a ``rocmbuild-artifact/`` directory entry) must be
   ``rocmbuild-artifact/manifest.json``: a regular, non-sparse file of at most
   :data:`MAX_MANIFEST` bytes. It is read and parsed (``Manifest.from_json``: its schema, its key,
   every path inside the tree) and its recipe name and version are checked against the grammar of
   :mod:`rocmbuild.names` (:func:`checked_names`; an invalid one is a corrupt artifact, exit 3).
   An archive whose first member is not below ``rocmbuild-artifact/`` is not a bundle (exit 2);
   one whose first member below it is anything but the manifest is refused (exit 3). Decision:
   gzip is a stream and rocmbuild always writes the manifest first, so rocmbuild never reads (let
   alone extracts) an archive to look for its manifest.
2. Every further header is judged *as it is read*, before ``tarfile`` moves past its data (so a
   bomb's data is not even decompressed): safe (:func:`~rocmbuild.sources.archive.unsafe_member`:
   no absolute name, no ``..``, no device or FIFO), not sparse (GNU ``S`` or PAX ``GNU.sparse.*``:
   a bundle never holds one), below ``rocmbuild-artifact/tree/``, and -- unless a directory --
   listed in the manifest as what it is: a file is a regular member of exactly the declared size
   (or a hardlink), a link is a symlink; no path twice. A directory is never written for itself:
   only the parents of listed entries are made (an empty directory in an old bundle is skipped).
3. The headers together pass :func:`~rocmbuild.sources.extract.check_members` (duplicates, paths
   through links or files, links leaving the archive when resolved over it), and the members
   below ``rocmbuild-artifact/tree/`` pass it again as a tree of their own
   (:func:`~rocmbuild.sources.extract.subtree`): a link may not climb out of ``tree/`` either.
4. Each link's text is the manifest's, each hardlink names a file member listed with the same size
   and sha256, and every manifest entry is in the bundle.

So before a byte is written the sum of what will be written is at most the manifest's declared
total (each member its declared size, none twice), and :func:`extract_into` refuses (exit 3,
"no space") when that total does not fit on the filesystem.

**Pass 2, the bytes** (:func:`extract_into`): only the planned members are written, beneath a
:class:`~rocmbuild.fs.root.Root` (no symlink followed, whatever is on disk), each file created
``O_EXCL``, streamed through sha256 with a budget of its declared size, compared, given its
sealed mode (write bits dropped) and the manifest's mtime, fsynced, and its identity recorded
(the sidecar of :func:`rocmbuild.store.artifact.seal`). A hardlink becomes a copy of its file
(no two tree paths share an inode). :func:`check_streamed` is the same pass without writing
(``apply --artifact --dry-run``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rocmbuild.sources.archive import unsafe_member
from rocmbuild.store.artifact import IDENTITY, MANIFEST, TREE, FileEntry, Manifest, identity
from rocmbuild.sources.extract import CORRUPT, Refused, check_members, corrupt, parts_of, refusal, subtree
from rocmbuild.fs.disk import CHUNK
from rocmbuild.store.manifest import BAD_ARTIFACT_HINT, parse_manifest
from rocmbuild.errors import ArtifactError, BuildFilesystemError, FetchError, InputError
from rocmbuild.names import bad_name_reason
from rocmbuild.fs.root import Root

TOP = "rocmbuild-artifact"
MAX_MANIFEST = 64 << 20  # bytes; a real MIOpen manifest is a few MB
_HINT = "give a .tar.gz written by `rocmbuild export` (copy it again if it is damaged)"


@dataclass(frozen=True)
class Planned:
    """A member that will be written, and the manifest entry it must match."""

    member: tarfile.TarInfo
    entry: FileEntry
    source: tarfile.TarInfo | None = None  # the regular member whose bytes it carries (a file, a hardlink)


@dataclass(frozen=True)
class Plan:
    """What pass 1 found: the manifest (and its bytes as the bundle holds them) and the members."""

    path: Path
    manifest: Manifest
    manifest_bytes: bytes
    members: tuple[Planned, ...]

    @property
    def declared(self) -> int:
        return sum(f.size for f in self.manifest.files if f.type == "file")


def bundle_error(exc: FetchError) -> FetchError:
    """``exc`` worded for a bundle (the extractor speaks of tarballs)."""
    return type(exc)(exc.message.replace("tarball", "bundle"), _HINT, details=exc.details)


def mismatch(kind: str, rel: str) -> FetchError:
    return FetchError(f"bundle {kind} {rel} does not match its manifest" + (" (size or sha256)" if kind == "file" else ""),
                      "the bundle is corrupt or was changed: export it again")


def not_a_bundle(path: Path) -> InputError:
    return InputError(f"{path} is not a rocmbuild artifact bundle (no {TOP}/{MANIFEST} first)",
                      "create bundles with `rocmbuild export`")


def checked_names(manifest: Manifest, where: str) -> tuple[str, str | None]:
    """The manifest's recipe name and version, each valid by :mod:`rocmbuild.names` (they reach
    file names and terminals); else a :class:`FetchError` (exit 3): the artifact is corrupt."""
    for kind, value in (("recipe", manifest.recipe), ("version", manifest.version)):
        why = None if kind == "version" and value is None else bad_name_reason(kind, value)
        if why:
            raise FetchError(f"{where}: the manifest's {kind} is invalid ({why}): a corrupt or hostile artifact; "
                             "nothing was written",
                             "build the artifact again, or export it again on the machine that built it",
                             details={"field": kind, "reason": why})
    return manifest.recipe, manifest.version


def open_bundle(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except CORRUPT + (OSError,) as exc:
        raise bundle_error(FetchError(f"cannot open bundle {path}: {exc}")) from exc


def read_plan(tf: tarfile.TarFile, path: Path) -> Plan:
    """Pass 1 (see the module notes): every refusal is a :class:`FetchError` naming the member
    (exit 3), an archive that is not a bundle an :class:`InputError` (exit 2)."""
    try:
        first = _first(tf, path)
        data = _read(tf, first)
        manifest = _parse_manifest(path, data)
        checked_names(manifest, f"bundle {path.name}")
        members = _headers(tf, manifest, [first], path)
        return Plan(path, manifest, data, members)
    except Refused as exc:
        raise bundle_error(refusal(path, exc)) from None
    except CORRUPT as exc:
        raise bundle_error(corrupt(path, exc)) from exc


def _first(tf: tarfile.TarFile, path: Path) -> tarfile.TarInfo:
    m = tf.next()
    if m is not None and m.isdir() and parts_of(m.name) == (TOP,):
        m = tf.next()
    why = unsafe_member(m) if m is not None else None
    if m is not None and why:
        raise Refused(m.name, why)
    if m is None or parts_of(m.name)[:1] != (TOP,) or len(parts_of(m.name)) < 2:
        raise not_a_bundle(path)
    if parts_of(m.name) != (TOP, MANIFEST):
        raise Refused(m.name, f"it comes before {TOP}/{MANIFEST}: a bundle's manifest is its first member")
    if not m.isreg() or m.issparse():
        raise Refused(m.name, "the manifest is not a plain file")
    if m.size > MAX_MANIFEST:
        raise Refused(m.name, f"the manifest is {m.size} bytes (at most {MAX_MANIFEST})")
    return m


def _read(tf: tarfile.TarFile, m: tarfile.TarInfo) -> bytes:
    f = tf.extractfile(m)
    if f is None:
        raise Refused(m.name, "the manifest is not a plain file")
    with f:
        return f.read(MAX_MANIFEST + 1)


def _bytes_of(tf: tarfile.TarFile, p: Planned) -> IO[bytes]:
    """The bytes a planned file or hardlink carries: its regular source member's."""
    f = tf.extractfile(p.source) if p.source is not None else None
    if f is None:  # the plan gives every file and hardlink a regular source
        raise Refused(p.member.name, "no regular member carries its bytes")
    return f


def _parse_manifest(path: Path, data: bytes) -> Manifest:
    """The bundle's manifest by its schema; ArtifactError (exit 3) naming the bundle, the field
    and what was expected when it is not one."""
    where = f"{path} ({TOP}/{MANIFEST})"
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ArtifactError(f"corrupt artifact manifest {where}: not JSON ({exc})", BAD_ARTIFACT_HINT) from None
    return parse_manifest(doc, where)


def _kind(m: tarfile.TarInfo) -> str:
    return "directory" if m.isdir() else "symlink" if m.issym() else "hardlink" if m.islnk() else "file"


def _judge(m: tarfile.TarInfo, files: dict[str, FileEntry], seen: set[str]) -> FileEntry | None:
    """One header against the manifest (step 2): its entry, None for a directory, else Refused."""
    why = unsafe_member(m)
    if why:
        raise Refused(m.name, why)
    if m.issparse() or m.type == tarfile.GNUTYPE_SPARSE:
        raise Refused(m.name, f"a sparse member of {m.size} bytes: a bundle never holds one")
    p = parts_of(m.name)
    if p in ((TOP,), (TOP, TREE)) and m.isdir():
        return None
    if p[:2] != (TOP, TREE) or len(p) < 3:
        raise Refused(m.name, f"not below {TOP}/{TREE}/ and not the manifest: not part of an artifact bundle")
    rel = "/".join(p[2:])
    f = files.get(rel)
    if m.isdir():
        if f is not None:
            raise Refused(m.name, f"a directory where the manifest lists a {f.type}")
        return None
    if f is None:
        raise Refused(m.name, "not listed in the bundle's manifest")
    if rel in seen:
        raise Refused(m.name, "a duplicate entry: it would replace the one before it")
    if f.type == "link" and not m.issym() or f.type == "file" and not (m.isreg() or m.islnk()):
        raise Refused(m.name, f"a {_kind(m)} where the manifest lists a {f.type}")
    if m.isreg() and m.size != f.size:
        raise Refused(m.name, f"{m.size} bytes where the manifest declares {f.size}")
    seen.add(rel)
    return f


def _headers(tf: tarfile.TarFile, manifest: Manifest, read: list[tarfile.TarInfo], path: Path) -> tuple[Planned, ...]:
    files = {f.path: f for f in manifest.files}
    planned: list[Planned] = []
    seen: set[str] = set()
    while (m := tf.next()) is not None:  # judged before tarfile skips (decompresses) its data
        read.append(m)
        f = _judge(m, files, seen)
        if f is not None:
            planned.append(Planned(m, f))
    checked = check_members(read)  # the model of the whole archive, then of the tree on its own:
    if planned:  # a link must stay in tree/, which becomes imported/<key>/tree/
        subtree(checked, TREE, path)
    regular = {parts_of(p.member.name): p for p in planned if p.member.isreg()}
    out = []
    for p in planned:
        m, f = p.member, p.entry
        if m.issym() and m.linkname != f.target:
            raise Refused(m.name, f"a symlink to {m.linkname} where the manifest says {f.target}")
        src = regular.get(parts_of(m.linkname)) if m.islnk() else p  # None: only for a hardlink
        if src is None or (m.islnk() and (src.entry.size, src.entry.sha256) != (f.size, f.sha256)):
            raise Refused(m.name, f"a hardlink to {m.linkname}, not a file the manifest lists with the same bytes")
        out.append(Planned(m, f, None if m.issym() else src.member))
    missing = sorted(set(files) - seen)
    if missing:
        raise FetchError(f"the bundle has no {missing[0]}, which its manifest lists"
                         + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "") + "; nothing was extracted",
                         "the bundle is incomplete: export it again", details={"missing": missing[:20]})
    return tuple(out)


# --------------------------------------------------------------------------------------------
# pass 2: the bytes


def _stream(src: IO[bytes], size: int, rel: str, out: int | None = None) -> str:
    """At most ``size`` bytes of ``src`` (into ``out``), hashed; exactly ``size`` or a mismatch."""
    h, left = hashlib.sha256(), size
    while left > 0:
        chunk = src.read(min(CHUNK, left))
        if not chunk:
            break
        h.update(chunk)
        left -= len(chunk)
        if out is not None:
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
    if left or src.read(1):
        raise mismatch("file", rel)
    return h.hexdigest()


def check_streamed(tf: tarfile.TarFile, plan: Plan) -> None:
    """Pass 2 without writing: every file's bytes streamed and compared (the dry run)."""
    try:
        for p in plan.members:
            if p.member.issym():
                continue
            with _bytes_of(tf, p) as src:
                if _stream(src, p.entry.size, p.entry.path) != p.entry.sha256:
                    raise mismatch("file", p.entry.path)
    except CORRUPT as exc:
        raise bundle_error(corrupt(plan.path, exc)) from exc


def sealed_mode(mode: int) -> int:
    """A file's mode in the cache: the manifest's read and exec bits, never write (``seal``)."""
    return (mode & 0o555) | 0o400


def extract_into(tf: tarfile.TarFile, plan: Plan, root: Root, dest: str) -> dict[str, Any]:
    """Write the planned members below ``dest/tree/`` beneath ``root`` and ``dest/manifest.json``
    (the bundle's bytes) and ``dest/identity.json``; returns the identities."""
    free = os.fstatvfs(root.fd)
    if free.f_bavail * free.f_frsize < plan.declared:
        raise BuildFilesystemError(
            f"no space to import {plan.path.name}: its manifest declares {plan.declared} bytes, "
            f"{free.f_bavail * free.f_frsize} are free in {root.path}; nothing was extracted",
            "free some space (`rocmbuild cache gc`), or set ROCMBUILD_HOME to a larger filesystem")
    ids: dict[str, Any] = {}
    dirs = {f"{dest}/{TREE}"}
    root.makedirs(f"{dest}/{TREE}")
    try:
        for p in plan.members:
            rel = f"{dest}/{TREE}/{p.entry.path}"
            parent = rel.rsplit("/", 1)[0]
            if parent not in dirs:
                root.makedirs(parent)
                dirs.add(parent)
            if p.member.issym():
                assert p.entry.target is not None  # a link entry has its text (the manifest's check)
                with root.parent(rel) as (dfd, name):
                    os.symlink(p.entry.target, name, dir_fd=dfd)
                continue
            with _bytes_of(tf, p) as src:
                ids[p.entry.path] = _write_file(root, rel, src, p.entry)
    except CORRUPT as exc:
        raise bundle_error(corrupt(plan.path, exc)) from exc
    for d in sorted(dirs, key=len, reverse=True):
        root.fsync(d)
    root.write_atomic(f"{dest}/{MANIFEST}", plan.manifest_bytes)
    root.write_atomic(f"{dest}/{IDENTITY}", (json.dumps({"schema": 1, "files": ids}, indent=2, sort_keys=True)
                                              + "\n").encode())
    return ids


def _write_file(root: Root, rel: str, src: IO[bytes], f: FileEntry) -> dict[str, int]:
    fd = root.open_file(rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if _stream(src, f.size, f.path, fd) != f.sha256:
            raise mismatch("file", f.path)
        os.fchmod(fd, sealed_mode(f.mode))
        os.utime(fd, ns=(f.mtime_ns, f.mtime_ns))  # Artifact.intact() compares mtimes
        os.fsync(fd)
        return identity(os.fstat(fd))  # after the chmod and utime, which move the ctime
    finally:
        os.close(fd)
