"""Plans that bring an earlier state back: ``rollback``, ``rollback --to N`` and ``redo``.

Decisions (docs/transactions.md, "Rollback and redo"):
* every one of them returns the target to a *point* of :mod:`rocmbuild.swap.ineffect` (the state
  right after a transaction, or ``stock``): for each path that a committed transaction after that
  point touched, the state before the first of them that touched it (chronology, not the stack:
  it is what was on disk then), from that transaction's backup, or any backup holding the same
  inode when that one was pruned;
* ``rollback`` takes the newest apply in effect out of effect; ``rollback --to N`` brings back the
  state after transaction N (conda's ``--revision N``): N's number (``3``, ``0003``), its id or a
  prefix of it; ``0`` or ``stock`` is the state before rocmbuild's first transaction. A rollback
  only takes applies out of effect: a ``--to`` whose state had an apply that is undone now is refused, naming
  ``redo``; one whose state is the state now is "nothing to roll back";
* ``redo`` undoes the last rollback (effect.Redo): what it undid is in effect again, from the
  rollback's own backups (they hold the files it replaced);
* the state now is judged by the last committed transaction that touched each path; anything else
  there is drift, refused unless forced;
* the plan itself (:class:`Undo` per path, :func:`make_rollback`) changes nothing: a path that is
  not what rocmbuild left there is drift (judged by :func:`rocmbuild.swap.pathstate.unchanged`); a
  restore is "done" by the backup's inode, or (a backup copied across filesystems) by its bytes,
  hashed only when size and mode already match.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from rocmbuild.errors import InputError, TargetError
from rocmbuild.swap import actions as _actions
from rocmbuild.swap.backups import find_backup
from rocmbuild.swap.ineffect import STOCK, Effect, model
from rocmbuild.swap.journal import Journal, Step, journals, seq
from rocmbuild.swap.landing import missing_dirs
from rocmbuild.swap.pathstate import FsObserver, Observer, PathState, found, unchanged
from rocmbuild.swap.plan import Action, Plan
from rocmbuild.results.swaprecords import Drift


@dataclass(frozen=True)
class Undo:
    """One path of a rollback: what it should be now, and what it must become."""

    path: str
    expected: PathState  # what the latest transaction left there
    desired: PathState  # what it was before the earliest undone transaction
    backup: str | None  # the file holding ``desired`` content (a hardlink in backups/<txn>/)
    txn: str  # the transaction whose "before" is restored
    copied: bool = False  # the backup is a copy (another filesystem): a restore makes a new inode
    expected_source: str | None = None  # the file whose bytes ``expected`` holds (artifact or backup)
    expected_digest: str | None = None  # their sha256 as journaled (the manifest's; None: never hashed)


def _restore_action(u: Undo, now: PathState, obs: Observer) -> Action:
    """The action that brings ``u.desired`` back at ``u.path`` (which is ``now``)."""
    create = missing_dirs(Path(u.path), obs) if now.kind == "absent" else ()
    if u.desired.kind == "file":
        if not u.backup or obs.state(Path(u.backup)).kind != "file":
            raise TargetError(
                f"cannot restore {u.path}: the backup of transaction {u.txn} is gone ({u.backup})",
                "its backups were pruned (--keep); pick a later transaction with --to",
            )
        done = now.kind == "file" and (now.dev, now.inode) == (u.desired.dev, u.desired.inode)
        if not done and u.copied and now.kind == "file" and (now.size, now.mode) == (
                u.desired.size, u.desired.mode):
            # restored from a copied backup: a new inode; the same bytes as the backup (hashed
            # only here: a copied path whose size and mode already match)
            done = obs.sha256(Path(u.path)) == obs.sha256(Path(u.backup))
        return Action("replace_file" if now.kind != "absent" else "add_file", u.path, "restore", now,
                      source=u.backup, size=u.desired.size, done=done, create_dirs=create)
    if u.desired.kind == "link":
        return Action("replace_link", u.path, "restore", now, link=u.desired.target,
                      done=now.kind == "link" and now.target == u.desired.target, create_dirs=create)
    return Action("remove", u.path, "restore", now, done=now.kind == "absent")


def make_rollback(undos: Iterable[Undo], *, prefix: str, python: str, libdir: str, layout: str,
                  outside: bool, state_dir: str, library: str, library_before: str,
                  version_before: str | None, version_after: str | None, encoding: str,
                  library_name: str, recipe: str | None, commit: str | None, undoes: tuple[str, ...],
                  remove_dirs: tuple[str, ...] = (), force: bool = False,
                  observer: Observer | None = None) -> tuple[Plan, list[Drift]]:
    """The plan that restores every ``Undo.desired`` state, and the drift found on the way
    (paths whose current state is not what rocmbuild left there). Drift refuses (TargetError)
    unless ``force``; with force the drifted file is backed up by the rollback like any other."""
    obs = observer or FsObserver()
    actions = []
    drift = []
    for u in undos:
        now = obs.state(Path(u.path))
        if not unchanged(now, u.expected, u.path, digest=u.expected_digest, source=u.expected_source, obs=obs):
            drift.append(Drift(u.path, u.txn, u.expected.describe(), found(now, u.expected)))
        actions.append(_restore_action(u, now, obs))
    if drift and not force:
        lines = "\n".join(f"  {d.path}: rocmbuild left {d.expected}, found {d.found}" for d in drift)
        raise TargetError(
            f"files rocmbuild installed were changed since (drift):\n{lines}",
            "something else (e.g. a conda or pip update) replaced them; rolling back would overwrite "
            "that change. Pass --force to roll back anyway (the current files are backed up first)",
            details={"drift": [d.to_json() for d in drift]},
        )
    plan = Plan(
        verb="rollback", prefix=prefix, python=python, libdir=libdir, layout=layout, outside=outside,
        state_dir=state_dir, actions=tuple(actions), library=library, library_before=library_before,
        version_before=version_before, version_after=version_after, encoding=encoding,
        library_name=library_name, recipe=recipe,
        commit=commit, undoes=undoes, remove_dirs=remove_dirs,
        notes=tuple(f"drift at {d.path} (forced)" for d in drift),
    )
    return plan, drift


STOCK_WORDS = ("0", "stock")


def last_touch(committed: tuple[Journal, ...] | list[Journal]) -> dict[str, tuple[Journal, PathState, str | None, str | None]]:
    """For every path a committed transaction touched: the last one, the state it left there, and
    the file whose bytes it placed with their journaled sha256 (None: a restored original)."""
    out: dict[str, tuple[Journal, PathState, str | None, str | None]] = {}
    for j in committed:
        for a, step in j.changes:
            out[a.path] = (j, step.after or PathState("absent"), a.source, a.sha256)
    return out


def resolve_txn(ids: list[str], to: str, flag: str = "--to") -> str:
    """The transaction id ``to`` names among ``ids``: its number (all digits: ``3`` or ``0003``),
    the exact id, or a prefix that only one id has. Empty: InputError; ambiguous or unknown:
    TargetError (an InputError, exit 2) listing the candidates or the ids; each names ``flag``, the
    option the user gave it with (``--to``, ``--undo``)."""
    to = (to or "").strip()
    if not to:
        raise InputError(f"{flag} needs a transaction number or id; an empty one names nothing",
                         "`rocmbuild history` lists the transactions"
                         + (" (`--to 0` is the state before the first)" if flag == "--to" else ""),
                         details={"known": ids})
    if to in ids:
        return to
    matches = [i for i in ids if seq(i) == int(to)] if to.isdigit() else [i for i in ids if i.startswith(to)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise TargetError(f"{flag} {to} is ambiguous: it names {len(matches)} transactions: " + ", ".join(matches),
                          "give the whole id", details={"candidates": matches})
    raise TargetError(f"{flag} {to}: no transaction of this target has that number or id; known: "
                      + (", ".join(ids) or "none"), "`rocmbuild history` lists the transactions",
                      details={"known": ids})


def point_before(m: Effect, txn: str) -> str:
    """``rollback --undo TXN``: the point whose state is the one right before the apply ``txn``
    took effect (``stock`` before the first); TargetError when ``txn`` is not an apply that took
    effect. What TXN undoes is then ``--to`` that point: TXN and every apply after it."""
    after = m.stacks.get(txn)
    if not after or after[-1] != txn:
        raise TargetError(f"--undo {txn}: it is not an apply that took effect on this target",
                          "`rocmbuild history` lists the applies; `--undo` takes one of them",
                          details={"txn": txn})
    want = after[:-1]
    if not want:
        return STOCK
    points = [p for p, st in m.stacks.items() if st == want and p != txn]
    if not points:
        raise TargetError(f"--undo {txn}: the state before it is not recorded", "use `--to` with a transaction "
                          "`rocmbuild history` lists", details={"txn": txn})
    return points[-1]


def is_stock(to: str | None) -> bool:
    return to is not None and (to.strip().lower() == "stock" or (to.strip().isdigit() and int(to) == 0))


def target_stack(m: Effect, to: str | None, ids: list[str]) -> tuple[tuple[str, ...], str | None]:
    """The stack a rollback returns to, and the point ``to`` names among ``ids`` (every journal's;
    None: plain rollback)."""
    if to is None:
        if not m.in_effect:
            raise TargetError("nothing to roll back: no apply by rocmbuild is in effect on this target",
                              "`rocmbuild history` lists the transactions; `rocmbuild redo` re-applies "
                              "what the last rollback undid")
        return m.stack[:-1], None
    point = STOCK if is_stock(to) else resolve_txn(ids, to)
    if point != STOCK and point not in m.stacks:
        raise TargetError(f"cannot roll back to the state after {point}: it never took effect (it was rolled back)",
                          "`rocmbuild history` marks the transactions in effect", details={"txn": point})
    return m.stacks[point], point


def check_undo_only(m: Effect, want: tuple[str, ...], point: str | None) -> tuple[str, ...]:
    """The applies a rollback to ``want`` takes out of effect; TargetError when it would take
    none, or would need to re-apply one (a rollback only undoes)."""
    now = m.stack
    where = "the state before rocmbuild's first transaction" if point == STOCK else f"the state after {point}"
    if want == now:
        raise TargetError(f"nothing to roll back: {where} is the state now",
                          "`rocmbuild history` lists the transactions", details={"txn": point, "in_effect": list(now)})
    if now[:len(want)] != want:
        back = [x for x in want if x not in now]
        raise TargetError(f"cannot roll back to {where}: {', '.join(back)} was in effect then and is undone now, "
                          "and a rollback never re-applies (it only takes applies out of effect)", "`rocmbuild redo` re-applies what the last rollback undid; "
                          "`rocmbuild history` shows what undid what",
                          details={"txn": point, "in_effect": list(now), "would_reapply": back})
    return now[len(want):]


def _undos(state_dir: Path, m: Effect, point: str) -> tuple[list[Undo], tuple[str, ...]]:
    """For each path a committed transaction after ``point`` touched: the state before the first
    of them that touched it (and the backup holding it); the dirs they created, deepest first."""
    last = last_touch(m.committed)
    first: dict[str, tuple[Journal, Action, Step]] = {}
    for j in m.after(point):
        for a, step in j.changes:
            first.setdefault(a.path, (j, a, step))
    undos: list[Undo] = []
    remove_dirs: list[str] = []
    for path, (j, a, step) in sorted(first.items()):
        backup = None
        if a.before.kind == "file":
            nominal = Path(state_dir) / _actions.backup_rel(j.id, step.index, a.path)
            if not nominal.exists() and not step.backup_copied:
                nominal = find_backup(state_dir, a.before) or nominal  # pruned, but held elsewhere
            backup = str(nominal)
        _lj, after, source, digest = last[path]
        undos.append(Undo(path, after, a.before, backup, j.id, copied=bool(step.backup_copied),
                          expected_source=source, expected_digest=digest))
        remove_dirs.extend(a.create_dirs)
    return undos, tuple(sorted(set(remove_dirs), key=lambda d: -len(d)))


def _restore(state_dir: Path, m: Effect, point: str, *, undoes: tuple[str, ...], redoes: str | None,
             force: bool) -> Plan:
    undos, remove_dirs = _undos(state_dir, m, point)
    later = m.after(point)
    newest = later[-1].plan
    wanted = m.stacks[point]
    top = next((j.plan for j in m.committed if wanted and j.id == wanted[-1]), None)
    info = top or later[0].plan  # what the restored state is: the apply on top then, else what was before
    p, _drift = make_rollback(
        undos, prefix=newest.prefix, python=newest.python, libdir=newest.libdir, layout=newest.layout,
        outside=newest.outside, state_dir=str(state_dir), library=top.library if top else later[0].plan.library_before,
        library_before=newest.library, version_before=_version_now(m), version_after=_version_then(later[0], top),
        encoding=info.encoding, library_name=info.library_name,
        recipe=info.recipe, commit=info.commit, undoes=undoes, remove_dirs=remove_dirs, force=force,
    )
    return replace(p, restores_to=point, redoes=redoes)


def _version_then(first: Journal, top: Plan | None) -> str | None:
    """The version a restore verifies: what was loaded right before ``first``, the first transaction
    it undoes (an apply probed it; a rollback or redo recorded what the one before it verified). The
    restored files are what was on disk then, a library written over included, so the history's
    version of the apply on top could be refused by verification (issue 19); status then says DRIFT."""
    return first.plan.version_before if first.plan.version_before is not None or top is None else top.version_after


def _version_now(m: Effect) -> str | None:
    """The version loaded now by record: what the last committed transaction verified."""
    last = m.committed[-1].plan.version_after if m.committed else None
    if last is not None:
        return last
    return m.in_effect[-1].plan.version_after if m.in_effect else (
        m.committed[0].plan.version_before if m.committed else None)


def rollback_plan(state_dir: Path, *, to: str | None = None, force: bool = False) -> Plan:
    """The plan of ``rollback`` (``to``: ``--to``, the state after that transaction; ``0``/``stock``:
    before the first); drift refuses unless ``force``."""
    m = model(state_dir)
    want, point = target_stack(m, to, [j.id for j in journals(Path(state_dir))])
    undoes = check_undo_only(m, want, point)
    return _restore(Path(state_dir), m, m.point_for(want), undoes=undoes, redoes=None, force=force)


def redo_plan(state_dir: Path, *, force: bool = False) -> Plan:
    """The plan of ``redo``: undo the last rollback (TargetError when nothing can be redone)."""
    m = model(state_dir)
    r = m.redo
    if r is None:
        raise TargetError("nothing to redo: no rollback since the last apply took anything out of effect",
                          "`rocmbuild history` lists the transactions; `redo` re-applies what the last "
                          "`rollback` undid, until the next apply")
    return _restore(Path(state_dir), m, m.point_for(m.stacks[r.point]), undoes=(), redoes=r.rollback, force=force)
