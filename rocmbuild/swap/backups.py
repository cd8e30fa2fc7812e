"""Backups of a target: ``backups/<txn>/`` (hardlinks of the originals), what they cost, which
are protected, and pruning them by ``--keep``.

Decisions:
* cost is ``st_blocks * 512`` of backup files with link count 1: the bytes only the backups keep
  alive (a backup still linked from the target or the artifact cache costs nothing);
* pruning keeps, by identity (device + inode), the original pre-rocmbuild files, what the next
  two plain ``rollback``s restore and what the next ``redo`` restores and later undoes again,
  whichever transaction's backup holds them; a copied backup (another filesystem) cannot be
  matched by inode, so it is always kept; every removal is in the result (``pruned``);
* a prune says so once, in one line, and only when an apply in effect lost its backups (an
  undone transaction's, a rollback's: nothing in effect loses its way back); ``-q`` silences it;
* in a copied env (its journals record another prefix) nothing is pruned, with a warning: the
  identities recorded there belong to the original's files.
"""

from __future__ import annotations

import os
from pathlib import Path

from rocmbuild import ui
from rocmbuild.swap.ineffect import model
from rocmbuild.swap.journal import FINISHED, backup_dir, foreign, journals, now, seq
from rocmbuild.swap.pathstate import PathState
from rocmbuild.results.swaprecords import Pruned
from rocmbuild.swap.roots import open_state


def dir_unique_bytes(d: Path) -> int:
    """``st_blocks * 512`` of the files under ``d`` that no other name keeps alive (link count 1)."""
    total = 0
    if not d.is_dir():
        return 0
    for root, _dirs, files in os.walk(d):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except FileNotFoundError:
                continue
            if st.st_nlink == 1 and not os.path.islink(os.path.join(root, f)):
                total += st.st_blocks * 512
    return total


def backup_bytes(state_dir: Path) -> int:
    """Bytes only the backups keep alive (files with link count 1), in ``st_blocks * 512``."""
    return dir_unique_bytes(Path(state_dir) / "backups")


def _needed_identities(state_dir: Path) -> set[tuple[int, int]]:
    """(device, inode) of every file a rollback may still have to bring back:

    * for every path rocmbuild ever touched here, the file it held before rocmbuild's first
      transaction on it (the stock library a user wants back: ``rollback --to`` the oldest apply);
    * the files the latest two applies in effect replaced: what the next plain ``rollback``
      restores, and the one after it (a target's files are its own copies, never the cache's
      inode, so a later transaction's backup no longer holds the same inode by chance; two, not
      all: a boot loop of applies must not keep every backup against ``--keep``);
    * what the next ``redo`` restores (the files the last rollback replaced) and the files the
      applies it re-applies had replaced (so that, redone, they can be rolled back again).

    Identity, not transaction ids: after a rollback is itself undone ("redo"), the original inode
    lives on in the redo's backup, not in the backup of the apply that first replaced it."""
    needed: set[tuple[int, int]] = set()
    seen: set[str] = set()
    for j in journals(state_dir):
        if j.state not in FINISHED:
            continue
        for a, _step in j.changes:
            if a.path not in seen:
                seen.add(a.path)
                if a.before.kind == "file":
                    needed.add((a.before.dev, a.before.inode))
    m = model(state_dir)
    keep = list(m.in_effect[-2:])
    if m.redo is not None:
        by_id = {j.id: j for j in m.committed}
        keep += [by_id[m.redo.rollback]] + [by_id[x] for x in m.redo.reapplies]
    for j in keep:
        for a, _step in j.changes:
            if a.before.kind == "file":
                needed.add((a.before.dev, a.before.inode))
    return needed


def _backup_identities(d: Path) -> set[tuple[int, int]]:
    out = set()
    if d.is_dir():
        for f in d.iterdir():
            try:
                st = f.lstat()
            except FileNotFoundError:
                continue
            out.add((st.st_dev, st.st_ino))
    return out


