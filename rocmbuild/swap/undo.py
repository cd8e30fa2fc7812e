"""The rollback plan: every path back to the state before the transactions it undoes; changes
nothing. Decisions: a path that is not what rocmbuild left there is drift (judged by
:func:`rocmbuild.swap.pathstate.unchanged`) and refuses unless forced; a restore is "done" by the
backup's inode, or (a backup copied across filesystems) by its bytes, hashed only when size and
mode already match.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rocmbuild.errors import TargetError
from rocmbuild.swap.pathstate import FsObserver, Observer, PathState, found, unchanged
from rocmbuild.swap.landing import missing_dirs
from rocmbuild.swap.plan import Action, Plan
from rocmbuild.swap.swaprecords import Drift


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
