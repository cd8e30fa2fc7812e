"""The journals of a target: ``journal/<txn>.json`` in its state dir, ids, failpoints, and the
replay that says which committed transactions are in effect (:func:`active`).

Decisions:
* an id is ``NNNN-YYYYmmddTHHMMSSZ``: a sequence number (ordered, short to type for ``--to``;
  the caller holds the lock, so it is unique) and the UTC time;
* every journal write is atomic (temp, fsync, rename, fsync dir); a journal that cannot be read
  is left out of the listing, never guessed at;
* a failpoint (``ROCMBUILD_FAILPOINTS=name[,name]``) ends the process with ``os._exit(137)``, the
  way a SIGKILL would: no cleanup, no ``finally`` (the names: docs/testing.md); a pausepoint
  (``ROCMBUILD_PAUSEPOINTS``, the same names) says so on stderr and sleeps there, for a test to
  send a signal mid-step.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from rocmbuild import disk
from rocmbuild.swap import actions as _actions
from rocmbuild.swap.plan import Plan

FAILPOINTS = ("after-journal", "after-stage", "after-backup", "mid-swap", "after-swap", "after-verify",
              "mid-rollback", "after-commit")
FINISHED = ("committed", "rolled_back")
JOURNAL_SCHEMA = 1


def failpoint(name: str) -> None:
    """Exit abruptly (status 137, like SIGKILL) when ``name`` is in ``$ROCMBUILD_FAILPOINTS``; first
    sleep ``$ROCMBUILD_PAUSE_SECONDS`` (60) when it is in ``$ROCMBUILD_PAUSEPOINTS``."""
    assert name in FAILPOINTS, name
    if name in [n.strip() for n in os.environ.get("ROCMBUILD_PAUSEPOINTS", "").split(",")]:
        sys.stderr.write(f"rocmbuild: pausepoint {name}\n")  # a test signals us here
        sys.stderr.flush()
        time.sleep(float(os.environ.get("ROCMBUILD_PAUSE_SECONDS", "60")))
    wanted = [n.strip() for n in os.environ.get("ROCMBUILD_FAILPOINTS", "").split(",")]
    if name in wanted:
        try:
            sys.stderr.write(f"rocmbuild: failpoint {name}: exiting with 137\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        os._exit(137)


def seq(txn_id: str) -> int:
    """The sequence number of a transaction id (0 for an id without one)."""
    head = txn_id.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def journal_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "journal"


def backup_dir(state_dir: Path, txn: str) -> Path:
    return Path(state_dir) / "backups" / txn


def new_id(state_dir: Path) -> str:
    """The next transaction id in ``state_dir`` (the caller holds the lock)."""
    d = journal_dir(state_dir)
    last = max((seq(p.stem) for p in d.glob("*.json")), default=0) if d.is_dir() else 0
    return f"{last + 1:04d}-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


class Journal:
    """One transaction's journal: its JSON ``data`` and where it lives."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def load(cls, path: Path) -> "Journal":
        return cls(path, disk.read_json(path))

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def state(self) -> str:
        return self.data["state"]

    @property
    def verb(self) -> str:
        return self.data["verb"]

    @property
    def plan(self) -> Plan:
        return Plan.from_json(self.data["plan"])

    @property
    def files(self) -> list[str]:
        """The paths this transaction changes (its steps), in plan order."""
        plan = self.plan
        return [plan.actions[s["index"]].path for s in self.data["steps"]]

    @property
    def backups_pruned(self) -> str | None:
        """When ``--keep`` removed this transaction's backups (None: they are there)."""
        return self.data.get("backups_pruned")

    def set(self, **kw: Any) -> None:
        self.data.update(kw)
        self.save()

    def save(self) -> None:
        self.data["updated"] = now()
        disk.atomic_write_json(self.path, self.data)

    def file_actions(self) -> list[tuple[_actions.FileAction, dict[str, Any]]]:
        """Each step's file action, with the step's journal entry (updated in place)."""
        plan = self.plan
        bdir = backup_dir(Path(plan.state_dir), self.id)
        out = []
        for step in self.data["steps"]:
            a = plan.actions[step["index"]]
            out.append((_actions.make(a, self.id, bdir, step["index"], backup_copied=bool(step.get("backup_copied"))),
                        step))
        return out


def journals(state_dir: Path) -> list[Journal]:
    """Every readable journal of ``state_dir``, oldest first."""
    d = journal_dir(state_dir)
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob("*.json"), key=lambda p: (seq(p.stem), p.stem)):
        try:
            out.append(Journal.load(p))
        except (OSError, ValueError):
            continue
    return out


def pending(state_dir: Path) -> list[Journal]:
    """Journals not committed and not rolled back (crashed or running right now)."""
    return [j for j in journals(state_dir) if j.state not in FINISHED]


def active(state_dir: Path) -> list[Journal]:
    """Committed transactions whose effect is in place, oldest first (a replay of the journals).

    An apply is appended. A rollback that undid a *suffix* of the active list, from X on
    (``rollback --to X``), leaves the list as it was just before X was committed, plus itself:
    undoing a rollback therefore redoes what that rollback undid, and nothing else comes back.
    A rollback that undid something else (plain ``rollback``: the latest apply, with later
    rollbacks still in effect) removes what it undid and appends itself."""
    act: list[Journal] = []
    before: dict[str, list[Journal]] = {}  # id -> the active list just before it was committed
    for j in journals(state_dir):
        if j.state != "committed":
            continue
        before[j.id] = list(act)
        undoes = set(j.plan.undoes)
        if undoes:
            ids = [x.id for x in act]
            idx = min((ids.index(u) for u in undoes if u in ids), default=None)
            if idx is not None and set(ids[idx:]) == undoes and ids[idx] in before:
                act = list(before[ids[idx]])
            else:
                act = [x for x in act if x.id not in undoes]
        act.append(j)
    return act
