"""Artifacts: a staged install tree plus ``manifest.json``, content-addressed by the build key.

Layout of one artifact, ``$ROCMBUILD_HOME/artifacts/<key>/`` (built) or
``artifacts/imported/<key>/`` (from a bundle, with ``provenance.json``)::

    manifest.json      recipe, key, commit, version, inputs, every file, every library
    identity.json      each tree file's identity when it was published (size, mtime_ns,
                       ctime_ns, inode): the sidecar that lets a reflink skip reading the bytes
    tree/              the install tree, relative to the recipe's install prefix
                       (e.g. tree/lib/libMIOpen.so.1.0, tree/share/miopen/db/...)

The manifest's values and its schema are in :mod:`rocmbuild.store.manifest` (re-exported here);
``identity.json`` is read by :data:`IDENTITY_SPEC` (one that is there but is not one: exit 3).

Decisions: the artifact does not depend on any target and no target shares an inode with it
(targets get a reflink or a hashed copy, see :meth:`rocmbuild.fs.root.Root.copy_in`). :func:`seal`
makes its files read-only and records their identities *after* the chmod (a chmod moves the
ctime); a file whose identity differs later is hashed before it is trusted
(:meth:`Artifact.tampered`). :meth:`Artifact.intact` stays the cheap size + mtime check of a
cache lookup; :meth:`Artifact.bytes_problems` re-hashes everything (``rocmbuild cache verify``).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rocmbuild import schema as s
from rocmbuild.store.manifest import (MANIFEST, SCHEMA, FileEntry, LibraryEntry, Manifest, corrupt,  # noqa: F401
                                      parse_manifest, read_manifest)
from rocmbuild.fs.disk import atomic_write_json, make_read_only, read_json, sha256_file
from rocmbuild.errors import ArtifactError, InputError

IDENTITY = "identity.json"
TREE = "tree"


@dataclass(frozen=True)
class Artifact:
    path: Path
    manifest: Manifest
    cached: bool = False

    @property
    def key(self) -> str:
        return self.manifest.key

    @property
    def tree(self) -> Path:
        return self.path / TREE

    def file(self, rel: str) -> Path:
        return self.tree / rel

    def intact(self) -> list[str]:
        """Relative paths whose size, mtime or presence differ from the manifest (empty: intact)."""
        bad = []
        for f in self.manifest.files:
            p = self.tree / f.path
            try:
                st = p.lstat()
            except FileNotFoundError:
                bad.append(f.path)
                continue
            if f.type == "link":
                if not stat.S_ISLNK(st.st_mode) or os.readlink(p) != f.target:
                    bad.append(f.path)
            elif not stat.S_ISREG(st.st_mode) or st.st_size != f.size or st.st_mtime_ns != f.mtime_ns:
                bad.append(f.path)
        return bad


    @property
    def imported(self) -> bool:
        """From a bundle (stored apart, under ``artifacts/imported/``), not built here."""
        return self.path.parent.name == "imported"

    def recorded(self) -> dict[str, dict[str, int] | None]:
        """The identities :func:`seal` recorded (empty: none, e.g. an artifact made before them)."""
        return _recorded(self.path)

    def tampered(self) -> list[str]:
        """Files whose identity differs from the recorded one *and* whose bytes no longer hash to
        the manifest's sha256 (only the changed ones are read)."""
        rec = self.recorded()
        changed = [f.path for f in self.manifest.files
                   if f.type == "file" and f.path in rec and _identity_of(self.tree / f.path) != rec[f.path]]
        return self.bytes_problems(changed) if changed else []

    def bytes_problems(self, rels: Iterable[str] | None = None) -> list[str]:
        """What differs from the manifest, every byte read: ``"<path>: <why>"`` per bad entry."""
        want = None if rels is None else set(rels)
        out = []
        for f in self.manifest.files:
            if want is not None and f.path not in want:
                continue
            p = self.tree / f.path
            try:
                st = p.lstat()
            except FileNotFoundError:
                out.append(f"{f.path}: missing")
                continue
            if f.type == "link":
                if not stat.S_ISLNK(st.st_mode) or os.readlink(p) != f.target:
                    out.append(f"{f.path}: not the link -> {f.target}")
            elif not stat.S_ISREG(st.st_mode):
                out.append(f"{f.path}: not a regular file")
            elif st.st_size != f.size:
                out.append(f"{f.path}: size {st.st_size}, manifest {f.size}")
            elif sha256_file(p) != f.sha256:
                out.append(f"{f.path}: sha256 differs from the manifest")
        return out


