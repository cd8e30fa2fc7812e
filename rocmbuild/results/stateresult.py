"""Results of the verbs that read a target's state: status, verify, doctor, history."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from rocmbuild.errors import RequirementError, RocmbuildError, VerifyError
from rocmbuild.results.base import BACKUP_BYTES_NOTE, Json, Record, VerbResult, records_json

if TYPE_CHECKING:
    from rocmbuild.sources.debarchive import Package
    from rocmbuild.store.manifest import FoundFix
    from rocmbuild.store.provenance import Origin
    from rocmbuild.results.swaprecords import Drift, Unreadable
    from rocmbuild.swap.statedir import HistoryLine
    from rocmbuild.swap.strays import Stray
    from rocmbuild.environment.probe import LoadedLibrary
    from rocmbuild.environment.target import Target
    from rocmbuild.results.verdict import Verdict

@dataclass(frozen=True)
class InEffect(Record):
    id: str
    verb: str
    recipe: str | None
    commit: str | None
    version_before: str | None
    version_after: str | None
    files: tuple[str, ...]
    artifact: str | None = None  # the artifact it applied (its path in the cache)
    substituted: Origin | None = None  # that artifact came from a binary cache
    fixes: tuple[str, ...] = ()  # the [source] contains names of the artifact placed (its manifest)
    fixes_found: tuple["FoundFix", ...] = ()  # the same, each with where it was found (source or artifact)
    redone_by: str | None = None  # undone once, then back in effect by this redo
    package: "Package | None" = None  # the artifact's tree came from this Debian package
    build: dict = field(default_factory=dict)  # what the artifact was built with (store/differs.py)
    differs: dict = field(default_factory=dict)  # ... where it differs from the other builds of its recipe cached

    def to_json(self) -> dict[str, Any]:
        d = super().to_json()
        d["package"] = self.package.to_json() if self.package else None
        return d


@dataclass(frozen=True)
class Unfinished(Record):
    """A journal not finished: interrupted, or (``running_pid``) held by a live rocmbuild now."""

    id: str
    verb: str
    state: str
    running_pid: int | None = None


@dataclass(frozen=True)
class Stock(Record):
    """What the target had before rocmbuild first changed it, as that transaction recorded it."""

    txn: str  # the first transaction recorded
    version: str | None  # None: it recorded no version


@dataclass(frozen=True)
class StatusChanges:
    state_dirs: tuple[str, ...] = ()
    in_effect: tuple[InEffect, ...] = ()
    unfinished: tuple[Unfinished, ...] = ()
    drift: tuple["Drift", ...] = ()
    backup_bytes: int = 0
    unreadable: tuple["Unreadable", ...] = ()  # journals and history lines that cannot be read
    stock: Stock | None = None  # None: no transaction recorded here (the target is as it came)
    redo: Any = None  # swap.effect.Redo: what `rocmbuild redo` would re-apply (None: nothing)

    def to_json(self) -> dict[str, Any]:
        return {"state_dirs": list(self.state_dirs), "in_effect": [t.to_json() for t in self.in_effect],
                "unfinished": [u.to_json() for u in self.unfinished], "drift": [d.to_json() for d in self.drift],
                "backup_bytes": self.backup_bytes, "unreadable": records_json(self.unreadable),
                "stock": self.stock.to_json() if self.stock else None,
                "redo": self.redo.to_json() if self.redo else None}

    def latest_apply(self) -> InEffect | None:
        applies = [t for t in self.in_effect if t.verb == "apply"]
        return max(applies, key=lambda t: txn_order(t.id)) if applies else None


def txn_order(txn: str) -> tuple[str, str]:
    """Ids are ``NNNN-<UTC time>``, numbered per state dir: the time orders them across dirs."""
    return (txn.split("-", 1)[-1], txn)


def short_txn(txn: str) -> str:
    """The id's number (``0003``): what a person reads; ``rollback --to`` takes it as a prefix."""
    return txn.split("-", 1)[0]


def _numbers(v: str | None) -> tuple[int, ...]:
    """The first three numbers of a version (``3.5.1-dev`` -> (3, 5, 1)): what torch can report."""
    out = []
    for part in (v or "").replace("-", ".").split(".")[:3]:
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def placed_version(changes: StatusChanges) -> str | None:
    """The version rocmbuild's history says is in place: the newest apply in effect's, else stock's."""
    top = changes.latest_apply()
    return top.version_after if top is not None else (changes.stock.version if changes.stock else None)


