"""What ``cache gc`` removes beside artifacts and build trees: source clones and old logs.

Decisions (docs/cache.md, "Housekeeping"):
* **Sources** ``src/<remote>/`` (a clone), ``src/<remote>-commits.git`` (its commits-only mirror)
  and extracted archives: removable when not fetched for ``--keep-days`` days. The last fetch is
  the newest mtime of the entry and of git's ``FETCH_HEAD``, ``HEAD`` and ``index`` in it (every
  fetch and checkout writes one of them). One is taken under its source lock (``src/<remote>.lock``,
  the lock a fetch holds), never while a fetch or a build holds it. A removed source costs one
  clone on the next build; an artifact never needs its source.
* **Logs** ``logs/<recipe>/``: the newest :data:`KEEP_LOGS` of each recipe always stay (the last
  failure is the one a person reads); older ones go when older than ``--keep-days``. A log whose
  writer is still running (:func:`rocmbuild.builder.logs.writer`) is never removed. Logs of older
  releases (``logs/<key>-<stamp>.log``) count with the recipe their first line names; their
  ``logs/<key>.log`` links go when what they point to is gone.
* Failed and interrupted build trees are housekeeping.py's ``build_dirs``.
"""

from __future__ import annotations

from pathlib import Path

from rocmbuild.builder import logs as _logs
from rocmbuild.store.housekeeping import Candidate, alive, disk_bytes, iso, remove
from rocmbuild.fs.disk import FileLock
from rocmbuild.errors import LockedError
from rocmbuild.home import logs_dir, src_dir

KEEP_LOGS = 5
_GIT_STAMPS = (".git/FETCH_HEAD", ".git/HEAD", ".git/index", "FETCH_HEAD", "HEAD")


def _mtime(p: Path) -> float | None:
    try:
        return p.lstat().st_mtime
    except OSError:
        return None


def last_fetch(entry: Path) -> float | None:
    times = [t for t in (_mtime(entry), *(_mtime(entry / s) for s in _GIT_STAMPS)) if t is not None]
    return max(times) if times else None


def _lock_of(entry: Path) -> Path:
    name = entry.name.removesuffix("-commits.git")
    return entry.with_name(name + ".lock")


def sources(home: Path, cutoff: float) -> list[Candidate]:
    d = src_dir(home)
    out = []
    for p in sorted(d.iterdir()) if d.is_dir() else ():
        if p.name.startswith(".") or p.name.endswith(".lock") or p.is_symlink() or not p.is_dir():
            continue
        since = last_fetch(p)
        if since is not None and since <= cutoff:
            out.append(Candidate("source", str(p), f"not fetched since {iso(since)}", disk_bytes(p), iso(since)))
    return out


def take_source(c: Candidate, home: Path, *, dry_run: bool) -> str | None:
    """Remove a source under its lock; why it was kept, or None."""
    if dry_run:
        return None
    try:
        with FileLock(_lock_of(Path(c.path)), wait=False, what="the source cache"):
            if not Path(c.path).exists():
                return "gone meanwhile"
            remove(Path(c.path), home)
    except LockedError:
        return "a fetch or a build is using it"
    return None


def old_logs(home: Path, cutoff: float, keep: int = KEEP_LOGS) -> list[Candidate]:
    """The logs ``cache gc`` may remove (see the module notes)."""
    out = []
    names = set(_logs.recipes(home))
    top = logs_dir(home)
    olds = [p for p in top.iterdir() if _logs.OLD_NAME.match(p.name)] if top.is_dir() else []
    names |= {n for n in (_logs.named_recipe(p) for p in olds) if n}
    seen = set()
    for name in sorted(names):
        found = _logs.of_recipe(home, name)
        seen |= set(found)
        for p in found[:-keep] if keep else found:
            since = _mtime(p)
            if since is not None and since <= cutoff and not alive(_logs.writer(p)):
                out.append(Candidate("log", str(p), f"an older log of {name} (the newest {keep} stay)",
                                     disk_bytes(p), iso(since)))
    for p in olds:  # an old-named log whose first line names no recipe: by age alone
        since = _mtime(p)
        if p not in seen and since is not None and since <= cutoff:
            out.append(Candidate("log", str(p), "an old log naming no recipe", disk_bytes(p), iso(since)))
    return out


def dangling_links(home: Path) -> list[Path]:
    """``logs/<key>.log`` links of older releases whose log is gone."""
    top = logs_dir(home)
    return [p for p in top.glob("*.log") if p.is_symlink() and not p.exists()] if top.is_dir() else []
