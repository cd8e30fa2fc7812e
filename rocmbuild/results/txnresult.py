"""Results of the verbs that write: export, lock, apply (and its dry run), rollback, recover; and the
:class:`Outcome` of a committed transaction, which the swap protocol returns to them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocmbuild.errors import RocmbuildError
from rocmbuild.results.base import Record, VerbResult, plan_target, records_json, seconds_json
from rocmbuild.results.verdict import verdict_json
from rocmbuild.results.buildresult import BuildPlan

if TYPE_CHECKING:
    from rocmbuild.recipe.lockfile import Lock
    from rocmbuild.store.bundle import Export
    from rocmbuild.store.provenance import Origin
    from rocmbuild.recipe.arch import ArchMatch
    from rocmbuild.swap.plan import Plan
    from rocmbuild.results.swaprecords import Pruned, Recovered
    from rocmbuild.results.verdict import Check, Verdict

@dataclass(frozen=True)
class ExportResult(VerbResult):
    bundle: "Export"  # what store/bundle.py wrote

    @property
    def changed(self) -> bool:
        return self.bundle.changed  # False: the file held exactly these bytes already

    def to_json(self) -> dict[str, Any]:
        return self.bundle.to_json()


@dataclass(frozen=True)
class LockResult(VerbResult):
    lock_file: str
    lock: "Lock"  # the lock file's content (recipe/lockfile.py)
    rewritten: bool = True  # False: the file held exactly this lock already

    @property
    def changed(self) -> bool:
        return self.rewritten

    def to_json(self) -> dict[str, Any]:
        return {"lock_file": self.lock_file, "lock": self.lock.to_json()}


# apply (and its dry run), rollback, history, recover


@dataclass(frozen=True)
class ApplyResult(VerbResult):
    plan: "Plan"
    already_applied: bool
    txn: str | None
    verdict: "Verdict | None"
    artifact: str
    recovered: tuple["Recovered", ...] = ()
    pruned: tuple["Pruned", ...] = ()
    copy_bytes: int | None = None  # None (absent in the JSON) when already applied
    gpu_arch: "ArchMatch | None" = None  # the artifact's GPU targets against this machine's
    duration_s: float | None = None  # the whole apply, start to end
    log: str | None = None  # the build log this run wrote (None: nothing was built)
    substituted: Origin | None = None  # the artifact came from a binary cache

    @property
    def changed(self) -> bool:
        return not self.already_applied  # the target (a build or substitution into the cache is not counted)

    def to_json(self) -> dict[str, Any]:
        out = {"target": plan_target(self.plan), "plan": self.plan.to_json(), "already_applied": self.already_applied,
               "txn": self.txn, "verdict": verdict_json(self.verdict), "recovered": records_json(self.recovered),
               "artifact": self.artifact, "pruned": records_json(self.pruned), "log": self.log,
               "substituted": self.substituted.to_json() if self.substituted else None,
               "duration_s": seconds_json(self.duration_s)}
        if self.copy_bytes is not None:
            out["copy_bytes"] = self.copy_bytes
        out["gpu_arch"] = self.gpu_arch.to_json() if self.gpu_arch is not None else None
        return out


@dataclass(frozen=True)
class TargetPlan:
    plan: "Plan"
    compatibility: "Check | None" = None  # would the target's torch load the artifact (None: no version to judge)
    artifact_version: str | None = None  # the version the artifact records (or its recipe names)

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.to_json(), "text": self.plan.render(), "already_applied": self.plan.already_applied,
                "compatibility": self.compatibility.to_json() if self.compatibility else None,
                "artifact_version": self.artifact_version}


@dataclass(frozen=True)
class BundleSummary(Record):
    key: str
    recipe: str
    version: str | None
    gpu_targets: tuple[str, ...] | None = None  # what the manifest records (None: none named)


@dataclass(frozen=True)
class DryRunResult(VerbResult):
    """``apply --dry-run``: the plan, and what the real apply would refuse (``target_error``)."""

    build: BuildPlan | None = None
    artifact: BundleSummary | None = None
    target_plan: TargetPlan | None = None
    target_error: RocmbuildError | None = None
    target_note: str | None = None
    gpu_arch: "ArchMatch | None" = None
    duration_s: float | None = None  # the dry run, start to end

    @property
    def already_applied(self) -> bool:
        return bool(self.target_plan and self.target_plan.plan.already_applied)

    @property
    def error(self) -> RocmbuildError | None:
        return self.target_error  # the real apply fails with it: the dry run exits with its code

    @property
    def changed(self) -> bool:
        return False  # a dry run changes nothing; ``already_applied`` says whether the apply would

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dry_run": True}
        if self.build is not None:
            out["build"] = self.build.to_json()
        if self.artifact is not None:
            out["artifact"] = self.artifact.to_json()
        out["target_plan"] = self.target_plan.to_json() if self.target_plan else None
        if self.target_error is not None:
            out["target_error"] = self.target_error.to_json()
        if self.target_note is not None:
            out["target_note"] = self.target_note
        out["already_applied"] = self.already_applied
        out["gpu_arch"] = self.gpu_arch.to_json() if self.gpu_arch is not None else None
        out["duration_s"] = seconds_json(self.duration_s)
        return out


@dataclass(frozen=True)
class TargetRef(Record):
    """The target a verb looked at without making a plan (``rollback --if-applied`` with nothing to
    undo): its prefix and Python; what only a plan knows is null."""

    prefix: str
    python: str | None = None
    layout: str | None = None
    libdir: str | None = None
    state_dir: str | None = None


@dataclass(frozen=True)
class RollbackResult(VerbResult):
    plan: "Plan | None"  # None: ``--if-applied`` found nothing to undo (``nothing_to_roll_back``)
    txn: str | None
    undoes: tuple[str, ...]
    verdict: "Verdict | None"
    pruned: tuple["Pruned", ...]
    recovered: tuple["Recovered", ...]
    forced_drift: tuple[str, ...]
    target: TargetRef | None = None  # without a plan: the target looked at
    reapplies: tuple[str, ...] = ()  # redo: the applies in effect again
    restores_to: str | None = None  # the state after this txn id came back ("stock": before the first)
    in_effect: tuple[str, ...] = ()  # the applies in effect afterwards, oldest first

    @property
    def changed(self) -> bool:
        return self.plan is not None  # False: ``--if-applied`` found nothing to undo

    @property
    def warnings(self) -> tuple[Check, ...]:
        return self.verdict.warnings if self.verdict else ()

    @property
    def prefix(self) -> str | None:
        """The target's prefix: the plan's, or (nothing to roll back) ``target``'s."""
        if self.plan is not None:
            return self.plan.prefix
        return self.target.prefix if self.target is not None else None

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        return {"target": plan_target(p) if p else (self.target.to_json() if self.target else {}), "plan": p.to_json() if p else None,
                "txn": self.txn, "undoes": list(self.undoes), "verdict": verdict_json(self.verdict), "pruned": records_json(self.pruned),
                "recovered": records_json(self.recovered), "forced_drift": list(self.forced_drift), "nothing_to_roll_back": p is None,
                "redoes": p.redoes if p else None, "reapplies": list(self.reapplies), "restores_to": self.restores_to,
                "in_effect": list(self.in_effect)}


@dataclass(frozen=True)
class RecoverResult(VerbResult):
    prefix: str
    recovered: tuple["Recovered", ...]

    @property
    def changed(self) -> bool:
        return bool(self.recovered)

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "recovered": records_json(self.recovered)}


@dataclass(frozen=True)
class Outcome:
    """A committed transaction (what ``swap.execute`` returns)."""

    id: str
    verb: str
    state: str
    plan: Plan
    verdict: Verdict | None = None
    pruned: tuple[Pruned, ...] = ()
    messages: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "verb": self.verb, "state": self.state, "verdict": verdict_json(self.verdict),
                "pruned": [p.to_json() for p in self.pruned], "messages": list(self.messages),
                "files": [a.path for a in self.plan.pending]}
