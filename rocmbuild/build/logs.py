"""Build logs: one file per attempt, the newest linked as ``logs/<key>.log``.

Decisions: an attempt's log is ``logs/<key>-<UTC timestamp>.log``, created exclusively (a second
attempt in the same second gets ``-2``, ``-3``, ...), so a re-run never writes over the log of the
attempt that failed; ``logs/<key>.log`` is a relative symlink replaced atomically (a new link beside
it, then ``rename``), so ``tail -F logs/<key>.log`` follows the newest attempt. A regular file at
that name (a log from before attempts had their own) is kept as ``<key>-earlier.log``. Writers
append line by line and flush each line (runner.py), so ``tail -f`` sees the build as it runs.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

from rocmbuild.home import logs_dir


def link_path(home: Path, key: str) -> Path:
    """``logs/<key>.log``: the newest attempt's log (a symlink)."""
    return logs_dir(home) / f"{key}.log"


def newest(home: Path, key: str) -> Path | None:
    """The newest attempt's log of ``key`` (where the link points), or None."""
    link = link_path(home, key)
    return link.resolve() if link.is_symlink() and link.exists() else None


def attempts(home: Path, key: str) -> list[Path]:
    """Every attempt's log of ``key``, oldest first."""
    return sorted(p for p in logs_dir(home).glob(f"{key}-*.log") if not p.is_symlink())


def start(home: Path, key: str, header: str) -> Path:
    """A new, empty log for an attempt at building ``key`` (its first line ``header``), linked
    as the newest; returns its path (error messages name this file, not the link)."""
    d = logs_dir(home)
    d.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = _create(d, f"{key}-{stamp}", header)
    _relink(link_path(home, key), path)
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
    if link.is_file() and not link.is_symlink():  # an earlier log: kept, never overwritten
        kept = link.with_name(f"{link.stem}-earlier.log")
        if not kept.exists():
            os.replace(link, kept)
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    os.symlink(target.name, tmp)
    os.replace(tmp, link)
