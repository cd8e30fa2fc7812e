"""Artifacts: a staged install tree plus ``manifest.json``, content-addressed by the build key.

Layout of one artifact, ``$ROCMBUILD_HOME/artifacts/<key>/`` (built) or
``artifacts/imported/<key>/`` (from a bundle, with ``provenance.json``)::

    manifest.json      recipe, key, commit, version, inputs, every file, every library
    identity.json      each tree file's identity when it was published (size, mtime_ns,
                       ctime_ns, inode): the sidecar that lets a reflink skip reading the bytes
    tree/              the install tree, relative to the recipe's install prefix
                       (e.g. tree/lib/libMIOpen.so.1.0, tree/share/miopen/db/...)

Decisions: the artifact does not depend on any target and no target shares an inode with it
(targets get a reflink or a hashed copy, see :func:`rocmbuild.disk.own_copy`). :func:`seal`
makes its files read-only and records their identities *after* the chmod (a chmod moves the
ctime); a file whose identity differs later is hashed before it is trusted
(:meth:`Artifact.tampered`). :meth:`Artifact.intact` stays the cheap size + mtime check of a
cache lookup; :meth:`Artifact.bytes_problems` re-hashes everything (``rocmbuild cache verify``).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from rocmbuild.build.archive import inside
from rocmbuild.disk import atomic_write_json, make_read_only, read_json, sha256_file
from rocmbuild.errors import InputError

SCHEMA = 1
MANIFEST = "manifest.json"
IDENTITY = "identity.json"
TREE = "tree"
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


def _inside(rel: str) -> bool:
    """True when ``rel`` is a non-empty relative POSIX path that stays inside its tree."""
    return bool(rel) and posixpath.normpath(rel) != "." and inside(rel)


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the tree
    type: str  # "file" | "link"
    size: int = 0
    sha256: str | None = None
    mode: int = 0
    mtime_ns: int = 0
    target: str | None = None  # for links: the link's text (relative, as installed)


@dataclass(frozen=True)
class LibraryEntry:
    name: str  # the stem from [install] libraries, e.g. "libMIOpen"
    file: str  # the real file, relative to the tree: "lib/libMIOpen.so.1.0"
    soname: str | None  # from the ELF dynamic section: "libMIOpen.so.1"
    links: tuple[str, ...]  # links in the tree that resolve to it: "lib/libMIOpen.so", "lib/libMIOpen.so.1"
    chain: tuple[str, ...]  # basenames, dev link first: ("libMIOpen.so", "libMIOpen.so.1", "libMIOpen.so.1.0")
    sha256: str = ""
    size: int = 0
    other_links: tuple[str, ...] = ()  # links elsewhere in the tree that resolve to it (never mapped)


@dataclass(frozen=True)
class Manifest:
    recipe: str
    key: str
    version: str | None  # read from the checkout (or None)
    expect_version: str | None  # what verification expects (recipe's verify.version, "source" resolved)
    encoding: str  # miopen | cudnn
    smoke: str | None
    commit: str | None
    ref: str | None
    url: str
    install_prefix: str
    files: tuple[FileEntry, ...]
    libraries: tuple[LibraryEntry, ...]
    data: tuple[str, ...] = ()
    inputs: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    schema: int = SCHEMA
    gpu_targets: tuple[str, ...] | None = None  # GPU_TARGETS built for; None: none named (see recipe.arch)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Manifest":
        d = dict(d)
        if d.get("schema") != SCHEMA:
            raise InputError(
                f"unsupported manifest schema {d.get('schema')!r} (this rocmbuild reads {SCHEMA})",
                "rebuild the artifact or upgrade rocmbuild",
            )
        d["files"] = tuple(FileEntry(**f) for f in d["files"])
        d["libraries"] = tuple(
            LibraryEntry(**{**lib, "links": tuple(lib["links"]), "chain": tuple(lib["chain"]),
                            "other_links": tuple(lib.get("other_links", ()))})
            for lib in d["libraries"]
        )
        d["data"] = tuple(d.get("data", ()))
        if d.get("gpu_targets") is not None:
            t = d["gpu_targets"]
            if not isinstance(t, list) or not all(isinstance(x, str) for x in t):
                raise TypeError(f"gpu_targets must be a list of strings, not {t!r:.80}")
            d["gpu_targets"] = tuple(t)
        m = cls(**d)
        m.check_paths()
        return m

    def check_paths(self) -> None:
        """A manifest may come from another machine (a bundle): its key must be a sha256 and every
        path must stay inside the tree (no absolute paths, no ``..``, no link leaving the tree),
        since those paths become paths in the cache and in the target."""
        def bad(what: str, value: str) -> InputError:
            return InputError(f"manifest of artifact {self.key[:16]!r}: unsafe {what} {value!r}",
                              "the bundle is corrupt or malicious; build or export it again")

        if not _KEY_RE.match(str(self.key)):
            raise bad("key", str(self.key))
        rels = [f.path for f in self.files] + list(self.data)
        for lib in self.libraries:
            rels += [lib.file, *lib.links, *lib.other_links]
        for rel in rels:
            if not _inside(rel):
                raise bad("path", rel)
        for f in self.files:
            if f.type == "link" and (f.target is None or not _inside(posixpath.join(posixpath.dirname(f.path), f.target))):
                raise bad("link target", f"{f.path} -> {f.target}")

    def library(self, name: str) -> LibraryEntry | None:
        for lib in self.libraries:
            if lib.name == name:
                return lib
        return None

    def file(self, rel: str) -> FileEntry | None:
        for f in self.files:
            if f.path == rel:
                return f
        return None


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

    def recorded(self) -> dict[str, dict[str, int]]:
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


def _recorded(root: Path) -> dict[str, dict[str, int]]:
    try:
        data = read_json(Path(root) / IDENTITY)
        files = data["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return files if isinstance(files, dict) else {}


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
    """The DT_SONAME of an ELF shared object (pyelftools), or None."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        if tag.entry.d_tag == "DT_SONAME":
                            return tag.soname
    except (ELFError, OSError):
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
