"""The verbs: one module per verb, ``cmd_<verb>.py``, each an ``add`` (its arguments) and a ``run``
(parsed arguments -> a result from rocmbuild.results), listed once in :data:`VERBS` (the order of
``--help``).

A ``run`` only turns arguments into a flow call; the work is in rocmbuild.flows (or doctor), the
text in render.py, exit codes and the JSON envelope in app.py. A verb module imports nothing heavy
at module level (``--version``, ``--help`` and Tab stay cheap); ``run`` imports what its verb needs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Callable

from rocmbuild.cli.commands import (
    cmd_recipes,
    cmd_show,
    cmd_plan,
    cmd_build,
    cmd_status,
    cmd_verify,
    cmd_doctor,
    cmd_cache,
    cmd_log,
    cmd_export,
    cmd_lock,
    cmd_apply,
    cmd_rollback,
    cmd_redo,
    cmd_history,
    cmd_recover,
    cmd_demo,
    cmd_push,
    cmd_key,
    cmd_config,
)

if TYPE_CHECKING:
    from rocmbuild.results import VerbResult

VERBS: list[tuple[Callable[[Any], None], Callable[[argparse.Namespace], VerbResult]]] = [
    (cmd_recipes.add, cmd_recipes.run),
    (cmd_show.add, cmd_show.run),
    (cmd_plan.add, cmd_plan.run),
    (cmd_build.add, cmd_build.run),
    (cmd_status.add, cmd_status.run),
    (cmd_verify.add, cmd_verify.run),
    (cmd_doctor.add, cmd_doctor.run),
    (cmd_cache.add, cmd_cache.run),
    (cmd_log.add, cmd_log.run),
    (cmd_export.add, cmd_export.run),
    (cmd_lock.add, cmd_lock.run),
    (cmd_apply.add, cmd_apply.run),
    (cmd_rollback.add, cmd_rollback.run),
    (cmd_redo.add, cmd_redo.run),
    (cmd_history.add, cmd_history.run),
    (cmd_recover.add, cmd_recover.run),
    (cmd_demo.add, cmd_demo.run),
    (cmd_push.add, cmd_push.run),
    (cmd_key.add, cmd_key.run),
    (cmd_config.add, cmd_config.run),
]