def protected_backups(state_dir: Path) -> set[str]:
    """The transactions whose backups :func:`prune` never removes: the newest committed transaction
    (what was just done: a rollback's hold what ``redo`` restores), every transaction whose backup was *copied* (another filesystem: its
    identity cannot be matched by inode, so it is kept), and, for each file of
    :func:`_needed_identities` (the original pre-rocmbuild files, and what a plain ``rollback``
    restores), the newest transaction whose backups hold it (hardlinks of one inode: one is
    enough, and :func:`rollback_plan` finds it through :func:`find_backup`)."""
    committed = model(state_dir).committed
    out = {committed[-1].id} if committed else set()
    needed = _needed_identities(state_dir)
    holder: dict[tuple[int, int], str] = {}  # identity -> the newest transaction whose backups hold it
    for j in journals(state_dir):  # oldest first
        d = backup_dir(state_dir, j.id)
        if not d.is_dir():
            continue
        if any(step.backup_copied for step in j.steps):
            out.add(j.id)
        for ident in _backup_identities(d) & needed:
            holder[ident] = j.id
    return out | set(holder.values())


def find_backup(state_dir: Path, before: PathState) -> Path | None:
    """Any backup file holding ``before`` (same device and inode), in any transaction's backups:
    the nominal one may have been pruned while an identical hardlink lives on elsewhere."""
    if before.kind != "file":
        return None
    root = Path(state_dir) / "backups"
    if not root.is_dir():
        return None
    for d in sorted(root.iterdir()):
        for f in (d.iterdir() if d.is_dir() else ()):
            try:
                st = f.lstat()
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) == (before.dev, before.inode):
                return f
    return None


def prune(state_dir: Path, keep: int) -> list[Pruned]:
    """Remove backups so that about ``keep`` transactions keep theirs; say so. ``keep < 1`` is a
    ValueError.

    The rule: only finished transactions' backups are candidates (an unfinished journal's backups
    are what its recovery restores). Never removed: the backups :func:`protected_backups` names --
    those holding the original pre-rocmbuild files (so ``rollback --to <oldest active apply>``
    always works, however many applies a boot loop made) and the newest active transaction's. The
    others go, as many as exceed ``keep``: first those of transactions no longer in effect (undone,
    or rolled back with their backups kept), oldest first, then active ones, oldest first. Protected
    backups count towards ``keep``, so more than ``keep`` may remain when they alone exceed it."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (got {keep}): keep 0 would remove the backups of "
                         "the transaction just made, and those of the original files")
    state_dir = Path(state_dir)
    elsewhere = [f for f in foreign(state_dir) if f[0] == "copied"]
    if elsewhere:  # a copy has new inodes: the identities that protect the originals match nothing
        ui.warn(f"not pruning the backups in {state_dir}: this state was {elsewhere[0][0]} from "
                f"{elsewhere[0][1]}, and backups are matched by identity, which a copy does not keep")
        return []
    with_backups = [j for j in journals(state_dir)
                    if j.state in FINISHED and backup_dir(state_dir, j.id).is_dir()]
    excess = len(with_backups) - keep
    if excess <= 0:
        return []
    protected = protected_backups(state_dir)
    m = model(state_dir)
    in_effect = set(m.stack)
    wanted = in_effect | {r.rollback for r in m.redos}  # a rollback that can be redone needs its backups
    candidates = sorted((j for j in with_backups if j.id not in protected),
                        key=lambda j: (j.id in wanted, seq(j.id), j.id))
    out = []
    for j in candidates[:excess]:
        freed = dir_unique_bytes(backup_dir(state_dir, j.id))
        with open_state(state_dir, create=True) as root:  # never through a symlink
            root.rmtree(f"backups/{j.id}")
        j.saved(backups_pruned=now())
        out.append(Pruned(j.id, freed, in_effect=j.id in in_effect))
    _say_pruned(out, keep)
    return out


def _say_pruned(pruned: list[Pruned], keep: int) -> None:
    """One line, only when applies in effect lost their backups (``-q`` and ``--json`` silence it)."""
    lost = [p for p in pruned if p.in_effect]
    if lost:
        nums = ", ".join(p.id.split("-", 1)[0] for p in lost)
        freed = sum(p.freed_bytes for p in pruned)
        ui.info(f"note: --keep {keep} removed the backups of apply {nums} ({freed} bytes freed): the state "
                f"before {'it' if len(lost) == 1 else 'each'} may no longer come back; `rollback` of the newest "
                "two applies, `redo` and `rollback --to 0` (the stock state) still work")