def version_drift(changes: StatusChanges, version_now: str | None) -> dict[str, str] | None:
    """``{placed, loaded}`` when what the target's torch loads is not the version the history says
    is in place (a library written over, a forced rollback over drift), else None. Not while a
    transaction is unfinished or running: the files are in flux, and that is said instead."""
    placed = placed_version(changes)
    if (changes.unfinished or changes.stock is None or not placed or not version_now or not _numbers(placed)
            or not _numbers(version_now)):
        return None
    return None if _numbers(placed) == _numbers(version_now) else {"placed": placed, "loaded": version_now}


def summary(changes: StatusChanges, version_now: str | None) -> str:
    """One line: what is in effect, over what stock version (``status``'s ``summary``).

    Decisions: "stock" is the version the first recorded transaction found ("stock unknown" when it
    recorded none); with no transaction at all it is the version loaded now. The version in effect
    is the one the transaction placed and verified; drift, unfinished and unreadable state are
    appended, since each means the line may not be the whole truth."""
    stock = changes.stock
    stock_v = (stock.version or "unknown") if stock else None
    top = changes.latest_apply()
    if stock is None and changes.unreadable:  # the records that would say it cannot be read
        line = f"{version_now or 'unknown version'} loaded now; what rocmbuild changed here is unknown"
    elif stock is None:
        line = f"stock {version_now or 'unknown'}: rocmbuild has changed nothing in this target"
    elif top is not None:
        line = f"{top.recipe or '?'} {top.version_after or '?'} (txn {short_txn(top.id)}) over stock {stock_v}"
    else:
        line = f"stock {stock_v}: every apply rocmbuild made here is undone"
    vdrift = version_drift(changes, version_now)
    if vdrift:
        line += f"; DRIFT: torch loads {vdrift['loaded']}, not the {vdrift['placed']} rocmbuild's history says is in place"
    if changes.drift:
        line += f"; DRIFT: {len(changes.drift)} path(s) changed since rocmbuild placed them"
    running = [u for u in changes.unfinished if u.running_pid]
    stopped = [u for u in changes.unfinished if not u.running_pid]
    if running:
        line += "; in progress: " + ", ".join(f"{u.verb} txn {short_txn(u.id)} (pid {u.running_pid})" for u in running)
    if stopped:
        line += "; UNFINISHED: " + ", ".join(f"txn {short_txn(u.id)}" for u in stopped)
    if changes.unreadable:
        line += f"; {len(changes.unreadable)} state file(s) cannot be read"
    return line


@dataclass(frozen=True)
class LibraryStatus:
    library: "LoadedLibrary"
    inside_prefix: bool
    layout: str
    version: str | None
    links: tuple[str, ...]
    strays: tuple["Stray", ...] = ()  # names matching TheRock's preload glob that are not this file
    preload: bool = False  # a TheRock libraries package's lib dir: the first sorted name is loaded

    def to_json(self) -> dict[str, Any]:
        return {**self.library.to_json(), "inside_prefix": self.inside_prefix, "layout": self.layout,
                "version": self.version, "links": list(self.links),
                "strays": [s.to_json(self.preload) for s in self.strays]}


def dotted(t: Sequence[int] | None) -> str | None:
    return ".".join(map(str, t)) if t else None


@dataclass(frozen=True)
class StatusResult(VerbResult):
    target: "Target"
    libraries: tuple[LibraryStatus, ...]
    changes: StatusChanges
    databases: Any = None  # swap.dbreport.DbReport: the MIOpen databases the library reads (None: no MIOpen)
    drift_check: Any = None  # target.verdict.Check (results/driftresult.py); None: rocmbuild never changed this target
    gate: bool = False  # --check: a failed drift check is this result's error (exit 4)

    def torch_json(self) -> dict[str, Any]:
        r = self.target.report
        return {"version": r.torch_version, "hip": r.hip, "cuda": r.cuda, "backend": r.backend,
                "cudnn_available": r.cudnn_available, "cuda_available": r.cuda_available,
                "version_int": r.version_int, "version_error": r.version_error,
                "version_int_retry": r.version_int_retry, "runtime_version": dotted(r.runtime_version),
                "compile_version": dotted(r.compile_version), "python": r.python,
                "python_version": r.python_version}

    @property
    def summary(self) -> str:
        return summary(self.changes, dotted(self.target.report.runtime_version))

    @property
    def error(self) -> RocmbuildError | None:
        """With ``--check``: DRIFT (or an unfinished transaction) is exit 4; without it, reported only."""
        c = self.drift_check
        if not self.gate or c is None or c.ok:
            return None
        return VerifyError(f"{c.found} in {self.target.prefix}", c.message,
                           details={"checks": [c.to_json()], "failures": [c.name]})

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target.to_json(), "torch": self.torch_json(),
                "libraries": [lib.to_json() for lib in self.libraries], "probe_errors": self.target.report.errors,
                "changes": self.changes.to_json(), "summary": self.summary,
                "databases": self.databases.to_json() if self.databases is not None else None,
                "version_drift": version_drift(self.changes, dotted(self.target.report.runtime_version)),
                "drift_check": self.drift_check.to_json() if self.drift_check is not None else None}


