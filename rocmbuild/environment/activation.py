"""The target's activation: the environment a user's shell has after ``conda activate`` or
``. bin/activate``, so the probe runs the target as the user runs it.

A conda env carries activation: ``conda env config vars`` (``conda-meta/state``'s
``{"env_vars": {...}}``, after the packages' ``etc/conda/env_vars.d/*.json``) and the
``etc/conda/activate.d/*.sh`` scripts; a venv has its ``bin/activate`` (which users edit: the
posted gfx1151 workarounds add ``LD_LIBRARY_PATH=...`` there). :func:`of` finds what they change.

Decisions:

* A conda env is a prefix with ``conda-meta/`` (checked first: conda's base env has a
  ``bin/activate`` that is conda's own); a venv one with ``pyvenv.cfg`` and ``bin/activate``;
  anything else has no activation (``kind`` "none").
* conda env: when ``conda``, ``mamba`` or ``micromamba`` is found (``$CONDA_EXE``, ``$MAMBA_EXE``,
  then PATH), ``TOOL run -p PREFIX PYTHON -c <dump os.environ as JSON>`` gives the activated
  environment: conda's own activation is the truth. Else (or when that run fails) rocmbuild does
  what conda's ``activate.py`` does, in a ``bash --noprofile --norc``: export ``CONDA_PREFIX``,
  ``CONDA_DEFAULT_ENV``, ``CONDA_SHLVL``, ``CONDA_PROMPT_MODIFIER``, ``PREFIX/bin`` first on
  ``PATH``; then the env vars (``env_vars.d`` files in sorted order, ``conda-meta/state`` last
  and winning; the value ``***unset***`` unsets); then source each ``activate.d/*.sh`` in sorted
  path order. A venv: ``bin/activate`` sourced in bash.
* The bash run dumps its exported variables (bash builtins only: no ``env`` needed on PATH) after every step, so each changed variable is attributed to the
  file (or step) that changed it last; with a conda tool, the bash run still names the file when
  it reaches the same value, else the change is the tool's ("conda run").
* Paths reach bash only as positional arguments (``"$1"``), never in the script text. Sourcing a
  script of the target runs the target's code; so does the probe (it imports torch), which is
  why both happen only in verbs that probe. ``BASH_ENV`` and ``ENV`` are removed for that bash.
  A script that ends the shell (``exit``) makes the activation an error (exit 2).
* Already active (``$CONDA_PREFIX`` or ``$VIRTUAL_ENV`` is this prefix): the caller's
  environment is the activated one; nothing is applied again (``how`` "already active").
* A variable whose activated value is not UTF-8 cannot be passed on exactly; it is left as the
  caller has it and named in ``skipped``.
* Relevant to what torch loads (:meth:`Activation.relevant`): ``LD_LIBRARY_PATH``,
  ``LD_PRELOAD``, ``PYTHONPATH``, ``PYTHONHOME``, ``ROCM_SDK_PRELOAD_LIBRARIES``, ``MIOPEN_*``,
  ``HIP_*``, ``HSA_*``, ``ROCM_PATH``, and ``PATH`` when the activation adds more than the env's
  own ``bin`` (every conda activation prepends that; it changes no library torch loads). Only a
  relevant change makes the caller probe a second time, with the unactivated environment.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rocmbuild.proc import runas
from rocmbuild.proc import runner
from rocmbuild import ui
from rocmbuild.errors import RequirementError, TargetError

UNSET = "***unset***"  # conda's CONDA_ENV_VARS_UNSET_VAR
TIMEOUT = 60.0
RELEVANT = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME", "ROCM_SDK_PRELOAD_LIBRARIES", "ROCM_PATH")
RELEVANT_PREFIXES = ("MIOPEN_", "HIP_", "HSA_")
TOOLS = ("conda", "mamba", "micromamba")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX_STATE = 1 << 20
_IGNORED = {"_", "SHLVL", "PWD", "OLDPWD"}  # what the shell itself sets

# $1 prefix, $2 kind ("conda" | "venv"), then NAME=VALUE (export) or NAME (unset) up to "--", then the scripts
_BASH = r'''
exec 3>&1 1>&2
snap() { local n; for n in $(compgen -e); do printf '%s=%s\0' "$n" "${!n}" >&3; done; printf '\0' >&3; }
prefix=$1; kind=$2; shift 2
snap
if [ "$kind" = conda ]; then
  export CONDA_PREFIX="$prefix" CONDA_DEFAULT_ENV="$prefix" CONDA_SHLVL=$(( ${CONDA_SHLVL:-0} + 1 ))
  export CONDA_PROMPT_MODIFIER="($prefix) " PATH="$prefix/bin${PATH:+:$PATH}"
  snap
  while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
    case $1 in *=*) export -- "$1" ;; *) unset -v -- "$1" ;; esac
    shift
  done
  snap
fi
[ "$1" = -- ] && shift
for f in "$@"; do . "$f"; snap; done
'''
# ``-c`` puts the working directory ("") first on sys.path: dropped before anything is imported
# (rocmbuild's working directory may be another user's: their json.py would run as us).
_DUMP = ("import sys; sys.path[:] = [p for p in sys.path if p]; import json, os; "
         "sys.stdout.write('\\n' + json.dumps(dict(os.environ)) + '\\n')")


@dataclass(frozen=True)
class Change:
    var: str
    before: str | None  # None: not set
    after: str | None  # None: unset by the activation
    source: str  # a file relative to the prefix ("etc/conda/activate.d/rocm.sh"), or a step ("conda activate")

    def to_json(self) -> dict:
        return {"var": self.var, "before": self.before, "after": self.after, "source": self.source}


@dataclass(frozen=True)
class Activation:
    kind: str  # "conda" | "venv" | "none"
    how: str  # "conda run (/path/conda)", "sourced by rocmbuild", "already active", "none"
    prefix: str = ""
    files: tuple[str, ...] = ()  # the files applied, relative to the prefix
    changes: tuple[Change, ...] = ()
    skipped: tuple[str, ...] = ()  # variables not passed on (not UTF-8)

    def extras(self) -> dict[str, str | None]:
        """The changes as ``runner`` extras: a value sets, None unsets."""
        return {c.var: c.after for c in self.changes if c.var not in self.skipped}

    def relevant(self) -> tuple[Change, ...]:
        """The changes that can change what torch loads (see the module docstring)."""
        return tuple(c for c in self.changes if c.var not in self.skipped and is_relevant(c, self.prefix))

    def change(self, var: str) -> Change | None:
        return next((c for c in self.changes if c.var == var), None)

    def to_json(self) -> dict:
        return {"kind": self.kind, "how": self.how, "files": list(self.files),
                "changes": [c.to_json() for c in self.relevant()], "skipped": list(self.skipped)}


NONE = Activation("none", "none")


def is_relevant(c: Change, prefix: str = "") -> bool:
    if c.var in RELEVANT or c.var.startswith(RELEVANT_PREFIXES):
        return True
    if c.var != "PATH":
        return False
    own = {os.path.join(prefix, "bin"), os.path.join(prefix, "condabin")} if prefix else set()
    before = set((c.before or "").split(os.pathsep))
    return any(e and e not in before and e not in own for e in (c.after or "").split(os.pathsep))


def kind_of(prefix: Path) -> str:
    if (prefix / "conda-meta").is_dir():
        return "conda"
    if (prefix / "pyvenv.cfg").is_file() and (prefix / "bin" / "activate").is_file():
        return "venv"
    return "none"


def _active(prefix: Path, kind: str) -> bool:
    var = os.environ.get("CONDA_PREFIX" if kind == "conda" else "VIRTUAL_ENV")
    try:
        return var is not None and var != "" and os.path.samefile(var, prefix)
    except OSError:
        return False


def of(prefix: Path, python: Path) -> Activation:
    """What activating ``prefix`` changes in the caller's environment (see the module docstring)."""
    prefix = Path(prefix)
    kind = kind_of(prefix)
    if kind == "none":
        return NONE
    if _active(prefix, kind):
        return Activation(kind, "already active", str(prefix))
    if kind == "venv":
        return _emulate(prefix, kind, [prefix / "bin" / "activate"], {})
    scripts = activate_scripts(prefix)
    env_vars = conda_env_vars(prefix)
    emulated = _emulate(prefix, kind, scripts, env_vars) if scripts else _conda_steps(prefix, env_vars)
    tool = find_tool()
    if tool is None:
        return emulated
    return _through_tool(tool, prefix, python, emulated) or emulated


