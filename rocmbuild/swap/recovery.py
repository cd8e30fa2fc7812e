"""Recovery: every unfinished transaction of a state dir rolled back (the caller holds the lock),
and the missing history line of a finished one written (docs/transactions.md, Recovery).

Decision: a restore that recovery cannot confirm (a path not provably its old self again) is
never reported as done: the journal says ``rolled_back`` with the backups kept, and recovery ends
in a :class:`~rocmbuild.errors.VerifyError` (exit 4) naming the paths and the backups.
"""

from __future__ import annotations

from pathlib import Path

from rocmbuild import ui
from rocmbuild.errors import TargetError, VerifyError
from rocmbuild.swap.history import history_missing, write_history
from rocmbuild.swap.journal import FINISHED, journals, pending
from rocmbuild.swap.expectation import Verify
from rocmbuild.swap.protocol import finish_rollback
from rocmbuild.results.swaprecords import Recovered


def needs_recovery(state_dir: Path) -> bool:
    """Something for :func:`recover` to do: an unfinished journal, or a finished one whose history
    line was never written."""
    return any(j.state not in FINISHED or j.history_written is False for j in journals(state_dir))


def recover(state_dir: Path, *, verify_restored: Verify | None = None) -> list[Recovered]:
    """Roll back every unfinished transaction in ``state_dir`` (caller holds the lock), and write
    the missing history line of any finished one. Returns the rolled-back transactions."""
    done = []
    journal_errors: list[str] = []
    for j in pending(state_dir):
        was = (j.state_before_rollback or j.state) if j.state == "rolling_back" else j.state
        done_ = finish_rollback(j, reason=f"recovered after an interruption at '{was}'",
                                verify_restored=verify_restored, quiet=True, recovered=True)
        restored = done_.restored
        journal_errors += restored.journal_errors
        msgs = done_.journal.revert_messages or ()
        done.append(Recovered(j.id, j.verb, was, restored, msgs))
        changed = sum(1 for m in msgs if m.startswith(("restored", "removed")))
        if restored.paths:
            ui.warn(f"recovered interrupted {j.verb} {j.id} (stopped at '{was}'), but {len(restored.paths)} "
                    "path(s) are not confirmed to be their old selves again")
        else:
            ui.warn(f"recovered interrupted {j.verb} {j.id} (stopped at '{was}'): rolled back to the "
                    f"state before it; {changed} path(s) restored")
    for j in history_missing(state_dir):
        try:
            if write_history(j)[0]:
                ui.warn(f"wrote the missing history line of {j.verb} {j.id} ({j.state})")
        except OSError as exc:
            journal_errors.append(f"history of {j.id}: {exc}")
    if journal_errors:
        raise TargetError(
            "recovery restored the files but could not record it: " + "; ".join(journal_errors),
            "free some space (or fix the disk) and run `rocmbuild recover` again; it is safe to repeat",
            details={"recovered": [r.to_json() for r in done], "journal_errors": journal_errors})
    unconfirmed = [r for r in done if r.restored.paths]
    if unconfirmed:
        lines = [f"  {p}" for r in unconfirmed for p in r.restored.paths or ()]
        kept = [r.restored.backups_kept for r in unconfirmed if r.restored.backups_kept]
        raise VerifyError(
            "recovery rolled back " + ", ".join(r.id for r in unconfirmed) + ", but these paths are not "
            "confirmed to be their old selves again:\n" + "\n".join(lines)
            + (f"\nthe backups are kept in {', '.join(kept)}" if kept else ""),
            "`rocmbuild status` shows what the environment loads now; put the files back from the backups "
            "(or reinstall the package that owns them)",
            details={"recovered": [r.to_json() for r in done]})
    return done
