"""``rocmbuild log RECIPE``: print the newest build log of a recipe, list them (``--list``), or
follow the one a build writes now (``--follow``, like ``tail -f``) until that build ends.

Decisions: RECIPE is a recipe name, or a recipe file (its name is read from it); the logs are
builder/logs.py's (``logs/<recipe>/``, and the old-named ones whose first line names the recipe).
``--follow`` prints what is there, then what is added, until the process the log names as its
writer (``# rocmbuild pid N``, checked to be a rocmbuild) is gone, then the rest; a log of an
older release names no writer and is printed once. No log is an error (exit 2) naming where
rocmbuild looked.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Sequence

from rocmbuild.builder import logs
from rocmbuild.errors import InputError
from rocmbuild.home import cache_home, logs_dir
from rocmbuild.names import safe_lines
from rocmbuild.results import LogResult

POLL = 0.2


def _name(recipe: str, recipes_dirs: Sequence[str]) -> str:
    if recipe.endswith(".toml") or "/" in recipe:
        from rocmbuild import recipe as recipes

        return recipes.load(recipe, recipes_dirs).name
    return recipe


def log(recipe: str, recipes_dirs: Sequence[str] = (), *, list_only: bool = False, follow: bool = False) -> LogResult:
    home = cache_home()
    name = _name(recipe, recipes_dirs)
    found = logs.of_recipe(home, name)
    if not found:
        have = logs.recipes(home)
        raise InputError(f"no build log of {name} in {logs_dir(home)}",
                         f"logs are written by `rocmbuild build`/`apply`; recipes with logs: {', '.join(have) or 'none'}")
    paths = tuple(str(p) for p in found)
    if list_only:
        return LogResult(name, paths)
    if follow:
        tail(found[-1])
        return LogResult(name, paths, followed=True)
    return LogResult(name, paths, found[-1].read_text(encoding="utf-8", errors="replace"))


def _running(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"rocmbuild" in cmd


def tail(path: Path, out=None) -> None:
    """Print ``path`` and what is appended to it while its writer runs (each line escaped)."""
    out = out or sys.stdout
    pid = logs.writer(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        pending = ""
        while True:
            alive = _running(pid)
            chunk = f.read()
            if chunk:
                pending += chunk
                *whole, pending = pending.split("\n")
                for line in whole:
                    out.write(safe_lines(line) + "\n")
                out.flush()
            elif not alive:
                break
            else:
                time.sleep(POLL)
        if pending:
            out.write(safe_lines(pending) + "\n")
            out.flush()