def identity(st: os.stat_result) -> dict[str, int]:
    """A file's identity as :func:`seal` records it in ``identity.json``."""
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino}


def _identity_of(path: Path) -> dict[str, int] | None:
    try:
        return identity(os.lstat(path))
    except OSError:
        return None


_ID = s.obj({k: (s.integer, s.REQUIRED) for k in ("size", "mtime_ns", "ctime_ns", "inode")}, keep=False)
IDENTITY_SPEC = s.obj({"schema": (s.check(s.integer, lambda v: v == 1, "1"), s.REQUIRED),
                       "files": (s.dict_of(s.optional(_ID)), s.REQUIRED)})


def parse_identity(data: object, file: object) -> dict[str, dict[str, int] | None]:
    """An identity record (``identity.json``): each file's identity (None: none could be taken);
    SchemaError naming ``file`` and the field."""
    return s.load(IDENTITY_SPEC, data, file)["files"]


def _recorded(root: Path) -> dict[str, dict[str, int] | None]:
    """The identities :func:`seal` recorded; empty when there is no record (an artifact made
    before them: its files are hashed). A record that is there but not one is a corrupt artifact
    (ArtifactError, exit 3): ``cache verify`` records the identities again."""
    path = Path(root) / IDENTITY
    try:
        data = read_json(path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        data = exc
    try:
        if isinstance(data, Exception):
            raise s.SchemaError("", "a JSON identity record", f"{type(data).__name__}: {data}", str(path))
        return parse_identity(data, path)
    except s.SchemaError as exc:
        raise ArtifactError(f"corrupt artifact identity record {exc}",
                            "run `rocmbuild cache verify`: it hashes every file of the artifact again and records "
                            "their identities anew", details={"schema": exc.to_json()}) from None


def seal(root: Path, files: Iterable[FileEntry]) -> None:
    """Make an artifact's tree read-only, fsync it, and record each file's identity (in this
    order: the chmod moves the ctime, the identities are taken after it)."""
    root = Path(root)
    make_read_only(root / TREE)
    fsync_tree(root / TREE)
    ids = {f.path: _identity_of(root / TREE / f.path) for f in files if f.type == "file"}
    atomic_write_json(root / IDENTITY, {"schema": 1, "files": ids})


def artifact_root(path: Path) -> Path | None:
    """The artifact directory holding ``path`` (a file below its ``tree/``), or None."""
    p = Path(path)
    for parent in p.parents:
        if parent.name == TREE and (parent.parent / MANIFEST).is_file():
            return parent.parent
    return None


def trust_check(source: Path):
    """For a file in an artifact's tree: a predicate on its ``fstat`` that is true when the file is
    still the one :func:`seal` recorded (None: nothing recorded, so it must be hashed)."""
    root = artifact_root(source)
    if root is None:
        return None
    rel = Path(source).relative_to(root / TREE).as_posix()
    want = _recorded(root).get(rel)
    if not want:
        return None

    def same(st: os.stat_result) -> bool:
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
                "inode": st.st_ino} == want

    return same


