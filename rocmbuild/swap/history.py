"""What rocmbuild did to a target and how to undo it: drift, ``--to`` ids, the rollback plan,
and the ``history.jsonl`` line of each finished transaction.

Decisions (the rollback model in full: docs/transactions.md, "Rollback"):
* ``rollback`` undoes the latest *active* apply (so repeated rollbacks walk back through the
  applies); ``rollback --to TXN`` undoes every active transaction from TXN on, rollbacks
  included, restoring for each path the state before the earliest one that touched it;
* a backup pruned by ``--keep`` is looked for by identity in every other transaction's backups;
* the history line is written once: it is only appended when no line with that id exists.
* "stock" is what the first transaction recorded here found (the oldest journal, else the oldest
  history line): journals are never pruned, only backups, so it survives ``--keep``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocmbuild.errors import InputError, TargetError
from rocmbuild.swap import actions as _actions
from rocmbuild.swap import state
from rocmbuild.swap.backups import dir_unique_bytes, find_backup
from rocmbuild.swap.journal import FINISHED, Journal, active, backup_dir, journals
from rocmbuild.swap.paths import prefix_identity, relative_to
from rocmbuild.swap.observe import FsObserver, PathState, found, observe, unchanged
from rocmbuild.swap.plan import Plan
from rocmbuild.swap.undo import Undo, make_rollback
from rocmbuild.swap.records import Drift


def _latest_after(act: list[Journal]) -> dict[str, tuple[Journal, PathState]]:
    """For every path touched by an active transaction: the state the latest one left there."""
    out: dict[str, tuple[Journal, PathState]] = {}
    for j in act:
        for step in j.data["steps"]:
            a = j.plan.actions[step["index"]]
            after = PathState.from_json(step.get("after")) if step.get("after") else PathState("absent")
            out[a.path] = (j, after)
    return out


def _latest_source(act: list[Journal]) -> dict[str, tuple[str | None, str | None]]:
    """For every path touched by an active transaction: the file whose bytes it placed there, and
    their sha256 as the journal recorded it (the manifest's; None for a restored original)."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for j in act:
        for step in j.data["steps"]:
            a = j.plan.actions[step["index"]]
            out[a.path] = (a.source, a.sha256)
    return out


def placed(state_dir: Path) -> tuple[tuple[str, PathState, str], ...]:
    """The files the active transactions placed and that are theirs still by record: (path, the
    identity journaled after the swap, the sha256 of the bytes placed). The planner takes a file
    of exactly that identity as "already applied" without hashing it."""
    try:
        act = active(state_dir)
    except (OSError, ValueError):
        return ()
    sources = _latest_source(act)
    out = []
    for path, (_j, after) in sorted(_latest_after(act).items()):
        digest = sources.get(path, (None, None))[1]
        if after.kind == "file" and digest:
            out.append((path, after, digest))
    return tuple(out)


def drift(state_dir: Path) -> list[Drift]:
    """Paths rocmbuild placed (active transactions) that no longer are what it left there (judged
    by :func:`rocmbuild.swap.observe.unchanged`: identity with the ctime, then the recorded sha256)."""
    out = []
    act = active(state_dir)
    sources = _latest_source(act)
    obs = FsObserver()
    for path, (j, after) in sorted(_latest_after(act).items()):
        now = observe(path)
        source, digest = sources.get(path, (None, None))
        if not unchanged(now, after, path, digest=digest, source=source, obs=obs):
            role = next((j.plan.actions[s["index"]].role for s in j.data["steps"]
                         if j.plan.actions[s["index"]].path == path), None)
            in_place = now.kind == "file" and (now.dev, now.inode) == (after.dev, after.inode)
            out.append(Drift(path, j.id, after.describe(), found(now, after), role=role,
                             placed_version=j.plan.version_after if role in ("library", "restore") else None,
                             placed_sha256=digest, found_kind=now.kind, written_in_place=in_place))
    return out


def stock_version(state_dir: Path) -> tuple[str, str | None] | None:
    """What the target had before rocmbuild's first transaction here: (that transaction's id, the
    version it found then; None: not recorded). None when no journal or history line says it."""
    firsts = [(j.id, j.plan.version_before) for j in journals(state_dir)[:1]]
    firsts += [(r["id"], r.get("version_before")) for r in state.read_history(state_dir)]
    return min(firsts, key=lambda f: f[0]) if firsts else None


def resolve_txn(ids: list[str], to: str) -> str:
    """The transaction id ``to`` names among ``ids`` (all journals of the target, not only those
    in effect): the exact id, or a prefix that only one id has. An empty ``to`` is an InputError;
    an ambiguous prefix (the candidates are listed) and an unknown one (the ids are listed) are
    TargetErrors (a subclass of InputError: exit 2; the JSON contract names rollback refusals so)."""
    to = (to or "").strip()
    if not to:
        raise InputError("--to needs a transaction id (or a prefix of one); an empty one names nothing",
                         "`rocmbuild history` lists the transaction ids", details={"known": ids})
    if to in ids:
        return to
    matches = [i for i in ids if i.startswith(to)]
    if len(matches) == 1:
        return matches[0]
    if matches:  # TargetError: an InputError (exit 2) about this target's transactions
        raise TargetError(f"--to {to} is ambiguous: it is the start of {len(matches)} transaction ids: "
                          + ", ".join(matches), "give more of the id (or all of it)",
                          details={"candidates": matches})
    raise TargetError(f"--to {to}: no transaction of this target has that id; known: " + (", ".join(ids) or "none"),
                      "`rocmbuild history` lists the transaction ids", details={"known": ids})


def _to_undo(state_dir: Path, act: list[Journal], to: str | None) -> list[Journal]:
    """The active transactions a rollback undoes: the latest apply, or every one from ``to`` on."""
    if to is None:
        applies = [j for j in act if j.verb == "apply"]
        if not applies:
            raise TargetError("nothing to roll back: no committed apply is in effect on this target",
                              "`rocmbuild history` lists the transactions")
        return [applies[-1]]
    everything = journals(state_dir)
    full = resolve_txn([j.id for j in everything], to)
    ids = [j.id for j in act]
    if full not in ids:
        known = next(j for j in everything if j.id == full)
        why = known.state + (", undone since" if known.state == "committed" else "")
        raise TargetError(f"cannot roll back to {full}: it is not in effect ({why})",
                          "`rocmbuild history` marks the transactions in effect; pick one of those",
                          details={"txn": full, "state": known.state, "in_effect": ids})
    return act[ids.index(full):]


def _undos(state_dir: Path, act: list[Journal], undo: list[Journal]) -> tuple[list[Undo], tuple[str, ...]]:
    """For each path the undone transactions touched: the state before the earliest of them (and
    the backup holding it); and the directories they created, deepest first."""
    latest = _latest_after(act)
    sources = _latest_source(act)
    earliest: dict[str, tuple[Journal, dict[str, Any]]] = {}
    for j in reversed(undo):
        for step in j.data["steps"]:
            earliest[j.plan.actions[step["index"]].path] = (j, step)
    undos = []
    remove_dirs: list[str] = []
    for path, (j, step) in sorted(earliest.items()):
        a = j.plan.actions[step["index"]]
        backup = None
        if a.before.kind == "file":
            nominal = Path(state_dir) / _actions.backup_rel(j.id, step["index"], a.path)
            if not nominal.exists() and not step.get("backup_copied"):
                nominal = find_backup(state_dir, a.before) or nominal  # pruned, but held elsewhere
            backup = str(nominal)
        source, digest = sources.get(path, (None, None))
        undos.append(Undo(path, latest[path][1], a.before, backup, j.id, copied=bool(step.get("backup_copied")),
                          expected_source=source, expected_digest=digest))
        remove_dirs.extend(a.create_dirs)
    return undos, tuple(sorted(set(remove_dirs), key=lambda d: -len(d)))


def rollback_plan(state_dir: Path, *, to: str | None = None, force: bool = False) -> Plan:
    """The plan of ``rollback`` (``to``: ``--to``); drift refuses unless ``force``."""
    act = active(state_dir)
    undo = _to_undo(state_dir, act, to)
    undos, remove_dirs = _undos(state_dir, act, undo)
    first, last = undo[0].plan, undo[-1].plan
    p, _drift = make_rollback(
        undos, prefix=first.prefix, python=first.python, libdir=first.libdir, layout=first.layout,
        outside=first.outside, state_dir=str(state_dir), library=first.library_before,
        library_before=last.library, version_before=last.version_after, version_after=first.version_before,
        encoding=first.encoding, library_name=first.library_name, recipe=first.recipe, commit=first.commit,
        undoes=tuple(j.id for j in undo), remove_dirs=remove_dirs, force=force,
    )
    return p


def history_record(j: Journal, *, outcome: str) -> dict[str, Any]:
    """The ``history.jsonl`` line of ``j`` (its keys: docs/json.md, ``history``): files relative to
    the prefix, and the identity of the prefix the transaction ran in."""
    plan = j.plan
    meta = dict(j.data.get("meta", {}))
    if isinstance(meta.get("python"), str):
        meta["python"] = relative_to(meta["python"], plan.prefix)
    return {
        "id": j.id, "time": j.data.get("created"), "verb": j.verb, "recipe": plan.recipe,
        "commit": plan.commit, "artifact": plan.artifact, "version_before": plan.version_before,
        "version_after": plan.version_after, "files": [relative_to(f, plan.prefix) for f in j.files],
        "outcome": outcome, "undoes": list(plan.undoes),
        "backup_bytes": dir_unique_bytes(backup_dir(Path(plan.state_dir), j.id)), **meta,
        "prefix_identity": j.data.get("prefix_identity") or prefix_identity(plan.prefix),
    }


def write_history(j: Journal) -> bool:
    """Append ``j``'s history line unless one with its id is there already; then journal that it
    was written. Returns True when a line was appended."""
    sdir = Path(j.plan.state_dir)
    appended = False
    if not any(r.get("id") == j.id for r in state.read_history(sdir)):
        state.append_history(sdir, history_record(j, outcome=j.data.get("history_outcome") or j.state))
        appended = True
    j.set(history_written=True)
    return appended


def history_missing(state_dir: Path) -> list[Journal]:
    """Finished journals whose history line was never written (killed after the final state)."""
    return [j for j in journals(state_dir) if j.state in FINISHED and j.data.get("history_written") is False]
