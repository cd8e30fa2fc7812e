"""What each verb returns: one frozen result type per verb.

Decisions:
* A flow returns one of these; ``to_json()`` gives the verb's keys exactly as docs/json.md lists
  them (the CLI adds ``ok``/``verb``/``exit_code``), and :mod:`rocmbuild.cli.render` turns the
  same value into human text. Nothing here prints.
* Values made below (a swap ``Plan`` and its records, a ``Target``, an ``Artifact``, a ``Verdict``)
  are held as they are and serialized here with their own ``to_json()``; only history lines (the
  open-ended ``history.jsonl`` records) are carried as read-only mappings.
* ``error`` is ``None`` except for the verbs whose failure keeps their data beside the error
  (``doctor``, a dry run's refusal, ``cache verify``); the CLI exits with that error's code.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from rocmbuild.build.cache import CacheReport as CacheVerifyResult  # noqa: F401 - made in build/, held as it is
from rocmbuild.errors import RequirementError, RocmbuildError

if TYPE_CHECKING:
    from rocmbuild.build.artifact import Artifact
    from rocmbuild.build.bundle import Export
    from rocmbuild.build.requirements import DoctorCheck
    from rocmbuild.swap.plan import Plan
    from rocmbuild.swap.records import Drift, Pruned, Recovered, Unreadable
    from rocmbuild.target.probe import LoadedLibrary
    from rocmbuild.target.target import Target
    from rocmbuild.target.verify import Verdict

Json = Mapping[str, Any]  # a JSON object made by a lower layer, carried through as it is
BACKUP_BYTES_NOTE = "bytes only the backups keep alive (backup files with no other link)"


def _records(items) -> list[dict[str, Any]]:
    return [x.to_json() for x in items]


def _verdict(v: "Verdict | None") -> dict[str, Any] | None:
    return v.to_json() if v is not None else None


class VerbResult:
    """The part every result shares: an error that still carries the data (usually none)."""

    @property
    def error(self) -> RocmbuildError | None:
        return None


class _Record:
    """A result whose JSON object is its fields, as they are."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


def _plan_target(plan: "Plan") -> dict[str, Any]:
    return {"prefix": plan.prefix, "python": plan.python, "layout": plan.layout, "libdir": plan.libdir,
            "state_dir": plan.state_dir}


# recipes, show


@dataclass(frozen=True)
class RecipeEntry(_Record):
    name: str
    path: str
    description: str
    error: str | None


@dataclass(frozen=True)
class RecipesResult(VerbResult):
    recipes: tuple[RecipeEntry, ...]
    search_path: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"recipes": [r.to_json() for r in self.recipes], "search_path": list(self.search_path)}


@dataclass(frozen=True)
class ShowResult(VerbResult):
    name: str
    path: str
    description: str
    recipe: Json  # the recipe's canonical form
    patch_files: tuple[str, ...]
    toml: str  # the recipe file as written (text output only)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "description": self.description, "recipe": self.recipe,
                "patch_files": list(self.patch_files)}


# plan, build


@dataclass(frozen=True)
class SourcePlan:
    url: str
    ref: str | None
    commit: str | None
    resolved: bool
    subdir: str | None
    sparse: tuple[str, ...]
    cherry_pick: tuple[str, ...]
    patches: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "ref": self.ref, "commit": self.commit, "resolved": self.resolved,
                "subdir": self.subdir, "sparse": list(self.sparse), "cherry_pick": list(self.cherry_pick),
                "patches": list(self.patches)}


@dataclass(frozen=True)
class BuildPlan(VerbResult):
    recipe: str
    path: str
    source: SourcePlan
    gpu_targets: str | None
    commands: Mapping[str, Sequence[str]]  # configure/build/install -> argv
    env: Mapping[str, str]
    destdir: str
    cache_key: str | None
    cached: bool
    inputs: Json  # the cache key's inputs, as build/ computes them
    requirements: tuple["DoctorCheck", ...]  # the [requires] and the launcher
    notes: tuple[str, ...]

    @property
    def missing(self) -> tuple["DoctorCheck", ...]:
        return tuple(c for c in self.requirements if c.status == "fail")

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe, "path": self.path, "source": self.source.to_json(),
            "gpu_targets": self.gpu_targets, "commands": {k: list(v) for k, v in self.commands.items()},
            "env": dict(self.env), "install_env": {"DESTDIR": self.destdir},
            "cache": {"key": self.cache_key, "cached": self.cached, "inputs": self.inputs},
            "requirements": [c.to_json() for c in self.requirements],
            "missing": [c.to_json() for c in self.missing], "notes": list(self.notes),
        }


