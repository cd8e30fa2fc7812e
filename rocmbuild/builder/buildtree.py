"""Who uses a build tree ``build/<key>/``: never two process trees in it at once.

The key lock serializes rocmbuild runs, but a lock dies with its holder, and the compilers of a
killed run may not (a tree from an older rocmbuild, a tool that calls ``setsid()``). So the builder
records in ``build/<key>/.rocmbuild-owner.json`` its pid (with the process start time, which tells
a reused pid apart) and the session of every command it starts; on start, the tree is *busy* when
that pid still runs, a process of those sessions still runs, or any live process has its working
directory inside the tree. A busy tree is never reused: the build stops with exit 5 naming the
processes, or, with ``wait``, waits until they are gone.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import time
from typing import Any
from pathlib import Path

from rocmbuild.proc import runner
from rocmbuild import ui
from rocmbuild.fs.disk import atomic_write_json
from rocmbuild.errors import LockedError

OWNER = ".rocmbuild-owner.json"
POLL = 0.5


def users(tree: Path) -> list[runner.Process]:
    """The live processes (other than this one) that use ``tree``."""
    import json

    record: dict = {}
    try:
        record = json.loads((tree / OWNER).read_text())
    except (OSError, ValueError):
        pass
    me = os.getpid()
    sessions = set(record.get("sessions", ()))
    root = str(tree.resolve()) if tree.exists() else str(tree)
    found = []
    for p in runner.processes():
        if p.pid == me:
            continue
        owner = p.pid == record.get("pid") and p.start == record.get("start")
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
        self.record: dict[str, Any] = {"pid": os.getpid(), "start": me.start if me else None, "command": sys.argv,
                       "since": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "sessions": []}
        tree.mkdir(parents=True, exist_ok=True)
        self._write()

    def _write(self) -> None:
        atomic_write_json(self.tree / OWNER, self.record)

    def started(self, sid: int) -> None:
        self.record["sessions"].append(sid)
        self._write()
