"""The recipe model: frozen values parsed once from a recipe file, and the closed vocabularies.

The format is a public contract (``docs/recipes.md``); :mod:`rocmbuild.recipe.parsing` turns TOML
into these values and is the only place that reports what a user got wrong. Decision: defines
are typed values (bool, int, float, str, tuple of str) so ``cmake.define_arg`` can spell them;
the literal ``GPU_TARGETS = "auto"`` stays in the recipe and is resolved against the machine
later (:func:`rocmbuild.recipe.overrides.resolve_gpu_targets`). ``[source] archive`` (alias
``tarball``) is one field, :attr:`Source.archive`; ``[build] system = "prebuilt"`` means the
archive's tree (after ``subdir``) is the install tree: no configure, no compile.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DefineValue = bool | int | float | str | tuple[str, ...]


@dataclass(frozen=True)
class VersionSpec:
    file: str
    regex: str


@dataclass(frozen=True)
class Fix:
    """A fix the source must contain (``[source] contains``): a fixed string found in a file
    under ``path`` (relative to the source directory, i.e. below ``subdir``; "" is all of it), or
    a commit that is an ancestor of the checked-out commit (or one of its cherry-picks)."""

    name: str
    grep: str | None = None
    path: str = ""
    commit: str | None = None


@dataclass(frozen=True)
class Source:
    git: str | None = None
    archive: str | None = None
    sha256: str | None = None
    ref: str | None = None
    subdir: str | None = None
    sparse: tuple[str, ...] = ()
    cherry_pick: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()
    version: VersionSpec | None = None
    contains: tuple[Fix, ...] = ()

    @property
    def tarball(self) -> str | None:
        """The archive URL under its older name (``[source] tarball`` is an alias of ``archive``)."""
        return self.archive

    @property
    def url(self) -> str:
        return self.git or self.archive or ""


@dataclass(frozen=True)
class Build:
    system: str = "cmake"
    generator: str = "Unix Makefiles"
    build_type: str = "Release"
    jobs: int = 0
    targets: tuple[str, ...] = ()
    defines: tuple[tuple[str, DefineValue], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    install_prefix: str = "/usr/local"
    launcher: str | None = None  # None (not set) = "auto": ccache when installed; "none": no launcher
    reproducible: bool = True  # prefix maps and SOURCE_DATE_EPOCH (builder/reproducible.py)

    @property
    def prebuilt(self) -> bool:
        return self.system == "prebuilt"

    def define(self, name: str) -> DefineValue | None:
        return dict(self.defines).get(name)


@dataclass(frozen=True)
class Need:
    """A ``[requires]`` entry written as a table: any one of ``any`` satisfies it (a ``program`` /
    ``path`` key is one alternative), and only when the define ``when`` is ON (None: always)."""

    any: tuple[str, ...]
    when: str | None = None

    @property
    def name(self) -> str:
        return " or ".join(self.any)


Requirement = str | Need  # a plain string stays a string (the lock hashes of earlier recipes stay)
Hint = str | tuple[tuple[str, str], ...]  # one text, or per distribution (rocm, an os-release ID, default)


def need(entry: Requirement) -> Need:
    """Any entry as a :class:`Need` (a string is its one alternative, always needed)."""
    return entry if isinstance(entry, Need) else Need((entry,))


@dataclass(frozen=True)
class Requires:
    programs: tuple[Requirement, ...] = ()
    paths: tuple[Requirement, ...] = ()
    hints: tuple[tuple[str, Hint], ...] = ()  # requirement (as written, or one alternative) -> how to get it

    def hint(self, requirement: Requirement) -> Hint | None:
        """The hint of an entry: keyed by its text, or by any one of its alternatives."""
        table = dict(self.hints)
        n = need(requirement)
        for k in (n.name, *n.any):
            if k in table:
                return table[k]
        return None


@dataclass(frozen=True)
class Install:
    libraries: tuple[str, ...] = ()
    data: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verify:
    library: str = "libMIOpen"
    version: str | None = None
    encoding: str = "miopen"
    smoke: str | None = None


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    source: Source
    description: str = ""
    build: Build = field(default_factory=Build)
    requires: Requires = field(default_factory=Requires)
    install: Install = field(default_factory=Install)
    verify: Verify = field(default_factory=Verify)
    patch_files: tuple[Path, ...] = ()
    text_sha256: str = ""

    def canonical(self) -> dict[str, Any]:
        """Everything that affects the build, as plain JSON data (for the cache key)."""
        data = dataclasses.asdict(self)
        for k in ("path", "description", "patch_files", "text_sha256"):
            data.pop(k)
        if not self.source.contains:  # a recipe without it keeps its lock files' hash
            data["source"].pop("contains")
        if self.build.reproducible:  # the default: the keys (and lock hashes) of earlier recipes stay
            data["build"].pop("reproducible")
        return data

    def canonical_json(self) -> str:
        return json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), default=str)


SYSTEMS = ("cmake", "prebuilt")
GENERATORS = ("Ninja", "Unix Makefiles")
ENCODINGS = ("miopen", "cudnn")
SMOKES = ("batchnorm",)
LAUNCHERS = ("auto", "none", "ccache", "sccache")
DEFINE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
