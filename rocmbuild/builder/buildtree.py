"""Who uses a build tree ``build/<key>/``: never two process trees in it at once.

The key lock serializes rocmbuild runs, but a lock dies with its holder, and the compilers of a
killed run may not (a tree from an older rocmbuild, a tool that calls ``setsid()``). So the builder
records in ``build/<key>/.rocmbuild-owner.json`` its pid (with the process start time, which tells
a reused pid apart) and the session of every command it starts; on start, the tree is *busy* when
that pid still runs, a process of those sessions still runs, or any live process has its working
directory inside the tree. A busy tree is never reused: the build stops with exit 5 naming the
processes, or, with ``wait``, waits until they are gone.

Decisions: the record is read by :data:`OWNER_SPEC`; one it refuses (or that is not JSON) is
said as a warning and taken as none: the processes working inside the tree are still found.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rocmbuild import schema as s
from rocmbuild.proc import runner
from rocmbuild import ui
from rocmbuild.fs.disk import atomic_write_json
from rocmbuild.errors import LockedError

OWNER = ".rocmbuild-owner.json"
POLL = 0.5


@dataclass(frozen=True)
class OwnerRecord:
    """``build/<key>/.rocmbuild-owner.json``: who claimed the tree and the sessions of the commands
    it started; parsed by :data:`OWNER_SPEC`, changed by ``replace`` and saved whole."""

    pid: int
    start: int | None = None  # the process's start time (clock ticks since boot)
    command: tuple[str, ...] = ()
    since: str | None = None
    sessions: tuple[int, ...] = ()

    def to_json(self) -> dict:
        return {"pid": self.pid, "start": self.start, "command": list(self.command), "since": self.since,
                "sessions": list(self.sessions)}


OWNER_SPEC = s.record(OwnerRecord)


def read_owner(tree: Path) -> OwnerRecord | None:
    """The owner record of ``tree`` (None: there is none, or one that cannot be read: said as a
    warning, and then only the processes working inside the tree are looked for)."""
    path = tree / OWNER
    try:
        return s.load(OWNER_SPEC, json.loads(path.read_text()), path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:  # SchemaError is a ValueError
        ui.warn(f"the build tree's owner record cannot be read ({exc}); only processes working inside the tree "
                "are looked for")
        return None


def users(tree: Path) -> list[runner.Process]:
    """The live processes (other than this one) that use ``tree``."""
    record = read_owner(tree)
    me = os.getpid()
    sessions = set(record.sessions) if record else set()
    root = str(tree.resolve()) if tree.exists() else str(tree)
    found = []
    for p in runner.processes():
        if p.pid == me:
            continue
        owner = record is not None and p.pid == record.pid and p.start == record.start
        inside = p.cwd is not None and (p.cwd == root or p.cwd.startswith(root + "/"))
        if owner or p.sid in sessions or inside:
            found.append(p)
    return found


def claim(tree: Path, *, wait: bool = False) -> "Owner":
    """Make ``tree`` ours: refuse (LockedError, exit 5) or wait while another process uses it."""
    told = False
    while True:
        busy = users(tree)
        if not busy:
            break
        listing = "; ".join(f"pid {p.pid}: {p.command[:120]}" for p in busy[:5])
        if not wait:
            raise LockedError(
                f"the build tree {tree} is still in use by {len(busy)} live process(es): {listing}",
                "wait for them to finish (or stop them: kill -TERM PID), or run again with --wait",
                details={"build_dir": str(tree), "pids": [p.pid for p in busy]})
        if not told:
            ui.info(f"waiting for {len(busy)} process(es) still using {tree}: {listing}")
            told = True
        time.sleep(POLL)
    return Owner(tree)


class Owner:
    """The owner record of a claimed tree; :meth:`started` adds the session of a new command."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        me = runner.process(os.getpid())
        self.record = OwnerRecord(os.getpid(), me.start if me else None, tuple(sys.argv),
                                  _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        tree.mkdir(parents=True, exist_ok=True)
        self._write()

    def _write(self) -> None:
        atomic_write_json(self.tree / OWNER, self.record.to_json())

    def started(self, sid: int) -> None:
        self.record = replace(self.record, sessions=self.record.sessions + (sid,))
        self._write()
