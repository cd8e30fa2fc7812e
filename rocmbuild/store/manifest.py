"""The manifest of an artifact (``manifest.json``): its frozen values and its one schema.

A manifest may come from another machine (a bundle), so nothing in it is trusted before the
schema has read it: every field has its type, the recipe, version and commit their grammar
(:mod:`rocmbuild.names`), the key is a sha256, and every path stays inside the tree (relative,
no ``..`` above the root, no NUL; a link's target too), since those paths become paths in the
cache and in the target. :meth:`Manifest.from_json` raises :class:`~rocmbuild.schema.SchemaError`
(a ``ValueError``); :func:`parse_manifest` and :func:`read_manifest` raise
:class:`~rocmbuild.errors.ArtifactError` (exit 3: a corrupt artifact) naming the file and the field.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rocmbuild import schema as s
from rocmbuild.sources.archive import inside
from rocmbuild.sources.debarchive import Package, valid_field
from rocmbuild.fs.disk import read_json
from rocmbuild.errors import ArtifactError

SCHEMA = 1
MANIFEST = "manifest.json"
KEY_RE = re.compile(r"^[0-9a-f]{64}$")
SHA_RE = KEY_RE
ENCODINGS = ("miopen", "cudnn")
BAD_ARTIFACT_HINT = ("the artifact is corrupt or was not written by rocmbuild: build or export it again "
                     "(`rocmbuild cache verify` sets a damaged cached one aside)")


def is_inside(rel: object) -> bool:
    """True when ``rel`` is a non-empty relative POSIX path that stays inside its tree."""
    return (isinstance(rel, str) and bool(rel) and "\x00" not in rel and posixpath.normpath(rel) != "."
            and inside(rel))


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
class FoundFix:
    """Where a fix of ``[source] contains`` was found: ``found_in`` "source" (``file`` relative to
    the source directory; None for a commit, found in the history) or "artifact" (``file`` relative
    to the artifact's tree; ``source_file``: where the source had it too, for a source recipe)."""

    name: str
    found_in: str  # "source" | "artifact"
    file: str | None = None
    source_file: str | None = None

    def where(self) -> str:
        """``in lib/libMIOpen.so.1.0`` / ``in the source (src/x.h)`` / ``in the source's history``."""
        if self.found_in == "artifact":
            return f"in {self.file}" if self.file else "in the artifact"
        return f"in the source ({self.file})" if self.file else "in the source's history"


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
    fixes: tuple[str, ...] = ()  # the [source] contains names it was checked to have (old manifests: none)
    fixes_found: tuple[FoundFix, ...] = ()  # where each was found (older manifests: none; see found())
    package: Package | None = None  # a prebuilt tree from a Debian package: its control fields (else None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Any, file: object = "manifest.json") -> "Manifest":
        """The manifest ``d`` (JSON), read by its schema (module notes); SchemaError naming ``file``."""
        return s.load(MANIFEST_SPEC, d, file)

    def found(self) -> tuple[FoundFix, ...]:
        """Every fix of ``fixes`` with where it was found; a name ``fixes_found`` does not place
        (a manifest older than it) was checked in the source, the only place searched then."""
        where = {f.name: f for f in self.fixes_found}
        return tuple(where.get(n) or FoundFix(n, "source") for n in self.fixes)

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


# --------------------------------------------------------------------------------------------
# the schema

_PATH = s.check(s.string, is_inside, "a relative path that stays inside the artifact's tree")
_SHA = s.check(s.string, lambda v: bool(SHA_RE.match(v)), "a sha256 (64 lowercase hexadecimal digits)")
_SIZE = s.check(s.integer, lambda v: v >= 0, "an integer of 0 or more")
_FILE = s.record(FileEntry, path=_PATH, type=s.one_of("file", "link"), size=_SIZE, sha256=s.optional(_SHA),
                 target=s.optional(s.check(s.string, lambda v: "\x00" not in v, "a link text")))


def _control_field(field: str) -> s.Spec:
    """A string that is a valid value of the control file's ``field``."""
    return s.check(s.string, lambda v: valid_field(field, v), f"a Debian {field.lower()} as a control file has it")


_PACKAGE = s.record(Package, format=s.one_of("deb"), **{
    k: _control_field(f) for k, f in (("name", "Package"), ("version", "Version"), ("architecture", "Architecture"))})
_LIBRARY = s.record(LibraryEntry, file=_PATH, links=s.list_of(_PATH), other_links=s.list_of(_PATH), size=_SIZE,
                    sha256=s.check(s.string, lambda v: not v or bool(SHA_RE.match(v)), "a sha256 or empty"))


def _file_entry(v: Any, where: str) -> FileEntry:
    f = _FILE(v, where)
    if f.type == "link" and not (f.target and is_inside(posixpath.join(posixpath.dirname(f.path), f.target))):
        s.fail(f"{where}.target", "a link target inside the artifact's tree", f.target)
    if f.type == "file" and f.sha256 is None:
        s.fail(f"{where}.sha256", "a sha256 (a file's entry has one)", None)
    return f


_SCHEMA = s.obj({"schema": (s.check(s.integer, lambda v: v == SCHEMA, f"{SCHEMA} (the manifest schema this rocmbuild "
                                     "reads: rebuild the artifact, or upgrade rocmbuild)"), s.REQUIRED)})
_FOUND = s.record(FoundFix, found_in=s.one_of("source", "artifact"), file=s.optional(_PATH),
                  source_file=s.optional(_PATH))
_RECORD = s.record(
    Manifest, recipe=s.name("recipe"), key=s.check(s.string, lambda v: bool(KEY_RE.match(v)), "a sha256 (the artifact's key)"),
    version=s.optional(s.name("version")), expect_version=s.optional(s.name("version")),
    encoding=s.one_of(*ENCODINGS), commit=s.optional(s.name("commit")), files=s.list_of(_file_entry),
    libraries=s.list_of(_LIBRARY), data=s.list_of(_PATH), fixes_found=s.list_of(_FOUND), package=s.optional(_PACKAGE),
)


def MANIFEST_SPEC(v: Any, where: str) -> Manifest:
    """The manifest's schema: its ``schema`` number first (an unknown one is said as such)."""
    if type(v) is dict:
        _SCHEMA(v, where)
    return _RECORD(v, where)


def corrupt(exc: s.SchemaError, what: str = "manifest") -> ArtifactError:
    """The error (exit 3) for an artifact file whose schema refused it."""
    return ArtifactError(f"corrupt artifact {what} {exc}", BAD_ARTIFACT_HINT, details={"schema": exc.to_json()})


def parse_manifest(data: Any, file: object) -> Manifest:
    """The manifest read from ``file`` (already decoded JSON); ArtifactError (exit 3) if it is not one."""
    try:
        return Manifest.from_json(data, file)
    except s.SchemaError as exc:
        raise corrupt(exc) from None


def read_manifest(path: Path) -> Manifest:
    """``path`` (a ``manifest.json``) read and checked; OSError when it cannot be opened,
    ArtifactError (exit 3) when it is not JSON or not a manifest."""
    try:
        data = read_json(path)
    except ValueError as exc:
        raise ArtifactError(f"corrupt artifact manifest {path}: not JSON ({exc})", BAD_ARTIFACT_HINT) from None
    return parse_manifest(data, path)
