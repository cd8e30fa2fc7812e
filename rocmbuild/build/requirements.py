"""What a recipe needs on the build machine: its ``[requires]`` programs (with ``>=`` floors) and
paths, checked before anything is fetched, in the same form ``doctor`` shows its own checks.

Decisions: the version of a program is the first ``X.Y[.Z]`` in ``PROG --version`` output (stdout,
then stderr), compared with ``packaging.version``; no version found while a floor is set: warn.
``[requires] paths`` expand ``~`` and environment variables, ``$ROCM_PATH`` defaulting to
``/opt/rocm``.
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
from rocmbuild.recipe import Recipe, split_requirement

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
        return f"[{mark}] {self.name}: {self.detail}" + (f"\n       fix: {self.fix}" if self.fix else "")


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


def rocm_root() -> Path:
    return Path(os.environ.get("ROCM_PATH") or "/opt/rocm")


def expand_path(path: str) -> Path:
    """``~`` and ``$VAR``/``${VAR}`` expanded (unknown variables kept), ``$ROCM_PATH`` defaulting to /opt/rocm."""
    env = {"ROCM_PATH": str(rocm_root()), **os.environ}
    return Path(string.Template(os.path.expanduser(path)).safe_substitute(env))


def check_program(name: str, *, floor: str | None = None, fix: str | None = None, label: str | None = None) -> DoctorCheck:
    label = label or name
    path = runner.which(name)
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
        out.append(check_program(prog, floor=floor, label=f"requires {spec}", fix=hint))
    for raw in recipe.requires.paths:
        p = expand_path(raw)
        if p.exists():
            out.append(DoctorCheck(f"requires path {raw}", OK, str(p)))
        else:
            out.append(DoctorCheck(f"requires path {raw}", FAIL, f"{p} does not exist",
                                   recipe.requires.hint(raw)
                                   or f"install what provides {p}" + (" (set ROCM_PATH if ROCm lives elsewhere)"
                                                                      if "ROCM_PATH" in raw else "")))
    return out
