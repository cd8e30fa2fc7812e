"""What a recipe needs on the build machine: its ``[requires]`` programs (with ``>=`` floors) and
paths, and the recipe variables its defines and env use, checked before anything is fetched, in
the same form ``doctor`` shows its own checks.

Decisions: the version of a program is the first ``X.Y[.Z]`` in ``PROG --version`` output (stdout,
then stderr), compared with ``packaging.version``; no version found while a floor is set: warn.
Programs and paths first get the recipe variables (``${ROCM_PATH}``, ``${HIP_CXX}``, ...:
:mod:`rocmbuild.recipe.variables`, resolved from :func:`find_rocm`, the one answer doctor and
recipes share), then paths ``~`` and the environment's ``$VAR``. A check keeps the requirement's
text as its name (its hint is keyed by it). A program named by a path is looked for at that path,
not on PATH: a missing one "does not exist". A ``[requires] path`` under the ROCm root that is
missing as written (``/opt/rocm/lib/cmake/X/...`` or ``$ROCM_PATH/lib/cmake/X/...``) is looked for
under the found root, multiarch dirs included, and the check says where it was found.

An entry of alternatives passes with the first one found (its check names it) and fails with each
one's detail; an entry with ``when`` whose define is off is ``ok``, "not needed: NAME is OFF".
A variable the recipe's defines or env use that is not resolvable is a failed check of its own
(``variable ${HIP_CXX}``): the build stops before cmake could see the literal text. A hint table
is picked for the machine (:mod:`rocmbuild.builder.hints`).
"""

from __future__ import annotations

import os
import re
import string
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from rocmbuild.proc import runner
from rocmbuild.errors import RocmbuildError
from rocmbuild.names import safe_text
from rocmbuild.builder import hints
from rocmbuild.recipe import Recipe, split_requirement, variables
from rocmbuild.recipe.model import need
from rocmbuild.recipe.requires import skipped
from rocmbuild.recipe.rocm import RocmInstall, cmake_dirs, find_rocm, host_root, rocm_root  # noqa: F401 (re-exported)

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


def expand_path(path: str, values: dict[str, variables.Variable] | None = None) -> Path:
    """The recipe variables (``${ROCM_PATH}``, ...), then ``~`` and ``$VAR``/``${VAR}`` of the
    environment expanded (unknown variables kept)."""
    text = variables.substitute(path, values if values is not None else variables.resolve())
    return Path(string.Template(os.path.expanduser(text)).safe_substitute(os.environ))


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


def _unresolved(text: str, values, left: list[str]) -> str:
    said = "; ".join(f"${{{n}}} is not resolvable here: {values[n].detail}" for n in left)
    return said if text in (f"${{{left[0]}}}",) else f"{text}: {said}"


def _var_fix(v: variables.Variable) -> str:
    found = find_rocm()
    return hints.pick(v.fix, amd_layout=found is not None and found.layout == "rocm") or ""


def variable_checks(values: dict[str, variables.Variable], names: list[str], strict: set[str]) -> list[DoctorCheck]:
    """One line per variable in ``names``: its value; not resolvable: FAIL when in ``strict`` (a
    define or env value uses it: cmake would get the literal), else WARN."""
    out = []
    for name in names:
        v = values[name]
        if v.value is not None:
            out.append(DoctorCheck(f"variable {v.text}", OK, f"{v.value} ({v.detail})"))
        else:
            fix = _var_fix(v)
            out.append(DoctorCheck(f"variable {v.text}", FAIL if name in strict else WARN,
                                   f"not resolvable here: {v.detail}" + ("" if name in strict else
                                                                         " (a recipe using it cannot build here)"), fix))
    return out


def build_variables(recipe: Recipe) -> set[str]:
    """The variables ``recipe``'s defines and env use (they reach cmake)."""
    return set(variables.used(variables.build_texts(recipe)))


def _one_program(alt: str, recipe: Recipe, values, fix: str | None, label: str) -> DoctorCheck:
    prog, floor = split_requirement(alt, recipe.path)
    resolved = variables.substitute(prog, values)
    left = variables.used([resolved])
    if left:
        return DoctorCheck(label, FAIL, _unresolved(prog, values, left), fix or _var_fix(values[left[0]]))
    if fix is None and "/" in prog:
        fix = f"install the package that provides {resolved} (e.g. find it with `apt-file search {Path(resolved).name}`)"
    return check_program(resolved, floor=floor, label=label, fix=fix)


def _one_path(raw: str, values, fix: str | None, label: str) -> DoctorCheck:
    p = expand_path(raw, values)
    left = variables.used([str(p)])
    if left:
        return DoctorCheck(label, FAIL, _unresolved(raw, values, left), fix or _var_fix(values[left[0]]))
    if p.exists():
        return DoctorCheck(label, OK, str(p))
    alt = _elsewhere_under_rocm(p)
    if alt is not None:
        return DoctorCheck(label, OK, f"{alt} (ROCm found at {rocm_root()})")
    return DoctorCheck(label, FAIL, f"{p} does not exist",
                       fix or f"install what provides {p}" + (" (set ROCM_PATH if ROCm lives elsewhere)"
                                                             if "ROCM_PATH" in raw else ""))


def _check_need(kind: str, entry, recipe: Recipe, values, fix: str | None) -> DoctorCheck:
    n = need(entry)
    label = f"requires {n.name}" if kind == "programs" else f"requires path {n.name}"
    why = skipped(n, recipe)
    if why is not None:
        return DoctorCheck(label, OK, why)
    tries = [(_one_program(a, recipe, values, fix, label) if kind == "programs" else _one_path(a, values, fix, label))
             for a in n.any]
    good = next((c for c in tries if c.status != FAIL), None)
    if good is not None or len(tries) == 1:
        return good or tries[0]
    return DoctorCheck(label, FAIL, "none of them: " + "; ".join(c.detail for c in tries), fix or tries[-1].fix)


def check_requirements(recipe: Recipe, values: dict[str, variables.Variable] | None = None, *,
                       with_variables: bool = True) -> list[DoctorCheck]:
    """A recipe's ``[requires]``: programs (with optional ``>=`` floors) and paths, each string or
    table of alternatives (``when``: only while its define is ON), and, ``with_variables``, a line
    per recipe variable its defines and env use (an unresolvable one fails).

    The build step calls this before fetching and raises RequirementError for failures.
    """
    values = values if values is not None else variables.resolve()
    found = find_rocm()
    amd, osr = found is not None and found.layout == "rocm", hints.os_release()
    strict = build_variables(recipe)
    out = variable_checks(values, [n for n in variables.NAMES if n in strict], strict) if with_variables else []
    for kind, entries in (("programs", recipe.requires.programs), ("paths", recipe.requires.paths)):
        for e in entries:
            fix = hints.pick(recipe.requires.hint(e), amd_layout=amd, osr=osr)
            out.append(_check_need(kind, e, recipe, values, fix))
    return out
