"""The drift gate: is what the target loads what rocmbuild's history says is in place?

``verify`` adds the :func:`drift_check` to its checks (a failed one: exit 4, like any failed
check); ``status`` reports the same check and, with ``--check``, fails with it (exit 4,
``StatusResult.error``).

Decisions:
* DRIFT is either kind ``status`` reports: the version torch loads is not the version the history
  says is in place (``version_drift``), or a path rocmbuild placed is no longer what it left there.
* While a transaction runs (its pid holds the target's lock) nothing is judged: the files are in
  flux and their own transaction verifies them; the check is skipped (ok), saying so.
* An interrupted transaction (its journal unfinished, nobody running it) fails the gate: the
  target is half changed until ``recover`` (or the next changing verb) rolls it back.
* A target rocmbuild never changed has nothing to drift from: no check at all (nothing is added
  to ``verify``'s checks, ``status --check`` passes).
* The fix is said once, in the check's message (the error's hint): ``apply`` the recipe again (it
  comes from the cache, no rebuild), or ``rollback --force`` to undo that apply.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from rocmbuild.results.stateresult import StatusChanges, placed_version, short_txn, version_drift
from rocmbuild.results.verdict import Check

if TYPE_CHECKING:
    from rocmbuild.results.swaprecords import Drift

NAME = "drift"


def _rel(path: str, prefix: str) -> str:
    return path[len(prefix) + 1:] if path.startswith(prefix.rstrip("/") + "/") else path


def _expected(changes: StatusChanges) -> str:
    top = changes.latest_apply()
    if top is not None:
        return (f"{top.recipe or 'the artifact'} {top.version_after or '(version unknown)'} (txn {short_txn(top.id)}), "
                "as rocmbuild's history says is in place")
    stock = changes.stock
    return f"stock {(stock.version if stock else None) or '(version unknown)'}, every apply undone, as rocmbuild left it"


def _path_found(d: "Drift", prefix: str) -> str:
    kind = d.found_kind or d.found.split(" ", 1)[0]
    how = {"absent": "missing", "link": "another link", "other": "a directory or special file"}.get(
        kind, "overwritten in place" if d.written_in_place else "another file")
    return f"{_rel(d.path, prefix)} {how}" + (f" ({d.found_version})" if d.found_version else "")


def fix(changes: StatusChanges, prefix: str) -> str:
    """What to do about drift, in one sentence."""
    top = changes.latest_apply()
    where = f"--env {shlex.quote(prefix)}"
    if top is not None:
        return (f"something other than rocmbuild changed the target since (a pip or conda install?): "
                f"`rocmbuild apply {top.recipe or 'RECIPE'} {where}` again puts rocmbuild's build back (from the cache, "
                f"no rebuild), or `rocmbuild rollback --force {where}` undoes that apply")
    return (f"something other than rocmbuild changed the target after rocmbuild undid its applies: `rocmbuild "
            f"history {where}` lists what rocmbuild did; `rocmbuild apply RECIPE {where}` places a build again")


def drift_check(changes: StatusChanges, version_now: str | None, prefix: str) -> Check | None:
    """The ``drift`` check of a target (None: rocmbuild never changed it)."""
    if changes.stock is None and not changes.in_effect and not changes.drift and not changes.unfinished:
        return None
    expected = _expected(changes)
    running = [u for u in changes.unfinished if u.running_pid]
    if running:
        u = running[0]
        return Check(NAME, True, expected, f"not judged: {u.verb} txn {short_txn(u.id)} is in progress "
                     f"(pid {u.running_pid}); it verifies its own files", skipped=True)
    if changes.unfinished:
        ids = ", ".join(f"txn {short_txn(u.id)}" for u in changes.unfinished)
        return Check(NAME, False, expected, f"UNFINISHED {ids}: the target is half changed",
                     f"`rocmbuild recover --env {shlex.quote(prefix)}` rolls the unfinished transaction back")
    found = []
    vd = version_drift(changes, version_now)
    if vd:
        found.append(f"torch loads {vd['loaded']}, not the {vd['placed']} rocmbuild's history says is in place")
    if changes.drift:
        found.append(f"{len(changes.drift)} path(s) changed since rocmbuild placed them: "
                     + ", ".join(_path_found(d, prefix) for d in changes.drift))
    if not found:
        placed = placed_version(changes)
        return Check(NAME, True, expected, "no drift: every path rocmbuild placed is as it left it"
                     + (f", torch loads {version_now}" if version_now and placed else ""))
    return Check(NAME, False, expected, "DRIFT: " + "; ".join(found), fix(changes, prefix))

