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
  re-exported here, so callers import ``rocmbuild.results``.
"""

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
