"""Who holds a lock, and how long to wait for it: the holder record and the one wait policy.

:class:`rocmbuild.fs.disk.FileLock` is the lock; this module is what it says about it.

Decisions:
* The holder record is a small JSON object the exclusive holder writes into the lock file:
  ``pid``, ``argv`` (its ``/proc/self/cmdline``), ``since`` (epoch seconds it took the lock),
  ``host`` and ``start`` (its start time in clock ticks since boot, ``/proc/<pid>/stat`` field 22,
  which tells a reused pid apart). A bare integer (what rocmbuild wrote before) reads as a pid.
* A holder is described with its live command line (``/proc/<pid>/cmdline``) when it runs on this
  host, else with the recorded argv. On another host (a shared filesystem) its pid is not checked.
* A busy lock whose recorded holder is dead (or unrecorded) is held by someone else: a process
  that inherited the file descriptor (a child forked without exec). Those processes are found
  through ``/proc/*/fdinfo`` (its ``lock:`` lines belong to the descriptor holding the lock) and
  named: the user must stop them, nothing else will free the lock.
* ``--wait-timeout S`` implies ``--wait``, and bounds each lock's wait (a run that needs the
  source lock, then the target lock, may wait up to S for each).
* Waiting is polled (:data:`POLL`): ``flock`` has no timeout, and a poll sees the holder change.
  The line saying whom we wait for is a warning, so it is on stderr with ``--json`` and
  ``--quiet`` too: an unattended run that sits still says why.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from rocmbuild import schema as s
from rocmbuild import ui
from rocmbuild.errors import LockedError

POLL = 0.1  # seconds between two tries of a busy lock
RECORD_MAX = 64 * 1024  # a holder record is read up to this size (anything longer is not one)


@dataclass(frozen=True)
class LockWait:
    """The lock policy: fail at once (the default), wait (``--wait``), or wait at most ``timeout``
    seconds (``--wait-timeout``, which implies waiting)."""

    wait: bool = False
    timeout: float | None = None

    @classmethod
    def of(cls, value: "bool | LockWait | None") -> "LockWait":
        if isinstance(value, LockWait):
            return value
        return cls(wait=bool(value))

    @classmethod
    def from_options(cls, wait: bool, timeout: float | None) -> "LockWait":
        return cls(wait=wait or timeout is not None, timeout=timeout)


# --------------------------------------------------------------------------------------------
# /proc


def _proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None: no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):  # a zombie holds no file: it is dead for a lock
        return None
    return int(fields[19])


def cmdline(pid: int) -> tuple[str, ...]:
    """``/proc/<pid>/cmdline`` as argv (empty when unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ()
    return tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a)


def fd_holders(path: Path, *, shared: bool = False) -> list[int]:
    """The pids holding an exclusive (``shared``: a shared) ``flock`` on ``path`` through a
    descriptor of theirs (this process excluded)."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    mode = " READ " if shared else " WRITE "
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            fds = os.listdir(d / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                s = os.stat(d / "fd" / fd)
                if (s.st_dev, s.st_ino) != (st.st_dev, st.st_ino):
                    continue
                info = (d / "fdinfo" / fd).read_text()
            except OSError:
                continue
            if any(line.startswith("lock:") and mode in line for line in info.splitlines()):
                out.append(int(d.name))
                break
    return out


# --------------------------------------------------------------------------------------------
# the holder record


@dataclass(frozen=True)
class HolderRecord:
    """The holder record as the lock file holds it (module notes), parsed by :data:`HOLDER_SPEC`."""

    pid: int
    argv: tuple[str, ...] = ()
    since: float | None = None  # epoch seconds
    host: str | None = None
    start: int | None = None  # clock ticks since boot (/proc/<pid>/stat field 22)

    def to_json(self) -> dict[str, object]:
        return {"pid": self.pid, "argv": list(self.argv), "since": self.since, "host": self.host, "start": self.start}


HOLDER_SPEC = s.record(HolderRecord, pid=s.check(s.integer, lambda v: v > 0, "a process id (an integer above 0)"))


def my_record() -> bytes:
    """This process's holder record (what :class:`~rocmbuild.fs.disk.FileLock` writes)."""
    pid = os.getpid()
    rec = HolderRecord(pid, tuple(cmdline(pid)), time.time(), socket.gethostname(), _proc_start(pid))
    return (json.dumps(rec.to_json(), sort_keys=True) + "\n").encode()


