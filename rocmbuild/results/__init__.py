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
  re-exported here, so callers import ``rocmbuild.results``.
"""

from rocmbuild.results.cacheresult import (CacheDirResult, CacheGcResult, CacheListResult, CacheRmResult, CacheVerifyResult,
                                           LogResult)
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
