"""The transaction protocol: journal, stage, back up, swap, verify, commit -- or roll back; and
recovery of what an interrupted run left (the steps and their guarantees: docs/transactions.md).

Decisions:
* the caller holds the target's lock and has recovered first; verification is the caller's
  :class:`Verify` callback (the flows run the probe in the target's Python);
* on a failed verification, any exception or stop signal (rocmbuild.proc.stop) after the first rename, every
  path is reverted and the old state verified again, shielded from a second signal; before, only cleaned up;
* the reverts never depend on the journal: each journal write of a rollback is attempted and a
  failure (ENOSPC, EIO: often why we roll back) is reported, never raised; the backups stay until
  the journal says ``rolled_back`` and every path is confirmed to be its old self;
* recovery rolls back every unfinished journal, ``verified`` included (a commit the user never
  saw succeed is not kept), and writes a missing history line once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocmbuild.proc import stop
from rocmbuild import ui
from rocmbuild.errors import (RocmbuildError, RolledBackFilesystemError, TargetError, TargetFilesystemError,
                              VerifyError, from_os_error)
from rocmbuild.swap.backups import prune
from rocmbuild.swap.history import write_history
from rocmbuild.swap.journal import Journal, Step, backup_dir, failpoint, journal_dir, new_id, now
from rocmbuild.fs.root import ConfinementError
from rocmbuild.swap.expectation import Verify, expectation_after, expectation_before
from rocmbuild.results.txnresult import Outcome
from rocmbuild.results.verdict import Check, as_check, failure_json, verdict_json
from rocmbuild.swap.plan import Plan
from rocmbuild.results.swaprecords import Restored
from rocmbuild.swap.roots import Roots
from rocmbuild.swap.transaction import Transaction
from rocmbuild.results.verdict import Verdict

# --------------------------------------------------------------------------------------------
# execute


def _fsync_dirs(t: Transaction) -> None:
    for fa in t.actions:
        try:
            fa.roots.target.fsync(os.path.dirname(fa.rel))
        except FileNotFoundError:
            pass


def _stage(t: Transaction) -> None:
    for n, fa in enumerate(t.actions):
        t.mark(n, after=fa.stage())
    _fsync_dirs(t)
    t.set(state="staged")
    failpoint("after-stage")


def _backup(t: Transaction) -> None:
    copied = 0
    for n, fa in enumerate(t.actions):
        copied += int(fa.backup_file())
        if fa.backup_copied:
            t.mark(n, backup_copied=True)  # restores from it make a new inode (see FileAction.is_before)
    if t.actions and _has_backups(t.roots, t.id):
        t.roots.state.fsync(f"backups/{t.id}")
    t.set(state="backed_up", backup_copies=copied)
    failpoint("after-backup")


def _swap(t: Transaction) -> None:
    t.set(state="swapping")
    for n, fa in enumerate(t.actions):
        fa.apply()
        t.mark(n, swapped=True)
        _record_after(t, n)
        t.save()
        if n == 0 and len(t.actions) > 1:
            failpoint("mid-swap")
    for d in t.plan.remove_dirs:  # rollback: dirs the undone transactions created, if now empty
        if t.actions:
            t.roots.target.rmdir(t.roots.rel(d))  # False: not empty or gone
    _fsync_dirs(t)
    t.set(state="swapped")
    failpoint("after-swap")


def _has_backups(roots: Roots, txn: str) -> bool:
    """``backups/<txn>`` is there (a symlinked ``backups`` is not: it is never used)."""
    try:
        return roots.state.lstat(f"backups/{txn}") is not None
    except (ConfinementError, NotADirectoryError):
        return False


def _record_after(t: Transaction, n: int) -> None:
    """The placed file's identity as it is now: a rename moves the inode's ctime, and drift is
    judged against this (see pathstate.unchanged)."""
    now_, after = t.actions[n].now(), t.steps[n].after
    if now_.kind == "file" and after is not None and (now_.dev, now_.inode) == (after.dev, after.inode):
        t.mark(n, after=now_)


def execute(plan: Plan, *, verify: Verify | None, verify_restored: Verify | None = None,
            keep: int | None = 5, meta: dict[str, Any] | None = None, txn: str | None = None) -> Outcome:
    """Run ``plan`` as one transaction. The caller holds the lock and has recovered first."""
    sdir = Path(plan.state_dir)
    txn = txn or new_id(sdir)
    j = Journal(journal_dir(sdir) / f"{txn}.json", txn, plan.verb, "planned", plan,
                tuple(Step(i) for i, a in enumerate(plan.actions) if not a.done),
                meta=dict(meta or {}), created=now(), pid=os.getpid()).save()
    failpoint("after-journal")
    with Transaction.open(j) as t:
        return _run(t, verify, verify_restored, keep)


def _run(t: Transaction, verify: Verify | None, verify_restored: Verify | None, keep: int | None) -> Outcome:
    plan = t.plan
    try:
        _stage(t)
        _backup(t)
        _swap(t)
        verdict = verify(expectation_after(plan)) if verify is not None else None
        if verdict is not None and not verdict.ok:
            raise _VerifyFailed(verdict)
        for fa, step in t.pairs():  # the copies' writeback ran during the swap and the verification
            fa.make_durable(step.after)
        t.set(state="verified", verdict=verdict_json(verdict))
        failpoint("after-verify")
        # commit: inside the try, so a journal that cannot be written (ENOSPC, EIO) reverts the
        # change now instead of leaving it for the next command's recovery
        t.set(state="committed", committed=now(), history_outcome="committed", history_written=False)
    except BaseException as exc:  # noqa: BLE001 - also Ctrl-C: the target must not stay half-changed
        err = _undo_failed(t.journal, exc, any(step.swapped for step in t.steps), verify_restored)
        if err is None:
            raise
        raise err from (None if isinstance(exc, _VerifyFailed) else exc)
    failpoint("after-commit")
    try:
        write_history(t.journal)
    except OSError as exc:  # committed all the same: the next command's recovery writes the line
        ui.warn(f"{plan.verb} {t.id} is committed, but its history line could not be written ({exc}); "
                "the next rocmbuild command on this target writes it")
    pruned = tuple(prune(Path(plan.state_dir), keep)) if keep is not None else ()
    return Outcome(t.id, plan.verb, "committed", plan, verdict, pruned)


class _VerifyFailed(Exception):
    def __init__(self, verdict: Verdict) -> None:
        super().__init__("verification failed")
        self.verdict = verdict
        self.failures = tuple(as_check(c) for c in verdict.failures())


def _undo_failed(j: Journal, exc: BaseException, swapped_any: bool,
                 verify_restored: Verify | None) -> BaseException | None:
    """Roll ``j`` (as it stands) back after ``exc``; the error to raise instead (None: re-raise ``exc``)."""
    plan = j.plan
    if isinstance(exc, stop.Stop):
        _undo_stopped(j, plan, exc, swapped_any, verify_restored)  # undo, check; the stop goes on
        return None
    if not swapped_any and not isinstance(exc, _VerifyFailed):
        finish_rollback(j, reason=f"{type(exc).__name__}: {exc}", verify_restored=None, quiet=True)
        if isinstance(exc, OSError):
            return from_os_error(exc, "target", where=_lib_dir(plan)) or TargetError(
                f"could not prepare the change: {exc}", "nothing was changed; fix the cause (permissions, disk "
                "space) and run again")
        return None
    restored = finish_rollback(j, reason=_reason(exc), verify_restored=verify_restored).restored
    err = _verify_error(j, plan, exc, restored)
    fs = (from_os_error(exc, "target", rolled_back=True, where=_lib_dir(plan))
          if isinstance(exc, OSError) and restored.ok else None)
    if isinstance(fs, TargetFilesystemError):  # a full or read-only disk, the old state back and verified
        return RolledBackFilesystemError(err.message, fs.hint, details={**err.details, **fs.details})
    return err


def _lib_dir(plan: Plan) -> str | None:
    return str(Path(plan.library).parent) if plan.library else None


def _undo_stopped(j: Journal, plan: Plan, exc: stop.Stop, swapped: bool, verify_restored: Verify | None) -> None:
    """Roll back after a stop signal (shielded from a second one); note on the stop what was undone."""
    was, check = j.state, verify_restored if swapped else None
    r = finish_rollback(j, reason=_reason(exc), verify_restored=check, quiet=not swapped).restored
    done = "no file had changed yet" if not swapped else "every change was rolled back and " + (
        "the old state verifies again" if r.ok and not r.journal_errors else "WARNING: it is not confirmed")
    stop.note(exc, f"{plan.verb} {j.id} was stopped at '{was}'; {done}", txn=j.id, verb=plan.verb,
              stopped_at=was, rolled_back=swapped, restored=r.to_json())


def _reason(exc: BaseException) -> str:
    if isinstance(exc, _VerifyFailed):
        return "verification failed"
    if isinstance(exc, KeyboardInterrupt):
        return f"interrupted ({stop.name(stop.signum_of(exc))})"
    if isinstance(exc, RocmbuildError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


def _once(said: set[object], text: object) -> bool:
    """True when ``text`` was said already (and remember it)."""
    seen = text in said
    said.add(text)
    return seen


def _verify_error(j: Journal, plan: Plan, exc: BaseException, restored: Restored) -> VerifyError:
    failures = exc.failures if isinstance(exc, _VerifyFailed) else ()
    said: set[object] = set()  # a message shared by several checks (the smoke suite's) is said once
    lines = [f"  - {f.name}: expected {f.expected}, found {f.found}"
             + (f" ({f.message})" if f.message and not _once(said, f.message) else "")
             for f in failures]
    head = (f"{plan.verb} {j.id}: verification failed; every change was rolled back"
            if isinstance(exc, _VerifyFailed)
            else f"{plan.verb} {j.id}: {_reason(exc)}; every change was rolled back")
    back = ("the old state verifies again" if restored.ok
            else "WARNING: the restored old state did not verify: " + "; ".join(
                [f"{f.name}: {f.found}" for f in restored.failures] + list(restored.paths or ())))
    extra = [f"warning: the restored old state: {w.name}: {w.found}" for w in restored.warnings()]
    if restored.backups_kept:
        extra.append(f"the backups are kept in {restored.backups_kept}")
    if restored.journal_errors:
        extra.append("the journal could not be updated (" + "; ".join(restored.journal_errors)
                     + "): the next rocmbuild command (or `rocmbuild recover`) finishes it")
    return VerifyError(
        "\n".join([head, *lines, back, *extra]),
        "read the failed checks above; `rocmbuild status` shows what the environment loads now",
        details={"txn": j.id, "failures": [failure_json(f) for f in failures], "restored": restored.to_json(),
                 "verdict": verdict_json(exc.verdict if isinstance(exc, _VerifyFailed) else None)},
    )


# --------------------------------------------------------------------------------------------
# rolling back


@dataclass(frozen=True)
class RolledBack:
    """What :func:`finish_rollback` did: the restore as judged, and the journal as it last changed
    it (written, unless ``restored.journal_errors`` says otherwise)."""

    restored: Restored
    journal: Journal


class _JournalWrites:
    """The journal writes of a rollback: each attempted; a failure is recorded, never raised."""

    def __init__(self, t: Transaction, errors: list[str]) -> None:
        self.t = t
        self.errors = errors

    def set(self, **kw: Any) -> bool:
        try:
            self.t.set(**kw)
            return True
        except OSError as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return False


def _revert_all(t: Transaction, errors: list[str]) -> list[str]:
    """Revert every path (newest first), remove temps and created dirs; the messages. Raises the
    first revert error once every other path is done (the journal stays unfinished: the next
    recovery retries)."""
    messages = []
    revert_errors: list[BaseException] = []
    fas = t.actions
    for fa, step in reversed(t.pairs()):
        try:
            msg = fa.revert(step.after)
        except (OSError, ConfinementError) as exc:  # e.g. a missing backup: still revert every other path
            revert_errors.append(exc)
            continue
        if msg:
            messages.append(msg)
            if len(messages) == 1 and len(fas) > 1:
                failpoint("mid-rollback")
    for fa in fas:
        fa.discard()
    for fa in fas:
        fa.remove_created_dirs()
    for fa in fas:
        try:
            fa.roots.target.fsync(os.path.dirname(fa.rel))
        except FileNotFoundError:
            pass
        except (OSError, ConfinementError) as exc:
            errors.append(f"fsync {fa.dest.parent}: {exc}")
    if revert_errors:
        raise revert_errors[0]
    return messages


def _judge_restored(t: Transaction, verify_restored: Verify | None) -> Restored:
    """Confirm by identity that every path is its before state again (a restore from a copied
    backup is a new inode: see FileAction.is_before); then, if given, the verify callback."""
    wrong = []
    for fa in t.actions:
        try:
            now_ = fa.now()
        except ConfinementError as exc:
            wrong.append(f"{fa.dest}: {exc.message}")
            continue
        if not fa.is_before(now_):
            wrong.append(f"{fa.dest}: expected {fa.before.describe()}, found {now_.describe()}")
    if wrong or verify_restored is None:
        return Restored(ok=not wrong, paths=tuple(wrong))
    try:
        v = verify_restored(expectation_before(t.plan))
        return Restored(ok=bool(v.ok), failures=tuple(as_check(c) for c in v.failures()), verdict=v)
    except Exception as exc:  # noqa: BLE001 - report, never mask the rollback
        return Restored(ok=False, failures=(Check("probe", False, "the restored state answers the probe", str(exc)),))


@stop.shielded()  # a stop signal that comes during a rollback waits for its end
def finish_rollback(j: Journal, *, reason: str, verify_restored: Verify | None, quiet: bool = False,
                    recovered: bool = False) -> RolledBack:
    """Revert every path of ``j`` (as it stands: its own file actions, as recovery makes them) to
    its before state, clean up, mark rolled back, write history. The backups are removed only when
    every path is confirmed *and* the journal says ``rolled_back``; else they are kept
    (``backups_kept``) for a later recovery or by hand."""
    was = j.state
    j = replace(j, state="rolling_back", reason=reason, state_before_rollback=j.state_before_rollback or was)
    errors: list[str] = []
    try:
        j = j.save()
    except OSError as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    with Transaction.open(j) as t:
        return _finish(t, _JournalWrites(t, errors), was, reason, verify_restored, quiet, recovered)


def _finish(t: Transaction, writes: "_JournalWrites", was: str, reason: str,
            verify_restored: Verify | None, quiet: bool, recovered: bool) -> RolledBack:
    roots = t.roots
    messages = _revert_all(t, writes.errors)
    restored = _judge_restored(t, verify_restored)
    bdir = backup_dir(Path(t.plan.state_dir), t.id)
    has_backups = _has_backups(roots, t.id)
    if not restored.ok and restored.paths and has_backups:
        unconfirmed = len(restored.paths)
        restored = replace(restored, backups_kept=str(bdir))
        msg = (f"the backups of {t.id} are kept in {bdir}: {unconfirmed} path(s) were not confirmed "
               "to be their old selves again")
        messages.append(msg)
        if quiet:
            ui.warn(msg)
    needs_history = was != "planned" or recovered
    outcome = (f"recovered: rolled back (interrupted at '{was}')" if recovered else f"rolled back: {reason}")
    marked = writes.set(state="rolled_back", rolled_back=now(), restored=restored.to_json(),
                        revert_messages=tuple(messages), history_outcome=outcome if needs_history else None,
                        history_written=not needs_history)
    if marked and not restored.paths and has_backups:
        roots.state.rmtree(f"backups/{t.id}")
    elif not marked and has_backups:
        restored = replace(restored, backups_kept=str(bdir))
    if marked and needs_history:
        try:
            t.journal = write_history(t.journal)[1]
        except OSError as exc:
            writes.errors.append(f"history: {type(exc).__name__}: {exc}")
    if not quiet:
        for m in messages:
            ui.info(m)
    return RolledBack(replace(restored, journal_errors=tuple(writes.errors)), t.journal)