def activate_scripts(prefix: Path) -> list[Path]:
    """``etc/conda/activate.d/*.sh``, sorted by path as conda sorts them."""
    try:
        entries = list(os.scandir(prefix / "etc" / "conda" / "activate.d"))
    except OSError:
        return []
    return [Path(p) for p in sorted(e.path for e in entries if e.name.endswith(".sh"))]


def conda_env_vars(prefix: Path) -> dict[str, tuple[str, str]]:
    """NAME -> (value, file relative to the prefix): ``env_vars.d/*.json`` sorted, then
    ``conda-meta/state`` (conda's ``_get_environment_env_vars``); a file that cannot be read is
    warned about and skipped."""
    out: dict[str, tuple[str, str]] = {}
    pkg_dir = prefix / "etc" / "conda" / "env_vars.d"
    files = sorted(pkg_dir.glob("*")) if pkg_dir.is_dir() else []
    for path in [*files, prefix / "conda-meta" / "state"]:
        data = _read_json(path, prefix)
        if path.name == "state":
            data = data.get("env_vars", {}) if isinstance(data, dict) else {}
        if not isinstance(data, dict):
            continue
        rel = os.path.relpath(path, prefix)
        out.update({str(k): (str(v), rel) for k, v in data.items() if _NAME.match(str(k))})
    return out