@dataclass(frozen=True)
class BuildResult(VerbResult):
    artifact: "Artifact"

    def to_json(self) -> dict[str, Any]:
        art, m = self.artifact, self.artifact.manifest
        return {
            "cached": art.cached, "artifact": str(art.path), "key": m.key, "recipe": m.recipe,
            "commit": m.commit, "version": m.version,
            "libraries": [{"name": lib.name, "file": lib.file, "soname": lib.soname, "chain": list(lib.chain)}
                          for lib in m.libraries],
        }


# status, verify, doctor


@dataclass(frozen=True)
class InEffect(_Record):
    id: str
    verb: str
    recipe: str | None
    commit: str | None
    version_before: str | None
    version_after: str | None
    files: tuple[str, ...]


@dataclass(frozen=True)
class Unfinished(_Record):
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
                "backup_bytes": self.backup_bytes, "unreadable": _records(self.unreadable)}


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


def _dotted(t: Sequence[int] | None) -> str | None:
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
                "version_int_retry": r.version_int_retry, "runtime_version": _dotted(r.runtime_version),
                "compile_version": _dotted(r.compile_version), "python": r.python,
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
class ExportResult(VerbResult):
    bundle: "Export"  # what build/bundle.py wrote

    def to_json(self) -> dict[str, Any]:
        return self.bundle.to_json()


@dataclass(frozen=True)
class LockResult(VerbResult):
    lock_file: str
    lock: Json  # the lock file's content, as recipe/lockfile.py writes it

    def to_json(self) -> dict[str, Any]:
        return {"lock_file": self.lock_file, "lock": dict(self.lock)}


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

    def to_json(self) -> dict[str, Any]:
        out = {"target": _plan_target(self.plan), "plan": self.plan.to_json(), "already_applied": self.already_applied,
               "txn": self.txn, "verdict": _verdict(self.verdict), "recovered": _records(self.recovered),
               "artifact": self.artifact, "pruned": _records(self.pruned)}
        if self.copy_bytes is not None:
            out["copy_bytes"] = self.copy_bytes
        return out


@dataclass(frozen=True)
class TargetPlan:
    plan: "Plan"

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.to_json(), "text": self.plan.render(), "already_applied": self.plan.already_applied}


@dataclass(frozen=True)
class BundleSummary(_Record):
    key: str
    recipe: str
    version: str | None


@dataclass(frozen=True)
class DryRunResult(VerbResult):
    """``apply --dry-run``: the plan, and what the real apply would refuse (``target_error``)."""

    build: BuildPlan | None = None
    artifact: BundleSummary | None = None
    target_plan: TargetPlan | None = None
    target_error: RocmbuildError | None = None
    target_note: str | None = None

    @property
    def already_applied(self) -> bool:
        return bool(self.target_plan and self.target_plan.plan.already_applied)

    @property
    def error(self) -> RocmbuildError | None:
        return self.target_error  # the real apply fails with it: the dry run exits with its code

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
        return out


@dataclass(frozen=True)
class RollbackResult(VerbResult):
    plan: "Plan | None"  # None: ``--if-applied`` found nothing to undo (``nothing_to_roll_back``)
    txn: str | None
    undoes: tuple[str, ...]
    verdict: "Verdict | None"
    pruned: tuple["Pruned", ...]
    recovered: tuple["Recovered", ...]
    forced_drift: tuple[str, ...]
    target: Json | None = None  # without a plan: {prefix, python, layout, libdir, state_dir}, the unknown ones null

    @property
    def warnings(self) -> tuple[Json, ...]:
        return tuple(c.to_json() for c in self.verdict.warnings) if self.verdict else ()

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        return {"target": _plan_target(p) if p else dict(self.target or {}), "plan": p.to_json() if p else None,
                "txn": self.txn, "undoes": list(self.undoes), "verdict": _verdict(self.verdict), "pruned": _records(self.pruned),
                "recovered": _records(self.recovered), "forced_drift": list(self.forced_drift), "nothing_to_roll_back": p is None}


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
                "backup_bytes_note": BACKUP_BYTES_NOTE, "unreadable": _records(self.unreadable),
                "origins": [dict(o) for o in self.origins]}


@dataclass(frozen=True)
class RecoverResult(VerbResult):
    prefix: str
    recovered: tuple["Recovered", ...]

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "recovered": _records(self.recovered)}
