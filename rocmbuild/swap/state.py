"""Target state: ``<prefix>/.rocmbuild/`` (or ``$ROCMBUILD_HOME/targets/<hash>/``), lock, history.

Decisions:
* A target whose library lives outside its prefix (``--allow-outside-prefix``) keeps its state in
  ``home()/targets/<sha256(libdir)[:16]>/`` with a ``target.json`` naming the prefix and lib dir,
  so that verbs that only know the prefix (history, recover) find it again.
* ``history.jsonl`` is rewritten atomically (read, append one line, atomic_write_bytes) rather than
  appended in place: it is small, and a torn last line can never happen.
* The lock is ``fcntl.flock`` on the ``lock`` file. The holder writes its pid into the file after
  locking; a refused locker reads it to name the holder. A *shared* lock taken on an existing lock
  file opened read-only (:func:`shared_lock`) excludes writers without writing anything: the
  "already applied" path uses it so that it writes no file in the target.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

from rocmbuild.disk import atomic_write_bytes, atomic_write_json, makedirs_durable, read_json
from rocmbuild.home import cache_home as home

STATE_DIRNAME = ".rocmbuild"


def target_state_dir(prefix: Path, libdir: Path | None = None, *, outside: bool = False) -> Path:
    """Where a target's lock, journals, backups and history live."""
    if not outside:
        return Path(prefix) / STATE_DIRNAME
    digest = hashlib.sha256(str(Path(libdir)).encode()).hexdigest()[:16]
    return home() / "targets" / digest


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
    targets = home() / "targets"
    if targets.is_dir():
        for d in sorted(targets.iterdir()):
            try:
                if Path(read_json(d / "target.json")["prefix"]) == Path(prefix):
                    out.append(d)
            except (OSError, ValueError, KeyError):
                continue
    return out


class TargetLock:
    """An exclusive (or shared) ``flock`` on ``<state_dir>/lock``; a context manager.

    ``wait=False`` fails at once with :class:`LockedError` naming the holder's pid.
    """

    def __init__(self, state_dir: Path, *, wait: bool = False, shared: bool = False) -> None:
        self.path = Path(state_dir) / "lock"
        self.wait = wait
        self.shared = shared
        self.fd: int | None = None

    def holder(self) -> str:
        try:
            text = self.path.read_text().strip()
        except OSError:
            text = ""
        return text or "unknown"

    def acquire(self) -> "TargetLock":
        from rocmbuild.errors import LockedError

        if self.shared:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                self.fd = None  # no state yet: nothing to exclude, nothing written
                return self
        else:
            makedirs_durable(self.path.parent)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        op = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        try:
            fcntl.flock(self.fd, op if self.wait else op | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self.holder()
            os.close(self.fd)
            self.fd = None
            raise LockedError(
                f"the target is locked by another rocmbuild run (pid {holder}); lock file: {self.path}",
                "wait for that run to finish, or pass --wait to queue behind it",
                details={"pid": holder, "lock": str(self.path)},
            ) from None
        if not self.shared:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
            os.fsync(self.fd)
        return self

    def release(self) -> None:
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None

    def __enter__(self) -> "TargetLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


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