def _read_json(path: Path, prefix: Path):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read(_MAX_STATE).decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        ui.warn(f"cannot read {os.path.relpath(path, prefix)} in {prefix} ({exc}); its env vars are not applied")
        return {}


def find_tool() -> Path | None:
    """conda, mamba or micromamba: ``$CONDA_EXE``, ``$MAMBA_EXE``, then PATH."""
    for var in ("CONDA_EXE", "MAMBA_EXE"):
        exe = os.environ.get(var)
        if exe and os.path.isfile(exe) and os.access(exe, os.X_OK):
            return Path(exe)
    for name in TOOLS:
        found = runner.which(name)
        if found:
            return Path(found)
    return None


def _emulate(prefix: Path, kind: str, scripts: list[Path], env_vars: dict[str, tuple[str, str]]) -> Activation:
    """Source the activation in bash, one dump of the environment per step; each change names its step."""
    sets = [f"{k}={v}" if v != UNSET else k for k, (v, _src) in env_vars.items()]
    argv = [_bash(), "--noprofile", "--norc", "-c", _BASH, "rocmbuild-activate", str(prefix), kind,
            *sets, "--", *map(str, scripts)]
    done = _run(argv, prefix)
    snaps = _snapshots(done.stdout)
    steps = (["conda activate", "env vars"] if kind == "conda" else []) + [os.path.relpath(s, prefix) for s in scripts]
    if len(snaps) != len(steps) + 1:
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise TargetError(f"activating {prefix} in bash did not finish (exit code {done.returncode}): a script of "
                          f"{', '.join(steps[len(snaps) - 1:]) or 'the activation'} ended the shell"
                          + (f"\n{tail}" if tail else ""),
                          "fix that activation script (it must not `exit`), or run rocmbuild with --python EXE "
                          "from the activated shell")
    sources: dict[str, str] = {}
    for step, (a, b) in zip(steps, itertools.pairwise(snaps), strict=True):
        for var in set(a) | set(b):
            if a.get(var) != b.get(var):
                sources[var] = env_vars[var][1] if step == "env vars" and var in env_vars else step
    base, final = snaps[0], snaps[-1]
    changes = tuple(Change(v, base.get(v), final.get(v), sources.get(v, steps[-1] if steps else "activation"))
                    for v in sorted(set(base) | set(final)) if base.get(v) != final.get(v) and v not in _IGNORED)
    files = tuple(s for s in steps if s not in ("conda activate", "env vars"))
    files = tuple(sorted({src for _v, (_x, src) in env_vars.items()})) + files
    return Activation(kind, "sourced by rocmbuild", str(prefix), files, changes, _not_utf8(changes))


