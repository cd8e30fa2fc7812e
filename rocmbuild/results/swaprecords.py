"""The small results swap hands out: drift found, backups pruned, an old state restored, a
transaction recovered. Frozen values with ``to_json()`` (the objects docs/json.md names).

Decision: each record is also a read-only mapping of its JSON form (``rec["id"]``), so code
written against the documented JSON objects reads the records unchanged; ``to_json()`` is what
goes into a JSON document (``json`` does not serialise a mapping that is not a dict).
"""

from __future__ import annotations

import abc

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rocmbuild.results.verdict import Check, Verdict, failure_json


class Record(Mapping[str, Any]):
    """A frozen value that reads like its JSON object (each record defines ``to_json``)."""

    @abc.abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The record's JSON object (the keys docs/json.md names)."""

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())


@dataclass(frozen=True)
class Drift(Record):
    """A path rocmbuild placed that is no longer what it left there.

    ``expected``/``found`` describe identities (inodes, sizes: for scripts); the other fields say
    it as a person asks it: what was placed (its version and sha256 where known) and what is there
    now (``found_version`` only where something vouches for it: ``found_version_from``)."""

    path: str
    txn: str
    expected: str  # PathState.describe() of what rocmbuild left
    found: str  # ... and of what is there now
    role: str | None = None  # library | link | data | restore (the placing action's)
    placed_version: str | None = None  # the version the placing transaction expected (libraries)
    placed_sha256: str | None = None
    found_kind: str | None = None  # file | link | absent | other
    written_in_place: bool = False  # the same inode rocmbuild left, other bytes
    found_version: str | None = None
    found_version_from: str | None = None  # "process": the target's torch loads this very file

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "txn": self.txn, "expected": self.expected, "found": self.found,
                "role": self.role, "placed_version": self.placed_version, "placed_sha256": self.placed_sha256,
                "found_kind": self.found_kind, "written_in_place": self.written_in_place,
                "found_version": self.found_version, "found_version_from": self.found_version_from}


@dataclass(frozen=True)
class Pruned(Record):
    """A transaction whose backups ``--keep`` removed: ``in_effect`` (an apply in effect: the state
    before it can no longer be brought back by a rollback that needs those very backups) or not
    (undone, or a rollback or redo: nothing in effect loses its way back)."""

    id: str
    freed_bytes: int
    in_effect: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "freed_bytes": self.freed_bytes, "in_effect": self.in_effect}


@dataclass(frozen=True)
class Restored(Record):
    """Did the old state come back after a rollback of a transaction?

    Either confirmed by identity only (``paths``: the paths that are not their old selves), or
    judged by the verify callback (``verdict``, its failed checks ``failures``: in the JSON
    objects ``{name, expected, found, message}``)."""

    ok: bool
    failures: tuple[Check, ...] = ()
    paths: tuple[str, ...] | None = None  # None: judged by the verify callback (or it raised)
    verdict: Verdict | None = None
    backups_kept: str | None = None  # the backup dir kept for a later recovery or by hand
    journal_errors: tuple[str, ...] = ()  # journal writes that failed (ENOSPC, EIO)

    def warnings(self) -> tuple[Check, ...]:
        """The checks the restored state failed that only warn (they failed before, too)."""
        return self.verdict.warnings if self.verdict is not None else ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok, "failures": [failure_json(c) for c in self.failures]}
        if self.paths is not None:
            out["paths"] = list(self.paths)
        if self.verdict is not None:
            out["verdict"] = vj = self.verdict.to_json()
            if vj.get("warnings"):
                out["warnings"] = list(vj["warnings"])
        if self.backups_kept:
            out["backups_kept"] = self.backups_kept
        if self.journal_errors:
            out["journal_errors"] = list(self.journal_errors)
        return out


@dataclass(frozen=True)
class Recovered(Record):
    """An unfinished transaction that recovery rolled back."""

    id: str
    verb: str
    interrupted_at: str
    restored: Restored
    actions: tuple[str, ...]  # what the revert did, one message per path

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "verb": self.verb, "interrupted_at": self.interrupted_at,
                "restored": self.restored.to_json(), "actions": list(self.actions)}


@dataclass(frozen=True)
class Unreadable(Record):
    """A state file (a journal, or one line of ``history.jsonl``) that cannot be read: where it is,
    why not, and what it still tells (``known``: the id from the file name, a verb, a state and
    paths found in its text) and where the backups of that transaction are."""

    kind: str  # journal | history | target (an outside-prefix state dir's target.json)
    path: str
    error: str
    txn: str | None = None
    line: int | None = None  # history: the 1-based line number
    known: Mapping[str, Any] | None = None
    backups: str | None = None  # the transaction's backup dir, when it exists

    def describe(self) -> str:
        where = f"{self.path}" + (f" line {self.line}" if self.line else "")
        knew = ", ".join(f"{k} {v if not isinstance(v, list) else ' '.join(map(str, v))}"
                         for k, v in (self.known or {}).items())
        return (f"unreadable {self.kind} {where}" + (f" (transaction {self.txn})" if self.txn else "")
                + f": {self.error}" + (f"; it names {knew}" if knew else "")
                + (f"; its backups (the original files) are in {self.backups}" if self.backups else ""))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "error": self.error, "txn": self.txn, "line": self.line,
                "known": dict(self.known or {}), "backups": self.backups}
