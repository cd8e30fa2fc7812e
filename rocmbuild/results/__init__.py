"""What each verb returns: one frozen result type per verb.

Decisions:
* A flow returns one of these; ``to_json()`` gives the verb's keys exactly as docs/json.md lists
  them (the CLI adds ``ok``/``verb``/``exit_code``), and :mod:`rocmbuild.cli.render` turns the
  same value into human text. Nothing here prints.
* Every record a verb returns or a renderer reads is here, the ones the layers above make too:
  swap's (:mod:`~rocmbuild.results.swaprecords`: drift, pruned backups, a restore, a recovery; and
  the :class:`Outcome` of a transaction) and the verification's :class:`Verdict` and its checks
  (:mod:`~rocmbuild.results.verdict`). So the package sits below swap and environment
  (docs/architecture.md): it imports them only under ``TYPE_CHECKING``, to name in annotations the
  values it holds as they are (a swap ``Plan``, a ``Target``, a ``ProbeReport``, a history
  ``HistoryLine`` in a :class:`HistoryRow`); what judges or makes a record stays with its logic
  (``environment.verify.judge``, ``swap.expectation``).
* Values made by the build packages below (an ``Artifact``, a housekeeping ``ArtifactInfo``) are
  held as they are and serialized with their own ``to_json()``.
* ``error`` is ``None`` except for the verbs whose failure keeps their data beside the error
  (``doctor``, a dry run's refusal, ``cache verify``); the CLI exits with that error's code.
* One module per group of verbs (build, state, txn) beside what they share (base); every name is
  re-exported here, so callers import ``rocmbuild.results``. The re-export is lazy (PEP 562
  ``__getattr__``): a name's module is imported when the name is first asked for, so a verb pays
  only for its own results (``apply`` imports txn and build, not state, fleet, cache, demo or
  shell: about 30 ms of every apply's start-up here; a test holds it,
  tests/unit/test_startup_imports.py). Type checkers read the same names from the
  ``TYPE_CHECKING`` block.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocmbuild.results.cacheresult import (CacheDirResult, CacheGcResult, CacheListResult, CacheRmResult,
                                               CacheVerifyResult, LogResult)
    from rocmbuild.results.base import BACKUP_BYTES_NOTE, Json, Record, VerbResult
    from rocmbuild.results.buildresult import BuildPlan, BuildResult, CheckResult, RecipeEntry, RecipesResult, ShowResult, SourcePlan
    from rocmbuild.results.fleetresult import ConfigListResult, KeyResult, PushResult, RemoteArtifact, RemoteListResult, Setting
    from rocmbuild.results.demoresult import DemoCheck, DemoFailed, DemoResult, DemoStep
    from rocmbuild.results.shellresult import CompletionResult
    from rocmbuild.results.swaprecords import Drift, Pruned, Recovered, Restored, Unreadable
    from rocmbuild.results.verdict import Check, Verdict, failures_json, verdict_json
    from rocmbuild.results.stateresult import (
        DoctorResult,
        HistoryResult,
        HistoryRow,
        InEffect,
        LibraryStatus,
        StatusChanges,
        StatusResult,
        Stock,
        Unfinished,
        VerifyResult,
        short_txn,
        txn_order,
    )
    from rocmbuild.results.txnresult import (
        ApplyResult,
        BundleSummary,
        DryRunResult,
        ExportResult,
        LockResult,
        Outcome,
        RecoverResult,
        RollbackResult,
        TargetPlan,
    )

__all__ = [
    "CacheDirResult", "CacheGcResult", "CacheListResult", "CacheRmResult", "LogResult",
    "ConfigListResult", "KeyResult", "PushResult", "RemoteArtifact", "RemoteListResult", "Setting",
    "BACKUP_BYTES_NOTE", "ApplyResult", "BuildPlan", "BuildResult", "CheckResult", "BundleSummary", "CacheVerifyResult",
    "CompletionResult", "DemoCheck", "DemoFailed", "DemoResult", "DemoStep",
    "DoctorResult", "DryRunResult", "ExportResult", "HistoryResult", "HistoryRow", "InEffect", "Json", "LibraryStatus",
    "LockResult", "RecipeEntry", "RecipesResult", "Record", "RecoverResult", "RollbackResult", "ShowResult",
    "SourcePlan", "StatusChanges", "StatusResult", "TargetPlan", "Unfinished", "VerbResult", "VerifyResult",
    "Stock", "short_txn", "txn_order",
    "Check", "Drift", "Outcome", "Pruned", "Recovered", "Restored", "Unreadable", "Verdict", "failures_json",
    "verdict_json",
]

#: each name of ``__all__`` -> the module that defines it (``module:attribute`` where the name differs)
_WHERE: dict[str, str] = {}
for _module, _names in (
    ("rocmbuild.results.base", "BACKUP_BYTES_NOTE Json Record VerbResult"),
    ("rocmbuild.results.buildresult", "BuildPlan BuildResult CheckResult RecipeEntry RecipesResult ShowResult SourcePlan"),
    ("rocmbuild.results.cacheresult", "CacheDirResult CacheGcResult CacheListResult CacheRmResult CacheVerifyResult "
                                      "LogResult"),
    ("rocmbuild.results.demoresult", "DemoCheck DemoFailed DemoResult DemoStep"),
    ("rocmbuild.results.fleetresult", "ConfigListResult KeyResult PushResult RemoteArtifact RemoteListResult Setting"),
    ("rocmbuild.results.shellresult", "CompletionResult"),
    ("rocmbuild.results.swaprecords", "Drift Pruned Recovered Restored Unreadable"),
    ("rocmbuild.results.verdict", "Check Verdict failures_json verdict_json"),
    ("rocmbuild.results.stateresult", "DoctorResult HistoryResult HistoryRow InEffect LibraryStatus StatusChanges "
                                      "StatusResult Stock Unfinished VerifyResult short_txn txn_order"),
    ("rocmbuild.results.txnresult", "ApplyResult BundleSummary DryRunResult ExportResult LockResult Outcome "
                                    "RecoverResult RollbackResult TargetPlan"),
):
    _WHERE.update(dict.fromkeys(_names.split(), _module))
del _module, _names


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attr = where.partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
