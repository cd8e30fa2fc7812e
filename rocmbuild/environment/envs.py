"""Conda environments by name (``-n NAME``, as ``conda activate NAME`` or ``micromamba activate NAME``).

Decisions:

* The names are gathered the way conda and mamba find them, all sources together, the first env
  of a name winning: conda's own list (``conda info --envs --json``, conda from ``$CONDA_EXE``
  else PATH), then mamba's and micromamba's (``env list --json``, from ``$MAMBA_EXE`` and PATH),
  then the ``envs/`` directories: ``$CONDA_ENVS_PATH``/``$CONDA_ENVS_DIRS``, ``envs_dirs`` of
  every ``.condarc``/``.mambarc`` conda reads, ``$MAMBA_ROOT_PREFIX/envs`` (``condarc.py``),
  ``$CONDA_PREFIX/..`` and ``$CONDA_PREFIX/envs``, and the usual install roots in ``~``.
* A tool runs through runner.py with a short timeout; one that is missing, fails, hangs or does
  not print its JSON is skipped without a word: the directories still answer.
* In a directory an env is a folder holding ``conda-meta/`` (conda's own mark: a random folder
  beside it is no env); ``base`` is a root whose ``envs/`` was searched and that holds
  ``conda-meta/`` itself (for a tool: its root prefix).
* A name is a plain directory name: ``..``, ``/`` or a NUL is refused before anything is searched,
  so ``-n ../../etc`` can never point outside the envs directories. An unknown name is a
  :class:`TargetError` (exit 2) listing the names found, where they were looked for, and the
  closest names ("did you mean").
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
from pathlib import Path

from rocmbuild.proc import runas, runner
from rocmbuild.errors import RequirementError, TargetError
from rocmbuild.environment import condarc

TOOL_TIMEOUT = 15.0
HOME_ROOTS = ("miniconda3", "anaconda3", "miniforge3", "mambaforge", ".conda", "micromamba", ".local/share/mamba")


def find(name: str) -> Path:
    """The prefix of the conda env ``name``; TargetError (exit 2) when there is none."""
    _check_name(name)
    found, where = conda_envs()
    if name in found:
        return found[name]
    names = ", ".join(sorted(found)) or "none"
    close = difflib.get_close_matches(name, list(found), n=3, cutoff=0.6)
    guess = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
    raise TargetError(
        f"no conda environment named {name!r} (found: {names}; looked in {', '.join(where)})",
        f"{guess}give one of those names, or the environment's path with --env PREFIX "
        "(`conda env list` shows what conda knows)",
        details={"name": name, "found": {k: str(v) for k, v in sorted(found.items())}, "looked_in": where,
                 "did_you_mean": close},
    )


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise TargetError(f"not an environment name: {name!r}",
                          "-n takes a conda environment's name (e.g. -n torch); for a path use --env PREFIX")


def conda_envs(timeout: float = TOOL_TIMEOUT) -> tuple[dict[str, Path], list[str]]:
    """({name: prefix}, where they were looked for): the tools' lists, then the envs/ dirs."""
    found: dict[str, Path] = {}
    where: list[str] = []
    for listed, source in _ask_tools(timeout):
        where.append(source)
        for name, prefix in listed.items():
            found.setdefault(name, prefix)
    dirs = envs_dirs()
    for d in dirs:
        root = d.parent
        if d.name == "envs" and (root / "conda-meta").is_dir():
            found.setdefault("base", root)
        try:
            entries = sorted(d.iterdir())
        except OSError:
            continue
        for e in entries:
            if (e / "conda-meta").is_dir():
                found.setdefault(e.name, e)
    where += [str(d) for d in dirs]
    return found, where or ["no envs directory"]


def envs_dirs() -> list[Path]:
    """The envs directories searched, in order, each once."""
    out: list[Path] = [d for d, _ in condarc.configured_dirs()]
    prefix = os.environ.get("CONDA_PREFIX")
    if prefix:
        out += [Path(prefix).parent, Path(prefix) / "envs"]
    home = Path.home()
    out += [home / r / "envs" for r in HOME_ROOTS]
    seen: list[Path] = []
    for p in out:
        p = Path(os.path.abspath(p.expanduser()))
        if p not in seen:
            seen.append(p)
    return seen


def _tools() -> list[tuple[str, list[str]]]:
    """(executable, its list-the-envs arguments) of every conda-like tool found, each once."""
    found: list[tuple[str, list[str]]] = []
    candidates = [(os.environ.get("CONDA_EXE"), "conda"), (runner.which("conda"), "conda"),
                  (os.environ.get("MAMBA_EXE"), "mamba"), (runner.which("mamba"), "mamba"),
                  (runner.which("micromamba"), "mamba")]
    seen: set[str] = set()
    for exe, kind in candidates:
        if not exe or not os.access(exe, os.X_OK) or os.path.realpath(exe) in seen:
            continue
        seen.add(os.path.realpath(exe))
        found.append((exe, ["info", "--envs", "--json"] if kind == "conda" else ["env", "list", "--json"]))
    return found


def _ask_tools(timeout: float) -> list[tuple[dict[str, Path], str]]:
    out = []
    for exe, argv in _tools():
        listed = _ask(exe, argv, timeout)
        if listed is not None:
            out.append((listed, f"`{os.path.basename(exe)} {' '.join(argv[:-1])}`"))
    return out


def _ask(exe: str, argv: list[str], timeout: float) -> dict[str, Path] | None:
    """One tool's {name: prefix}, or None when it does not answer with its JSON."""
    try:
        # the tool is a program of whoever installed it (a user's miniconda): run as root, it runs as them
        done = runner.capture([exe, *argv], timeout=timeout, user=runas.for_target(Path(exe)))
        data = json.loads(done.stdout) if done.returncode == 0 else None
    except (RequirementError, subprocess.TimeoutExpired, OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("envs"), list):
        return None
    paths = [p for p in data["envs"] if isinstance(p, str) and p]
    root = data.get("root_prefix") or data.get("conda_prefix") or data.get("base environment")
    if not root and argv[0] == "env":
        root = os.environ.get("MAMBA_ROOT_PREFIX") or next(
            (p for p in paths if any(Path(q).parent == Path(p) / "envs" for q in paths)), None)
    found: dict[str, Path] = {}
    for p in paths:
        is_root = isinstance(root, str) and os.path.abspath(p) == os.path.abspath(root)
        found.setdefault("base" if is_root else Path(p).name, Path(p))
    return found