def _conda_steps(prefix: Path, env_vars: dict[str, tuple[str, str]]) -> Activation:
    """A conda env with no ``activate.d`` script: the same two steps as the bash run ("conda
    activate", then the env vars), computed here (no shell needed, one process fewer)."""
    base = dict(os.environ)
    lvl = base.get("CONDA_SHLVL") or "0"
    step = {"CONDA_PREFIX": str(prefix), "CONDA_DEFAULT_ENV": str(prefix),
            "CONDA_SHLVL": str((int(lvl) if lvl.isdigit() else 0) + 1), "CONDA_PROMPT_MODIFIER": f"({prefix}) ",
            "PATH": f"{prefix}/bin" + (f":{base['PATH']}" if base.get("PATH") else "")}
    env: dict[str, str | None] = {**base, **step}
    sources = {k: "conda activate" for k in step}
    for k, (v, src) in env_vars.items():
        env[k], sources[k] = (None if v == UNSET else v), src
    changes = tuple(Change(v, base.get(v), env.get(v), sources[v]) for v in sorted(set(base) | set(env))
                    if base.get(v) != env.get(v) and v not in _IGNORED)
    files = tuple(sorted({src for _v, (_x, src) in env_vars.items()}))
    return Activation("conda", "sourced by rocmbuild", str(prefix), files, changes, _not_utf8(changes))


def _bash() -> str:
    """bash from PATH, else where every Linux has it (a provisioning script's PATH may be bare)."""
    return runner.which("bash") or next((b for b in ("/bin/bash", "/usr/bin/bash") if os.access(b, os.X_OK)), "bash")


def _run(argv: list[str], prefix: Path) -> runner.Completed:
    hint = "check the environment's activation scripts, or run rocmbuild from the activated shell with --python EXE"
    try:
        return runner.capture(argv, env={"BASH_ENV": None, "ENV": None}, timeout=TIMEOUT,
                              user=runas.for_target(None, prefix))  # as root: as the env's owner
    except RequirementError as exc:
        raise TargetError(f"bash is needed to apply the activation of {prefix} and was not found", hint) from exc
    except subprocess.TimeoutExpired as exc:
        raise TargetError(f"activating {prefix} did not finish within {TIMEOUT:g} s (killed)", hint) from exc


def _snapshots(stdout: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for chunk in stdout.split("\0\0"):
        if not chunk and not out:
            continue
        env = dict(rec.split("=", 1) for rec in chunk.split("\0") if "=" in rec)
        if env:
            out.append(env)
    return out


def _not_utf8(changes) -> tuple[str, ...]:
    return tuple(c.var for c in changes if c.after is not None and "\ufffd" in c.after)


def _dumped(stdout: str) -> dict | None:
    """The environment the dump printed: the last line that is a JSON object (the tool may print
    lines of its own after it, ``{not json`` among them: skipped, never a traceback)."""
    for ln in reversed(stdout.splitlines()):
        try:
            doc = json.loads(ln) if ln.startswith("{") else None
        except (ValueError, RecursionError):
            continue
        if isinstance(doc, dict):
            return doc
    return None


def _through_tool(tool: Path, prefix: Path, python: Path, emulated: Activation) -> Activation | None:
    """``TOOL run -p PREFIX`` dumps the activated environment; None (use the emulation) when it fails."""
    argv = [str(tool), "run", "-p", str(prefix), str(python), "-c", _DUMP]
    # as root: the env's owner runs it (its HOME, USER, LOGNAME); a root-owned env, the tool's owner
    # (``sudo -E`` keeps a user's CONDA_EXE: their miniconda's conda, their code)
    who = runas.for_target(python, prefix) or runas.for_target(tool)
    try:
        done = runner.capture(argv, timeout=TIMEOUT, user=who)
    except (RequirementError, subprocess.TimeoutExpired, OSError) as exc:
        ui.warn(f"`{tool.name} run -p {prefix}` did not run ({exc}); rocmbuild applies the activation itself")
        return None
    final = _dumped(done.stdout)
    if done.returncode != 0 or not isinstance(final, dict):
        ui.warn(f"`{tool.name} run -p {prefix}` failed (exit code {done.returncode}); rocmbuild applies the "
                "activation itself")
        return None
    base = {**os.environ, **(who.environment() if who is not None else {})}
    changes = []
    for var in sorted(set(base) | set(final)):
        if base.get(var) != final.get(var) and var not in _IGNORED:
            known = emulated.change(var)
            src = known.source if known is not None and known.after == final.get(var) else f"{tool.name} run"
            changes.append(Change(var, base.get(var), final.get(var), src))
    return Activation("conda", f"{tool.name} run ({tool})", str(prefix), emulated.files, tuple(changes),
                      _not_utf8(changes))


__all__ = ["Activation", "Change", "NONE", "of", "kind_of", "activate_scripts", "conda_env_vars", "find_tool",
           "is_relevant", "RELEVANT", "UNSET"]
