"""What rocmbuild did to a target: drift, the stock version, and the ``history.jsonl`` line of
each finished transaction (what is in effect: swap/ineffect.py; rollback and redo plans: swap/restore.py).

Decisions:
* what rocmbuild placed at a path is what the last committed transaction on it left there
  (chronology: what is on disk, whichever transactions are in effect); anything else is drift;
* the history line is written once: it is only appended when no line with that id exists.
* "stock" is what the first transaction recorded here found (the oldest journal, else the oldest
  history line): journals are never pruned, only backups, so it survives ``--keep``.
"""

from __future__ import annotations

from pathlib import Path
from rocmbuild.swap import statedir
from rocmbuild.swap.statedir import HISTORY_NAMED, HistoryLine
from rocmbuild.swap.backups import dir_unique_bytes
from rocmbuild.swap.ineffect import model
from rocmbuild.swap.journal import FINISHED, Journal, backup_dir, journals
from rocmbuild.swap.landing import PrefixIdentity, relative_to
from rocmbuild.swap.pathstate import FsObserver, PathState, found, observe, unchanged
from rocmbuild.results.swaprecords import Drift
from rocmbuild.swap.restore import last_touch


def _placed_by(state_dir: Path) -> dict[str, tuple[Journal, PathState, str | None, str | None]]:
    """For every path a committed transaction touched: the last one, what it left there, the
    file whose bytes it placed and their sha256 (chronology: what is on disk, whatever is in effect)."""
    return last_touch(model(state_dir).committed)


def placed(state_dir: Path) -> tuple[tuple[str, PathState, str], ...]:
    """The files the active transactions placed and that are theirs still by record: (path, the
    identity journaled after the swap, the sha256 of the bytes placed). The planner takes a file
    of exactly that identity as "already applied" without hashing it."""
    try:
        last = _placed_by(state_dir)
    except (OSError, ValueError):
        return ()
    out = []
    for path, (_j, after, _source, digest) in sorted(last.items()):
        if after.kind == "file" and digest:
            out.append((path, after, digest))
    return tuple(out)


def drift(state_dir: Path) -> list[Drift]:
    """Paths rocmbuild placed (the last committed transaction on each) that no longer are what it left there (judged
    by :func:`rocmbuild.swap.pathstate.unchanged`: identity with the ctime, then the recorded sha256)."""
    out = []
    obs = FsObserver()
    for path, (j, after, source, digest) in sorted(_placed_by(state_dir).items()):
        now = observe(path)
        if not unchanged(now, after, path, digest=digest, source=source, obs=obs):
            role = next((a.role for a, _step in j.changes if a.path == path), None)
            in_place = now.kind == "file" and (now.dev, now.inode) == (after.dev, after.inode)
            out.append(Drift(path, j.id, after.describe(), found(now, after), role=role,
                             placed_version=j.plan.version_after if role in ("library", "restore") else None,
                             placed_sha256=digest, found_kind=now.kind, written_in_place=in_place))
    return out


def stock_version(state_dir: Path) -> tuple[str, str | None] | None:
    """What the target had before rocmbuild's first transaction here: (that transaction's id, the
    version it found then; None: not recorded). None when no journal or history line says it."""
    firsts = [(j.id, j.plan.version_before) for j in journals(state_dir)[:1]]
    firsts += [(r.id, r.version_before) for r in statedir.read_history(state_dir)]
    return min(firsts, key=lambda f: f[0]) if firsts else None


def history_record(j: Journal, *, outcome: str) -> HistoryLine:
    """The ``history.jsonl`` line of ``j`` (its keys: docs/json.md, ``history``): files relative to
    the prefix, and the identity of the prefix the transaction ran in."""
    plan = j.plan
    meta = dict(j.meta)
    python, artifact_path = meta.pop("python", None), meta.pop("artifact_path", None)
    return HistoryLine(
        id=j.id, time=j.created, verb=j.verb, recipe=plan.recipe, commit=plan.commit,
        artifact=plan.artifact, version_before=plan.version_before, version_after=plan.version_after,
        files=tuple(relative_to(f, plan.prefix) or f for f in j.files), outcome=outcome, undoes=tuple(plan.undoes),
        backup_bytes=dir_unique_bytes(backup_dir(Path(plan.state_dir), j.id)),
        python=relative_to(python, plan.prefix) if isinstance(python, str) else None,
        artifact_path=artifact_path if isinstance(artifact_path, str) else None,
        prefix_identity=j.prefix_identity or PrefixIdentity.of(plan.prefix),
        extra={k: v for k, v in meta.items() if k not in HISTORY_NAMED})


def write_history(j: Journal) -> tuple[bool, Journal]:
    """Append ``j``'s history line unless one with its id is there already; then journal that it
    was written. Returns whether a line was appended, and the journal as saved."""
    sdir = Path(j.plan.state_dir)
    appended = False
    if not any(r.id == j.id for r in statedir.read_history(sdir)):
        statedir.append_history(sdir, history_record(j, outcome=j.history_outcome or j.state))
        appended = True
    return appended, j.saved(history_written=True)


def history_missing(state_dir: Path) -> list[Journal]:
    """Finished journals whose history line was never written (killed after the final state)."""
    return [j for j in journals(state_dir) if j.state in FINISHED and j.history_written is False]