def fsync_tree(root: Path) -> None:
    """fsync every regular file and directory below ``root`` (before an artifact is published by
    rename: after a power cut a published artifact must not hold empty or partial files)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_soname(path: Path) -> str | None:
    """The DT_SONAME of an ELF shared object (pyelftools), or None.

    Read from the ``PT_DYNAMIC`` segment, as the loader reads it: a few program headers, where
    walking the section headers builds an object per section (the check before a swap reads the
    SONAME of every library torch's process maps; over 600 system libraries here the same answers
    in 24% less time). A file without that segment (an object file) falls back to the
    ``.dynamic`` section."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection, DynamicSegment
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            holders: list[DynamicSegment | DynamicSection] = [
                seg for seg in elf.iter_segments() if isinstance(seg, DynamicSegment)]
            for holder in holders or [s for s in elf.iter_sections() if isinstance(s, DynamicSection)]:
                for tag in holder.iter_tags():
                    if tag.entry.d_tag == "DT_SONAME":
                        return tag.soname  # type: ignore[attr-defined]  # pyelftools sets it at run time
    except (ELFError, OSError, ValueError):
        return None
    return None


def scan_tree(tree: Path) -> tuple[FileEntry, ...]:
    """Every file and symlink below ``tree`` (sorted), with size, sha256 and mode."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            p = Path(dirpath) / name
            rel = p.relative_to(tree).as_posix()
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                entries.append(FileEntry(rel, "link", target=os.readlink(p)))
            elif stat.S_ISREG(st.st_mode):
                entries.append(
                    FileEntry(rel, "file", st.st_size, sha256_file(p), stat.S_IMODE(st.st_mode), st.st_mtime_ns)
                )
    return tuple(sorted(entries, key=lambda e: e.path))


def is_glob(pattern: str) -> bool:
    """``[install] libraries`` names a set by a glob (``libcudnn*``) or one library by its stem."""
    return any(c in pattern for c in "*?[")


def _matches(name: str, pattern: str) -> bool:
    if is_glob(pattern):
        return fnmatch.fnmatchcase(name, pattern) and (name.endswith(".so") or ".so." in name)
    return name == pattern + ".so" or name.startswith(pattern + ".so.")


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _reals(tree: Path, files: list[FileEntry], pattern: str) -> list[FileEntry]:
    reals = [f for f in files if f.type == "file" and _matches(Path(f.path).name, pattern)]
    if is_glob(pattern):
        reals = [f for f in reals if _is_elf(tree / f.path)]  # a set: shared objects only
    if not reals:
        raise InputError(
            f"library '{pattern}' was not found in the staged install tree",
            f"check [install] libraries; the tree has: {', '.join(f.path for f in files[:20])}",
        )
    if not is_glob(pattern) and len(reals) > 1:
        raise InputError(
            f"library '{pattern}' matches several real files: {', '.join(f.path for f in reals)}",
            "name the library more precisely in [install] libraries",
        )
    return reals


def find_libraries(tree: Path, files: Iterable[FileEntry], stems: Iterable[str]) -> tuple[LibraryEntry, ...]:
    """For each stem (or glob: every shared object it matches, one entry each), the real ELF file
    and the links that resolve to it. ``links`` are the names in the file's own directory (its
    chain); a link elsewhere in the tree (MIOpen's ``miopen/lib/libMIOpen.so``) is recorded in
    ``other_links`` and never mapped onto a target."""
    files = list(files)
    out: dict[str, LibraryEntry] = {}
    for pattern in stems:
        for real in _reals(tree, files, pattern):
            if real.path in out:
                continue
            name = Path(real.path).name
            real_abs = (tree / real.path).resolve()
            links = [f.path for f in files if f.type == "link" and (tree / f.path).resolve() == real_abs]
            here = posixpath.dirname(real.path)
            own = sorted((x for x in links if posixpath.dirname(x) == here), key=lambda x: (len(x), x))
            stem = pattern if not is_glob(pattern) else name.split(".so", 1)[0]
            out[real.path] = LibraryEntry(
                name=stem, file=real.path, soname=read_soname(tree / real.path), links=tuple(own),
                chain=tuple(Path(x).name for x in own) + (name,), sha256=real.sha256 or "",
                size=real.size, other_links=tuple(sorted(set(links) - set(own))),
            )
    return tuple(out.values())
