"""Changing a target safely: observing paths, the pure plan, file actions, the journaled protocol,
backups and history.

The names below are the package's face to the flows (``from rocmbuild import swap``); its modules
are mapped in docs/architecture.md. The records it hands out (drift, pruned backups, a restore, a
recovery, unreadable state; a transaction's ``Outcome``) live in :mod:`rocmbuild.results` with every
other result, and are re-exported here as before.
"""

from rocmbuild.swap.backups import backup_bytes, find_backup, protected_backups, prune
from rocmbuild.swap.ineffect import STOCK, Effect, Redo, active, model
from rocmbuild.swap.history import drift, placed, stock_version
from rocmbuild.swap.restore import is_stock, point_before, redo_plan, resolve_txn, rollback_plan
from rocmbuild.swap.journal import (FAILPOINTS, FINISHED, Journal, foreign, journals, new_id, pending,
                                    unreadable)
from rocmbuild.swap.plan import Plan, TargetFacts, facts_from, make
from rocmbuild.swap.expectation import Expectation, Verify, expectation_after, expectation_before
from rocmbuild.results.txnresult import Outcome
from rocmbuild.results.verdict import failures_json, verdict_json
from rocmbuild.swap.protocol import execute
from rocmbuild.swap.recovery import needs_recovery, recover
from rocmbuild.results.swaprecords import Drift, Pruned, Recovered, Restored, Unreadable

__all__ = [
    "FAILPOINTS", "FINISHED", "Drift", "Expectation", "Journal", "Outcome", "Plan", "Pruned", "Recovered",
    "Restored", "TargetFacts", "Unreadable", "Verify", "active", "backup_bytes", "drift", "execute", "expectation_after",
    "expectation_before", "facts_from", "failures_json", "find_backup", "journals", "make",
    "needs_recovery", "new_id", "pending", "placed", "unreadable", "foreign", "protected_backups", "prune", "recover", "resolve_txn",
    "rollback_plan", "stock_version", "verdict_json", "STOCK", "Effect", "Redo", "model", "is_stock", "redo_plan", "point_before",
]