@dataclass(frozen=True)
class VerifyResult(VerbResult):
    target: "Target"
    verdict: "Verdict"
    databases: Any = None  # swap.dbreport.DbReport (None: no MIOpen loaded)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target.to_json(), **self.verdict.to_json(),
                "databases": self.databases.to_json() if self.databases is not None else None}


@dataclass(frozen=True)
class DoctorResult(VerbResult):
    checks: tuple[Any, ...]  # rocmbuild.builder.requirements.DoctorCheck

    @property
    def failed(self) -> tuple[Any, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    @property
    def error(self) -> RocmbuildError | None:
        bad = self.failed
        if not bad:
            return None
        # the fixes are in the table (text) and in each check's `fix` (JSON): the hint does not repeat them
        return RequirementError(f"{len(bad)} doctor check(s) failed: {', '.join(c.name for c in bad)}",
                                "the `fix:` line under each failed check says what to do; run `rocmbuild doctor` "
                                "again afterwards")

    @property
    def install(self) -> str | None:
        """The failed checks' install commands as one line (builder/hints.py)."""
        from rocmbuild.builder.hints import install_line

        return install_line(self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"checks": [c.to_json() for c in self.checks], "failed": [c.name for c in self.failed],
                "install": self.install}


# export, lock


@dataclass(frozen=True)
class HistoryRow:
    """One transaction of ``history``: its history line and what the state dir says of it now
    (docs/json.md, ``history``: the line's keys, then these)."""

    line: "HistoryLine"
    kind: str | None = None  # apply | rollback | redo (a redo is a rollback's journal)
    in_effect: bool = False
    undone_by: str | None = None
    redone_by: str | None = None
    redo_next: bool = False  # `redo` would undo it
    restores_to: str | None = None
    redoes: str | None = None
    backups_pruned: bool = False
    state_dir: str = ""
    origin: str | None = None  # here | moved | copied (None: unknown)
    build: Json = field(default_factory=dict)  # what its build was (store/differs.py)

    def to_json(self) -> dict[str, Any]:
        return {**self.line.to_json(), "kind": self.kind, "in_effect": self.in_effect, "undone_by": self.undone_by,
                "redone_by": self.redone_by, "redo_next": self.redo_next, "restores_to": self.restores_to,
                "redoes": self.redoes, "backups_pruned": self.backups_pruned, "state_dir": self.state_dir,
                "origin": self.origin, "build": dict(self.build)}


@dataclass(frozen=True)
class StateOrigin:
    """State from another prefix: this target's state dir ``state_dir`` was ``relation`` (copied |
    moved) from the prefix ``source`` (``from`` in the JSON)."""

    state_dir: str
    relation: str
    source: str

    def to_json(self) -> dict[str, str]:
        return {"state_dir": self.state_dir, "relation": self.relation, "from": self.source}


@dataclass(frozen=True)
class HistoryResult(VerbResult):
    prefix: str
    transactions: tuple[HistoryRow, ...]
    unfinished: tuple[Unfinished, ...]
    backup_bytes: int
    unreadable: tuple["Unreadable", ...] = ()  # journals and history lines that cannot be read
    origins: tuple[StateOrigin, ...] = ()  # state from another prefix
    limit: int | None = None  # --limit N: only the newest N transactions are listed (None: all)
    total: int | None = None  # how many there are in all (None: as many as listed)

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "transactions": [t.to_json() for t in self.transactions],
                "unfinished": [u.to_json() for u in self.unfinished], "backup_bytes": self.backup_bytes,
                "backup_bytes_note": BACKUP_BYTES_NOTE, "unreadable": records_json(self.unreadable),
                "origins": [o.to_json() for o in self.origins], "limit": self.limit,
                "total": len(self.transactions) if self.total is None else self.total}


