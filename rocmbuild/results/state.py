"""Results of the verbs that read a target's state: status, verify, doctor, history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from rocmbuild.errors import RequirementError, RocmbuildError
from rocmbuild.results.base import BACKUP_BYTES_NOTE, Json, Record, VerbResult, records_json

if TYPE_CHECKING:
    from rocmbuild.swap.records import Drift, Unreadable
    from rocmbuild.target.probe import LoadedLibrary
    from rocmbuild.target.target import Target
    from rocmbuild.target.verify import Verdict

@dataclass(frozen=True)
class InEffect(Record):
    id: str
    verb: str
    recipe: str | None
    commit: str | None
    version_before: str | None
    version_after: str | None
    files: tuple[str, ...]


@dataclass(frozen=True)
class Unfinished(Record):
    id: str
    verb: str
    state: str


@dataclass(frozen=True)
class StatusChanges:
    state_dirs: tuple[str, ...] = ()
    in_effect: tuple[InEffect, ...] = ()
    unfinished: tuple[Unfinished, ...] = ()
    drift: tuple["Drift", ...] = ()
    backup_bytes: int = 0
    unreadable: tuple["Unreadable", ...] = ()  # journals and history lines that cannot be read

    def to_json(self) -> dict[str, Any]:
        return {"state_dirs": list(self.state_dirs), "in_effect": [t.to_json() for t in self.in_effect],
                "unfinished": [u.to_json() for u in self.unfinished], "drift": [d.to_json() for d in self.drift],
                "backup_bytes": self.backup_bytes, "unreadable": records_json(self.unreadable)}


@dataclass(frozen=True)
class LibraryStatus:
    library: "LoadedLibrary"
    inside_prefix: bool
    layout: str
    version: str | None
    links: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {**self.library.to_json(), "inside_prefix": self.inside_prefix, "layout": self.layout,
                "version": self.version, "links": list(self.links)}


def dotted(t: Sequence[int] | None) -> str | None:
    return ".".join(map(str, t)) if t else None


@dataclass(frozen=True)
class StatusResult(VerbResult):
    target: "Target"
    libraries: tuple[LibraryStatus, ...]
    changes: StatusChanges

    def torch_json(self) -> dict[str, Any]:
        r = self.target.report
        return {"version": r.torch_version, "hip": r.hip, "cuda": r.cuda, "backend": r.backend,
                "cudnn_available": r.cudnn_available, "cuda_available": r.cuda_available,
                "version_int": r.version_int, "version_error": r.version_error,
                "version_int_retry": r.version_int_retry, "runtime_version": dotted(r.runtime_version),
                "compile_version": dotted(r.compile_version), "python": r.python,
                "python_version": r.python_version}

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target.to_json(), "torch": self.torch_json(),
                "libraries": [lib.to_json() for lib in self.libraries], "probe_errors": self.target.report.errors,
                "changes": self.changes.to_json()}


@dataclass(frozen=True)
class VerifyResult(VerbResult):
    target: "Target"
    verdict: "Verdict"

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target.to_json(), **self.verdict.to_json()}


@dataclass(frozen=True)
class DoctorResult(VerbResult):
    checks: tuple[Any, ...]  # rocmbuild.build.requirements.DoctorCheck

    @property
    def failed(self) -> tuple[Any, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    @property
    def error(self) -> RocmbuildError | None:
        bad = self.failed
        if not bad:
            return None
        return RequirementError(f"{len(bad)} doctor check(s) failed: {', '.join(c.name for c in bad)}",
                                "; ".join(f"{c.name}: {c.fix}" for c in bad if c.fix) or "see the checks above")

    def to_json(self) -> dict[str, Any]:
        return {"checks": [c.to_json() for c in self.checks], "failed": [c.name for c in self.failed]}


# export, lock


@dataclass(frozen=True)
class HistoryResult(VerbResult):
    prefix: str
    transactions: tuple[Json, ...]  # history lines, with in_effect / backups_pruned / state_dir
    unfinished: tuple[Unfinished, ...]
    backup_bytes: int
    unreadable: tuple["Unreadable", ...] = ()  # journals and history lines that cannot be read
    origins: tuple[Json, ...] = ()  # {state_dir, relation ("copied" | "moved"), from}: state from another prefix

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "transactions": [dict(t) for t in self.transactions],
                "unfinished": [u.to_json() for u in self.unfinished], "backup_bytes": self.backup_bytes,
                "backup_bytes_note": BACKUP_BYTES_NOTE, "unreadable": records_json(self.unreadable),
                "origins": [dict(o) for o in self.origins]}


