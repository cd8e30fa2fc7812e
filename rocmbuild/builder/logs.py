"""Build logs: one file per attempt, named and listed by recipe.

An attempt's log is ``logs/<recipe>/<UTC stamp>-<key[:16]>.log``; ``logs/<recipe>/latest.log`` is
a relative symlink to the newest attempt of that recipe, so ``tail -F logs/miopen/latest.log``
follows the build that runs now, and ``rocmbuild log RECIPE`` prints (or ``--follow``s) it.

Decisions: a log is created exclusively (a second attempt in the same second gets ``-2``,
``-3``, ...), so a re-run never writes over the log of the attempt that failed; its first line
says what it is, its second names the writing process (``# rocmbuild pid N``: what ``--follow``
watches to know when the build is over); the link is made beside its name and renamed over it.
Writers append line by line and flush each line (runner.py), so a reader sees the build as it
runs. The recipe name has its grammar (``names.py``) before it reaches a file name.

Logs of older releases (``logs/<key>-<stamp>.log`` and the link ``logs/<key>.log``) are still
read: by key (:func:`newest`), and by recipe through their first line, which names the recipe.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from pathlib import Path

from rocmbuild.home import logs_dir

LATEST = "latest.log"
_STAMP = re.compile(r"(\d{8}T\d{6}Z)")
OLD_NAME = re.compile(r"^[0-9a-f]{64}-(\d{8}T\d{6}Z|earlier)(-\d+)?\.log$")
_NAMED = re.compile(r"\bbuild of ([A-Za-z0-9][A-Za-z0-9._+-]*)[ :]")
_PID = re.compile(r"^# rocmbuild pid (\d+)$", re.M)


def recipe_dir(home: Path, recipe: str) -> Path:
    return logs_dir(home) / recipe


def link_path(home: Path, recipe: str) -> Path:
    """``logs/<recipe>/latest.log``: the newest attempt's log of ``recipe`` (a symlink)."""
    return recipe_dir(home, recipe) / LATEST


def start(home: Path, key: str, header: str, recipe: str = "unnamed") -> Path:
    """A new log for an attempt at building ``key`` of ``recipe`` (its first line ``header``, its
    second this process), linked as the recipe's newest; returns its path (error messages name
    this file, not the link)."""
    d = recipe_dir(home, recipe)
    d.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = _create(d, f"{stamp}-{key[:16]}", header.rstrip("\n") + f"\n# rocmbuild pid {os.getpid()}")
    _relink(link_path(home, recipe), path)
    return path


def _create(d: Path, stem: str, header: str) -> Path:
    for n in range(1, 1000):
        path = d / (f"{stem}.log" if n == 1 else f"{stem}-{n}.log")
        try:
            with open(path, "x", encoding="utf-8") as f:
                f.write(header.rstrip("\n") + "\n")
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{d / stem}.log: a thousand attempts in one second")


def _relink(link: Path, target: Path) -> None:
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    os.symlink(target.name, tmp)
    os.replace(tmp, link)


_SUFFIX = re.compile(r"-(\d{1,3})\.log$")


def _order(p: Path) -> tuple[str, int]:
    """Oldest first: the attempt's start, then its ``-N`` within that second."""
    m, n = _STAMP.search(p.name), _SUFFIX.search(p.name)
    return (m.group(1) if m else "", int(n.group(1)) if n else 1)


def attempts(home: Path, key: str) -> list[Path]:
    """Every attempt's log of ``key``, oldest first (old names too)."""
    d = logs_dir(home)
    if not d.is_dir():
        return []
    found = [p for p in d.glob(f"*/*-{key[:16]}*.log") if not p.is_symlink()]
    found += [p for p in d.glob(f"{key}-*.log") if not p.is_symlink()]
    return sorted(found, key=_order)


def newest(home: Path, key: str) -> Path | None:
    """The newest attempt's log of ``key``, or None."""
    found = attempts(home, key)
    if found:
        return found[-1]
    old = logs_dir(home) / f"{key}.log"  # an older release's link
    return old.resolve() if old.is_symlink() and old.exists() else None


def named_recipe(path: Path) -> str | None:
    """The recipe an old-named log is of, from its first line (None: it does not say)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return None
    m = _NAMED.search(first)
    return m.group(1) if m else None


def of_recipe(home: Path, recipe: str) -> list[Path]:
    """Every log of ``recipe``, oldest first: its own directory's, and old-named ones that name it."""
    d = recipe_dir(home, recipe)
    found = [p for p in d.glob("*.log") if not p.is_symlink()] if d.is_dir() else []
    top = logs_dir(home)
    if top.is_dir():
        found += [p for p in top.iterdir() if OLD_NAME.match(p.name) and not p.is_symlink() and named_recipe(p) == recipe]
    return sorted(found, key=_order)


def recipes(home: Path) -> list[str]:
    """The recipes that have logs (their directories)."""
    d = logs_dir(home)
    return sorted(p.name for p in d.iterdir() if p.is_dir() and not p.is_symlink()) if d.is_dir() else []


def writer(path: Path) -> int | None:
    """The pid the log names as its writer (None: an old log, or none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return None
    m = _PID.search(head)
    return int(m.group(1)) if m else None