def holder_record(data: bytes) -> HolderRecord | None:
    """The record in a lock file's bytes, read by :data:`HOLDER_SPEC` (a bare integer: an older
    rocmbuild's pid); None: empty (released cleanly); SchemaError naming the field when refused."""
    text = data.decode(errors="replace").strip()
    if not text:
        return None
    try:
        rec = json.loads(text)
    except (ValueError, RecursionError):
        raise s.SchemaError("", "a holder record (a JSON object)", "text that is not JSON", "the lock's holder record") from None
    if type(rec) is int and rec > 0:
        return HolderRecord(rec)
    record: HolderRecord = s.load(HOLDER_SPEC, rec, "the lock's holder record")
    return record


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a lock, from its record; ``path`` is the lock file."""

    path: Path
    pid: int | None = None
    argv: tuple[str, ...] = ()
    since: float | None = None
    host: str | None = None
    start: int | None = None
    unreadable: str | None = None  # why its record could not be read (then no pid)

    @property
    def local(self) -> bool:
        return self.host is None or self.host == socket.gethostname()

    def alive(self) -> bool | None:
        """Whether the recorded process still runs (None: unknown: no pid, or another host)."""
        if self.pid is None or not self.local:
            return None
        now = _proc_start(self.pid)
        return now is not None and (self.start is None or now == self.start)

    def command(self) -> str:
        argv = cmdline(self.pid) if self.pid is not None and self.alive() else ()
        return shlex.join(argv or self.argv) or "command unknown"

    def when(self) -> str:
        if self.since is None:
            return ""
        try:
            t = _dt.datetime.fromtimestamp(self.since)
        except (OverflowError, OSError, ValueError):
            return ""
        age = max(0.0, time.time() - self.since)
        ago = f"{age:.0f} s" if age < 120 else f"{age / 60:.0f} min" if age < 7200 else f"{age / 3600:.1f} h"
        return f", since {t:%Y-%m-%d %H:%M:%S} ({ago} ago)"

    def describe(self) -> str:
        """``pid 123 (rocmbuild apply ...), since ...``: what is known of the recorded holder."""
        where = "" if self.local else f" on host {self.host}"
        return f"pid {self.pid}{where} ({self.command()}){self.when()}"

    def orphans(self) -> list[int]:
        """The processes really holding the lock when its recorded holder is dead."""
        return fd_holders(self.path) if self.pid is not None and self.alive() is False else []


def _holder(path: Path, rec: HolderRecord) -> "Holder":
    return Holder(path, pid=rec.pid, argv=rec.argv, since=rec.since, host=rec.host or None, start=rec.start)


def parse_record(data: bytes, path: Path = Path()) -> Holder | None:
    """The holder in a lock file's bytes (None: empty, i.e. released cleanly, or a record its schema refuses)."""
    try:
        rec = holder_record(data)
    except s.SchemaError:
        return None
    return _holder(Path(path), rec) if rec else None


def read_holder(path: Path) -> Holder:
    """The holder of the lock file ``path`` as its record says; a record that cannot be read gives
    a holder without a pid that says why (``unreadable``): the record is advisory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            data = os.read(fd, RECORD_MAX + 1)
        finally:
            os.close(fd)
    except OSError:
        data = b""
    if len(data) > RECORD_MAX:
        return Holder(Path(path), unreadable=f"longer than {RECORD_MAX} bytes")
    try:
        rec = holder_record(data)
    except s.SchemaError as exc:
        return Holder(Path(path), unreadable=exc.text())
    return _holder(Path(path), rec) if rec else Holder(Path(path))


# --------------------------------------------------------------------------------------------
# what is said


def _named(pids: list[int]) -> str:
    return ", ".join(f"pid {p} ({shlex.join(cmdline(p)) or 'command unknown'})" for p in pids)


def held_by(holder: Holder) -> str:
    """Who holds the lock: its recorded holder; else the shared holders (they write no record);
    else the processes that kept the lock's descriptor when the recorded holder died."""
    if holder.pid is not None and holder.alive() is not False:
        return f"held by {holder.describe()}"
    readers = fd_holders(holder.path, shared=True)
    if readers:
        return f"held (shared) by {_named(readers)}"
    if holder.pid is None:
        found = fd_holders(holder.path)
        why = f" (its holder record cannot be read: {holder.unreadable})" if holder.unreadable else ""
        return (f"held by {_named(found)}" if found else "held by a process that left no record") + why
    orphans = holder.orphans()
    who = _named(orphans) if orphans else "a process this user cannot see"
    return (f"held by {who}: its recorded holder, {holder.describe()}, is dead, and a process it started "
            "kept the lock's file descriptor open (an orphaned child)")


def locked_error(what: str, path: Path, holder: Holder, waited: float | None) -> LockedError:
    """The exit-5 error for a busy lock, naming its holder (and how long we waited)."""
    gave_up = f"; gave up after waiting {waited:.1f} s (--wait-timeout)" if waited is not None else ""
    orphans = holder.orphans()
    if orphans:
        hint = f"stop the leftover process(es) holding it (`kill {' '.join(map(str, orphans))}`): their run is over"
    elif waited is not None:
        hint = "wait longer (a larger --wait-timeout, or --wait without one), or stop that run"
    else:
        hint = "wait for that run to finish, or pass --wait to queue behind it (--wait-timeout S to bound the wait)"
    return LockedError(f"{what} is locked by another rocmbuild run ({held_by(holder)}); lock file: {path}{gave_up}",
                       hint, details={"pid": str(holder.pid) if holder.pid is not None else "unknown",
                                      "lock": str(path)})


def say_waiting(what: str, path: Path, holder: Holder, policy: LockWait) -> None:
    limit = f"; giving up after {policy.timeout:g} s" if policy.timeout is not None else ""
    ui.warn(f"waiting for {what} ({path}): {held_by(holder)}{limit}")  # ui escapes markup


def say_taken_over(what: str, path: Path, old: Holder) -> None:
    if old.since is None or old.alive() is True:
        return  # a bare pid (an older rocmbuild never emptied it), or a live process: nothing to tell
    ui.warn(f"took over {what} ({path}) from {old.describe()}: it ended without releasing the lock")
