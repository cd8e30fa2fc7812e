"""Conda environments by name (``-n NAME``, as ``conda activate NAME``).

Decisions:

* When conda is installed (``$CONDA_EXE``, else ``conda`` on PATH), its own list is the truth:
  ``conda info --envs --json`` (through runner.py); an env is named by its directory's name, the
  root prefix is ``base``. When conda does not answer (missing, failing, not JSON), the usual
  ``envs/`` directories are searched instead, in this order: ``$CONDA_ENVS_PATH`` (colon-separated),
  ``$CONDA_PREFIX/..`` and ``$CONDA_PREFIX/envs``, ``~/miniconda3/envs``, ``~/anaconda3/envs``,
  ``~/miniforge3/envs``, ``~/.conda/envs``. There an env is a directory holding ``conda-meta/``
  (conda's own mark: a random directory beside it is no env); ``base`` is a root whose ``envs/``
  was searched and that holds ``conda-meta/`` itself.
* The first env of a name wins (conda's order, then the order above).
* A name is a plain directory name: ``..``, ``/`` or a NUL is refused before anything is searched,
  so ``-n ../../etc`` can never point outside the envs directories. An unknown name is a
  :class:`TargetError` (exit 2) listing the names found and where they were looked for.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from rocmbuild import runner
from rocmbuild.errors import RequirementError, TargetError

CONDA_TIMEOUT = 60.0
HOME_ROOTS = ("miniconda3", "anaconda3", "miniforge3", ".conda")


def find(name: str) -> Path:
    """The prefix of the conda env ``name``; TargetError (exit 2) when there is none."""
    _check_name(name)
    found, where = conda_envs()
    if name in found:
        return found[name]
    names = ", ".join(sorted(found)) or "none"
    raise TargetError(
        f"no conda environment named {name!r} (found: {names}; looked in {where})",
        "give one of those names, or the environment's path with --env PREFIX "
        "(`conda env list` shows what conda knows)",
        details={"name": name, "found": {k: str(v) for k, v in sorted(found.items())}},
    )


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise TargetError(f"not an environment name: {name!r}",
                          "-n takes a conda environment's name (e.g. -n torch); for a path use --env PREFIX")


def conda_envs() -> tuple[dict[str, Path], str]:
    """({name: prefix}, where they were looked for): conda's own list, else the envs/ dirs."""
    listed = _ask_conda()
    if listed is not None:
        return listed
    dirs = envs_dirs()
    found: dict[str, Path] = {}
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
    return found, ", ".join(map(str, dirs)) or "no envs directory"


def envs_dirs() -> list[Path]:
    """The directories searched without conda, in order, each once."""
    out: list[Path] = [Path(p) for p in os.environ.get("CONDA_ENVS_PATH", "").split(os.pathsep) if p]
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


def _conda() -> str | None:
    exe = os.environ.get("CONDA_EXE")
    if exe and os.access(exe, os.X_OK):
        return exe
    return runner.which("conda")


def _ask_conda() -> tuple[dict[str, Path], str] | None:
    """conda's list, or None when conda is missing or does not answer with its JSON."""
    exe = _conda()
    if exe is None:
        return None
    try:
        done = runner.capture([exe, "info", "--envs", "--json"], timeout=CONDA_TIMEOUT)
        data = json.loads(done.stdout) if done.returncode == 0 else None
    except (RequirementError, subprocess.TimeoutExpired, OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("envs"), list):
        return None
    root = data.get("root_prefix") or data.get("conda_prefix")
    found: dict[str, Path] = {}
    for p in data["envs"]:
        if isinstance(p, str) and p:
            found.setdefault("base" if root and os.path.abspath(p) == os.path.abspath(root) else Path(p).name, Path(p))
    return found, f"`{exe} info --envs`"
