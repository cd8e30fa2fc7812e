"""What a recipe needs on the build machine: its ``[requires]`` programs (with ``>=`` floors) and
paths, checked before anything is fetched, in the same form ``doctor`` shows its own checks.

Decisions: the version of a program is the first ``X.Y[.Z]`` in ``PROG --version`` output (stdout,
then stderr), compared with ``packaging.version``; no version found while a floor is set: warn.
``[requires] paths`` expand ``~`` and environment variables, ``$ROCM_PATH`` defaulting to the
ROCm :func:`find_rocm` found.

Where ROCm is (``$ROCM_PATH``, ``/opt/rocm``, the distribution's ``/usr``) is answered by
:func:`rocmbuild.recipe.rocm.find_rocm`, the one function doctor and recipes share (its names are
re-exported here). ``${ROCM_PATH}`` in a program is that root too (checks keep the requirement's
text as their name). A program named by a path (``/opt/rocm/bin/hipcc``,
``${ROCM_PATH}/bin/hipcc``) is looked for at that path, not on PATH: a missing one "does not exist".
A ``[requires] path`` under the ROCm
root that is missing as written (``/opt/rocm/lib/cmake/X/...`` or ``$ROCM_PATH/lib/cmake/X/...``)
is looked for under the found root, multiarch dirs included, and the check says where it was found.
"""

from __future__ import annotations

import os
import re
import string
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from rocmbuild import runner
from rocmbuild.errors import RocmbuildError
from rocmbuild.names import safe_text
from rocmbuild.recipe import Recipe, split_requirement
from rocmbuild.recipe.rocm import (RocmInstall, cmake_dirs, find_rocm, host_root, rocm_root,  # noqa: F401 (re-exported)
                                   substitute)

OK, WARN, FAIL = "ok", "warn", "fail"
_VERSION_RE = re.compile(r"(?<![0-9.])(\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class DoctorCheck:
    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def to_json(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        mark = {OK: "  ok", WARN: "warn", FAIL: "FAIL"}[self.status]
        # two lines at most: a name, a detail or a fix (a recipe's hint) is shown as one line each
        return safe_text(f"[{mark}] {self.name}: {self.detail}") + (f"\n       fix: {safe_text(self.fix)}" if self.fix else "")


def program_version(prog: str) -> Version | None:
    """The first X.Y[.Z] printed by ``prog --version`` (None when not found or not parseable)."""
    try:
        done = runner.capture([prog, "--version"], timeout=30)
    except (RocmbuildError, subprocess.TimeoutExpired, OSError):
        return None
    for text in (done.stdout, done.stderr):
        m = _VERSION_RE.search(text or "")
        if m:
            try:
                return Version(m.group(1))
            except InvalidVersion:
                continue
    return None


def expand_path(path: str) -> Path:
    """``~`` and ``$VAR``/``${VAR}`` expanded (unknown variables kept), ``$ROCM_PATH`` defaulting to the ROCm found."""
    env = {"ROCM_PATH": str(rocm_root()), **os.environ}
    return Path(string.Template(os.path.expanduser(path)).safe_substitute(env))


def _elsewhere_under_rocm(p: Path) -> Path | None:
    """A missing ``<rocm>/lib/cmake/PKG/FILE`` (/opt/rocm or the found root) found under the found root."""
    found = find_rocm()
    if found is None:
        return None
    for base in (Path("/opt/rocm"), found.root):
        try:
            rel = p.relative_to(base)
        except ValueError:
            continue
        parts = rel.parts
        if len(parts) >= 4 and parts[:2] == ("lib", "cmake"):
            for d in cmake_dirs(found.root, parts[2]):
                alt = d.joinpath(*parts[3:])
                if alt.exists():
                    return alt
        alt = found.root / rel
        if alt != p and alt.exists():
            return alt
    return None


def check_program(name: str, *, floor: str | None = None, fix: str | None = None, label: str | None = None) -> DoctorCheck:
    label = label or name
    path = runner.which(name)
    if path is None and "/" in name:  # a path, not a name looked up on PATH
        missing = "does not exist" if not os.path.lexists(name) else "is not an executable file"
        return DoctorCheck(label, FAIL, f"{name} {missing}", fix or f"install what provides {name}")
    if path is None:
        return DoctorCheck(label, FAIL, f"{name} not found on PATH", fix or f"install {name} (e.g. apt install {name})")
    version = program_version(path)
    shown = f"{name} {version}" if version else name
    if floor is None:
        return DoctorCheck(label, OK, f"{shown} ({path})")
    try:
        want = Version(floor)
    except InvalidVersion:
        return DoctorCheck(label, FAIL, f"invalid version floor '{floor}' for {name}", "fix the requirement")
    if version is None:
        return DoctorCheck(label, WARN, f"{name} ({path}): could not read its version (need >= {want})",
                           f"check `{name} --version` reports {want} or newer")
    if version < want:
        return DoctorCheck(label, FAIL, f"{name} {version} is older than the required {want} ({path})",
                           fix or f"install {name} >= {want} (e.g. pip install '{name}>={want}' for cmake) and put it first on PATH")
    return DoctorCheck(label, OK, f"{shown} >= {want} ({path})")


def check_requirements(recipe: Recipe) -> list[DoctorCheck]:
    """A recipe's ``[requires]``: programs (with optional ``>=`` floors) and paths.

    The build step calls this before fetching and raises RequirementError for failures.
    """
    out = []
    for spec in recipe.requires.programs:
        prog, floor = split_requirement(spec, recipe.path)
        hint = recipe.requires.hint(spec)
        if hint is None and "/" in prog:
            hint = f"install the package that provides {prog} (e.g. find it with `apt-file search {Path(prog).name}`)"
        out.append(check_program(substitute(prog, str(rocm_root())), floor=floor, label=f"requires {spec}", fix=hint))
    for raw in recipe.requires.paths:
        p = expand_path(raw)
        alt = None if p.exists() else _elsewhere_under_rocm(p)
        if p.exists():
            out.append(DoctorCheck(f"requires path {raw}", OK, str(p)))
        elif alt is not None:
            out.append(DoctorCheck(f"requires path {raw}", OK, f"{alt} (ROCm found at {rocm_root()})"))
        else:
            out.append(DoctorCheck(f"requires path {raw}", FAIL, f"{p} does not exist",
                                   recipe.requires.hint(raw)
                                   or f"install what provides {p}" + (" (set ROCM_PATH if ROCm lives elsewhere)"
                                                                      if "ROCM_PATH" in raw else "")))
    return out
