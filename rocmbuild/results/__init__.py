"""What each verb returns: one frozen result type per verb.

Decisions:
* A flow returns one of these; ``to_json()`` gives the verb's keys exactly as docs/json.md lists
  them (the CLI adds ``ok``/``verb``/``exit_code``), and :mod:`rocmbuild.cli.render` turns the
  same value into human text. Nothing here prints.
* Values made below (a swap ``Plan`` and its records, a ``Target``, an ``Artifact``, a ``Verdict``)
  are held as they are and serialized here with their own ``to_json()`` (a history line as a
  :class:`HistoryRow` holding its ``HistoryLine``).
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
    from rocmbuild.store.cache import CacheReport as CacheVerifyResult  # made in build/, held as it is
    from rocmbuild.results.cacheresult import CacheDirResult, CacheGcResult, CacheListResult, CacheRmResult, LogResult
    from rocmbuild.results.base import BACKUP_BYTES_NOTE, Json, Record, VerbResult
    from rocmbuild.results.buildresult import BuildPlan, BuildResult, CheckResult, RecipeEntry, RecipesResult, ShowResult, SourcePlan
    from rocmbuild.results.fleetresult import ConfigListResult, KeyResult, PushResult, RemoteArtifact, RemoteListResult, Setting
    from rocmbuild.results.demoresult import DemoCheck, DemoFailed, DemoResult, DemoStep
    from rocmbuild.results.shellresult import CompletionResult
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
]

#: each name of ``__all__`` -> the module that defines it (``module:attribute`` where the name differs)
_WHERE: dict[str, str] = {}
for _module, _names in (
    ("rocmbuild.results.base", "BACKUP_BYTES_NOTE Json Record VerbResult"),
    ("rocmbuild.results.buildresult", "BuildPlan BuildResult CheckResult RecipeEntry RecipesResult ShowResult SourcePlan"),
    ("rocmbuild.results.cacheresult", "CacheDirResult CacheGcResult CacheListResult CacheRmResult LogResult"),
    ("rocmbuild.results.demoresult", "DemoCheck DemoFailed DemoResult DemoStep"),
    ("rocmbuild.results.fleetresult", "ConfigListResult KeyResult PushResult RemoteArtifact RemoteListResult Setting"),
    ("rocmbuild.results.shellresult", "CompletionResult"),
    ("rocmbuild.results.stateresult", "DoctorResult HistoryResult HistoryRow InEffect LibraryStatus StatusChanges "
                                      "StatusResult Stock Unfinished VerifyResult short_txn txn_order"),
    ("rocmbuild.results.txnresult", "ApplyResult BundleSummary DryRunResult ExportResult LockResult RecoverResult "
                                    "RollbackResult TargetPlan"),
    ("rocmbuild.store.cache:CacheReport", "CacheVerifyResult"),
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
