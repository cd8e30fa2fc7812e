"""Target state: ``<prefix>/.rocmbuild/`` (or ``$ROCMBUILD_HOME/targets/<hash>/``), lock, history.

Decisions:
* A target whose library lives outside its prefix (``--allow-outside-prefix``) keeps its state in
  ``home()/targets/<sha256(libdir)[:16]>/`` with a ``target.json`` naming the prefix and lib dir,
  so that verbs that only know the prefix (history, recover) find it again.
* ``history.jsonl`` is rewritten atomically (read, append one line, atomic_write_bytes) rather than
  appended in place: it is small, and a torn last line can never happen.
* The lock is ``fcntl.flock`` on the ``lock`` file (:class:`rocmbuild.disk.FileLock`): the holder
  writes its holder record into the file after locking; a refused locker reads it to name the
  holder (pid, command, since when). A *shared* lock taken on an existing lock
  file opened read-only (``TargetLock(..., shared=True)``) excludes writers without writing
  anything: the "already applied" path uses it so that it writes no file in the target.
"""

from __future__ import annotations

import json
from pathlib import Path

from rocmbuild.disk import FileLock, atomic_write_bytes, atomic_write_json, read_json
from rocmbuild.locks import LockWait
from rocmbuild.home import STATE_DIRNAME, cache_home, target_state_dir, targets_dir

__all__ = ["STATE_DIRNAME", "target_state_dir", "TargetLock", "register_outside_target", "state_dirs_for",
           "append_history", "read_history"]


def register_outside_target(state_dir: Path, prefix: Path, libdir: Path) -> None:
    p = Path(state_dir) / "target.json"
    if not p.exists():
        atomic_write_json(p, {"prefix": str(prefix), "libdir": str(libdir)})


def state_dirs_for(prefix: Path) -> list[Path]:
    """Every state directory that belongs to ``prefix`` (its own, and outside-prefix ones)."""
    out = []
    own = Path(prefix) / STATE_DIRNAME
    if own.is_dir():
        out.append(own)
    targets = targets_dir(cache_home())
    if targets.is_dir():
        for d in sorted(targets.iterdir()):
            try:
                if Path(read_json(d / "target.json")["prefix"]) == Path(prefix):
                    out.append(d)
            except (OSError, ValueError, KeyError):
                continue
    return out


def TargetLock(state_dir: Path, *, wait: bool | LockWait = False, shared: bool = False) -> FileLock:
    """The lock on ``<state_dir>/lock``: fails at once (``LockedError`` naming its holder, exit 5)
    unless ``wait`` (a bool, or a :class:`~rocmbuild.locks.LockWait` with a timeout)."""
    return FileLock(Path(state_dir) / "lock", wait=wait, shared=shared, what="the target")


def append_history(state_dir: Path, record: dict) -> None:
    path = Path(state_dir) / "history.jsonl"
    old = path.read_bytes() if path.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    line = json.dumps(record, sort_keys=True, default=str) + "\n"
    atomic_write_bytes(path, old + line.encode())


def read_history(state_dir: Path) -> list[dict]:
    path = Path(state_dir) / "history.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
