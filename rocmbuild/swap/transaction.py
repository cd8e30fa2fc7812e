"""Transactions: journal, failpoints, execute / verify / commit / roll back / recover; history,
backups and drift.

The protocol (DESIGN.md, "The transaction protocol"), as implemented by :func:`execute` -- the
caller holds the target's lock (:class:`rocmbuild.state.TargetLock`) and has recovered first:

1. **journal** ``journal/<txn>.json`` (atomic: temp, fsync, rename, fsync dir) with the whole plan:
   every path, what it is now (file + identity / link + text / absent) and what it becomes.
   state ``planned``. Failpoint ``after-journal``.
2. **stage** every new file/link under its temp name beside the destination; the identity of each
   staged file (the "after") is journaled. state ``staged``. Failpoint ``after-stage``.
3. **backup**: hardlink each original into ``backups/<txn>/``. state ``backed_up``.
   Failpoint ``after-backup``.
4. **swap**: ``os.replace`` each staged name over its destination; the journal records each swapped
   path (state ``swapping``). Failpoint ``mid-swap`` fires after the first rename of several;
   ``after-swap`` after the last (state ``swapped``).
5. **verify** through the caller's callback (the workflow runs the probe in the target's Python, a
   fresh process). state ``verified``; failpoint ``after-verify``.
6. **commit**: state ``committed`` (with ``history_written: false``); failpoint ``after-commit``;
   one line appended to ``history.jsonl``, then ``history_written: true``; backups kept, older ones
   pruned by ``keep`` (see :func:`prune`; the pruning is reported).

On a failed verification, any exception, or Ctrl-C at any step: every swapped path is reverted from
its backup by rename (failpoint ``mid-rollback`` fires after the first revert of several), staged
temps are removed, the old state is re-verified through ``verify_restored``, the journal is marked
``rolled_back`` and :class:`VerifyError` (exit 4, the original exception as its ``__cause__``)
lists the failed checks. A failure before the first rename only cleans up and re-raises. The
reverts never depend on the journal: every journal write of the rollback is attempted in
``try/except`` (a full or failing disk -- ENOSPC, EIO -- is often why we are rolling back), every
path is reverted by rename from its backup whatever happens, and the backups are kept until the
journal says ``rolled_back`` (a journal left unfinished is finished by the next recovery). Backups
are also kept when a restored path is not confirmed to be its old self; the result says so.

Recovery (:func:`recover`): any journal not ``committed`` or ``rolled_back`` is rolled back --
including one killed at ``verified`` (verified but not committed): the issue asks for "exactly the
old state" after any interrupted run, and a commit the user never saw succeed is not one to keep.
Every revert step is state-based (it compares what is on disk with the journal), so recovery can
be interrupted and re-run any number of times. Recovery also writes the ``history.jsonl`` line of
a finished journal whose ``history_written`` is false (killed between the journal's final state
and the history append), once: it checks that no line with that id exists first.

Failpoints: ``ROCMBUILD_FAILPOINTS=name[,name]`` makes the process ``os._exit(137)`` at the named
step (the way a SIGKILL would: no cleanup, no ``finally``). Names: :data:`FAILPOINTS`.

Rollback model (:func:`rollback_plan`): a transaction is *active* when it is committed and its
effect is still in place (:func:`active` replays the journals: an apply becomes active; a rollback
that undid a suffix of the active list from X on leaves the list exactly as it was before X, plus
itself -- so undoing a rollback redoes what it undid, and nothing undone earlier comes back).
``rollback`` undoes the latest active ``apply`` (so repeated
rollbacks walk back through the applies); ``rollback --to TXN`` undoes every active transaction
from TXN on (rollbacks included, so ``--to <a rollback's id>`` redoes what it undid), restoring
for each path the state before the earliest one that touched it, from that transaction's backup.
The rollback is itself a journaled, verified transaction with its own backups.

Backups: ``history``'s "backup bytes" counts ``st_blocks * 512`` of backup files whose link count
is 1 -- the bytes that only the backups keep alive. A backup still linked from the target or the
artifact cache costs nothing.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rocmbuild import disk, ui
from rocmbuild.errors import InputError, RocmbuildError, TargetError, VerifyError
from rocmbuild.swap import actions as _actions
from rocmbuild.swap import state
from rocmbuild.swap.plan import PathState, Plan, Undo, observe

FAILPOINTS = ("after-journal", "after-stage", "after-backup", "mid-swap", "after-swap", "after-verify",
              "mid-rollback", "after-commit")
FINISHED = ("committed", "rolled_back")
JOURNAL_SCHEMA = 1


def failpoint(name: str) -> None:
    """Exit abruptly (status 137, like SIGKILL) when ``name`` is in ``$ROCMBUILD_FAILPOINTS``."""
    assert name in FAILPOINTS, name
    wanted = [n.strip() for n in os.environ.get("ROCMBUILD_FAILPOINTS", "").split(",")]
    if name in wanted:
        try:
            sys.stderr.write(f"rocmbuild: failpoint {name}: exiting with 137\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        os._exit(137)


def _seq(txn_id: str) -> int:
    head = txn_id.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def new_id(state_dir: Path) -> str:
    """``NNNN-YYYYmmddTHHMMSSZ``: a sequence number (ordered, short to type for ``--to``; the caller
    holds the lock, so it is unique) and the UTC time."""
    d = journal_dir(state_dir)
    last = max((_seq(p.stem) for p in d.glob("*.json")), default=0) if d.is_dir() else 0
    return f"{last + 1:04d}-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Expectation:
    """What verification must find: the library loaded from ``library`` at ``version``."""

    library: str
    version: str | None
    encoding: str
    restored: bool = False  # True: checking that an old state is back
    library_name: str = "libMIOpen"  # the stem to look for in the target process


Verify = Callable[[Expectation], Any]  # returns an object with .ok, .failures(), .to_json()


@dataclass
class Outcome:
    id: str
    verb: str
    state: str
    plan: Plan
    verdict: dict[str, Any] | None = None
    pruned: list[dict[str, Any]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "verb": self.verb, "state": self.state, "verdict": self.verdict,
                "pruned": self.pruned, "messages": self.messages,
                "files": [a.path for a in self.plan.pending]}


class Journal:
    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def load(cls, path: Path) -> "Journal":
        return cls(path, disk.read_json(path))

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def state(self) -> str:
        return self.data["state"]

    @property
    def plan(self) -> Plan:
        return Plan.from_json(self.data["plan"])

    def set(self, **kw: Any) -> None:
        self.data.update(kw)
        self.save()

    def save(self) -> None:
        self.data["updated"] = _now()
        disk.atomic_write_json(self.path, self.data)


# --------------------------------------------------------------------------------------------
# paths


def journal_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "journal"


def backup_dir(state_dir: Path, txn: str) -> Path:
    return Path(state_dir) / "backups" / txn


def journals(state_dir: Path) -> list[Journal]:
    d = journal_dir(state_dir)
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob("*.json"), key=lambda p: (_seq(p.stem), p.stem)):
        try:
            out.append(Journal.load(p))
        except (OSError, ValueError):
            continue
    return out


def pending(state_dir: Path) -> list[Journal]:
    """Journals not committed and not rolled back (crashed or running right now)."""
    return [j for j in journals(state_dir) if j.state not in FINISHED]


def _file_actions(j: Journal) -> list[tuple[_actions.FileAction, dict[str, Any]]]:
    plan = j.plan
    bdir = backup_dir(Path(plan.state_dir), j.id)
    out = []
    for step in j.data["steps"]:
        a = plan.actions[step["index"]]
        out.append((_actions.make(a, j.id, bdir, step["index"], backup_copied=bool(step.get("backup_copied"))),
                    step))
    return out


# --------------------------------------------------------------------------------------------
# execute


def _failures(verdict: Any) -> list[dict[str, Any]]:
    if verdict is None:
        return []
    fails = verdict.failures() if hasattr(verdict, "failures") else []
    out = []
    for c in fails:
        if isinstance(c, dict):
            out.append(c)
        else:
            out.append({k: getattr(c, k, None) for k in ("name", "expected", "found", "message")})
    return out


def _verdict_json(verdict: Any) -> dict[str, Any] | None:
    if verdict is None:
        return None
    if hasattr(verdict, "to_json"):
        return verdict.to_json()
    return {"ok": bool(getattr(verdict, "ok", False))}


def expectation_after(plan: Plan) -> Expectation:
    # a rollback's "after" is an earlier state: checked like a restored one (identity and version;
    # an incompatibility it always had is a warning, not a reason to undo the rollback)
    return Expectation(plan.library, plan.version_after, plan.encoding, restored=plan.verb == "rollback",
                       library_name=plan.library_name)


def expectation_before(plan: Plan) -> Expectation:
    return Expectation(plan.library_before, plan.version_before, plan.encoding, restored=True,
                       library_name=plan.library_name)


def execute(plan: Plan, *, verify: Verify | None, verify_restored: Verify | None = None,
            keep: int | None = 5, meta: dict[str, Any] | None = None, txn: str | None = None) -> Outcome:
    """Run ``plan`` as one transaction. The caller holds the lock and has recovered first."""
    sdir = Path(plan.state_dir)
    txn = txn or new_id(sdir)
    todo = [i for i, a in enumerate(plan.actions) if not a.done]
    j = Journal(journal_dir(sdir) / f"{txn}.json", {
        "schema": JOURNAL_SCHEMA, "id": txn, "verb": plan.verb, "state": "planned", "created": _now(),
        "pid": os.getpid(), "plan": plan.to_json(), "meta": meta or {},
        "steps": [{"index": i, "after": None, "swapped": False} for i in todo],
    })
    j.save()
    failpoint("after-journal")
    fas = _file_actions(j)
    swapped_any = False
    try:
        # stage
        for fa, step in fas:
            step["after"] = fa.stage().to_json()
        for d in {fa.dest.parent for fa, _ in fas}:
            if d.exists():
                disk.fsync_dir(d)
        j.set(state="staged")
        failpoint("after-stage")
        # backup
        copied = 0
        for fa, step in fas:
            copied += int(fa.backup())
            if fa.backup_copied:
                step["backup_copied"] = True  # restores from it make a new inode (see FileAction.is_before)
        if fas and backup_dir(sdir, txn).is_dir():
            disk.fsync_dir(backup_dir(sdir, txn))
        j.set(state="backed_up", backup_copies=copied)
        failpoint("after-backup")
        # swap
        j.set(state="swapping")
        for n, (fa, step) in enumerate(fas):
            fa.apply()
            swapped_any = True
            step["swapped"] = True
            j.save()
            if n == 0 and len(fas) > 1:
                failpoint("mid-swap")
        for d in plan.remove_dirs:  # rollback: dirs the undone transactions created, if now empty
            try:
                os.rmdir(d)
            except OSError:
                pass
        for d in {fa.dest.parent for fa, _ in fas}:
            if d.exists():
                disk.fsync_dir(d)
        j.set(state="swapped")
        failpoint("after-swap")
        # verify
        verdict = verify(expectation_after(plan)) if verify is not None else None
        if verdict is not None and not getattr(verdict, "ok", False):
            failures = _failures(verdict)
            raise _VerifyFailed(verdict, failures)
        j.set(state="verified", verdict=_verdict_json(verdict))
        failpoint("after-verify")
        # commit: inside the try, so a journal that cannot be written (ENOSPC, EIO) reverts the
        # change now instead of leaving it for the next command's recovery
        j.set(state="committed", committed=_now(), history_outcome="committed", history_written=False)
    except BaseException as exc:  # noqa: BLE001 - also Ctrl-C: the target must not stay half-changed
        if not swapped_any and not isinstance(exc, _VerifyFailed):
            _finish_rollback(j, reason=f"{type(exc).__name__}: {exc}", verify_restored=None, quiet=True)
            if isinstance(exc, (RocmbuildError, KeyboardInterrupt)):
                raise
            if isinstance(exc, OSError):
                raise TargetError(f"could not prepare the change: {exc}", "nothing was changed; fix the cause "
                                  "(permissions, disk space) and run again") from exc
            raise
        restored = _finish_rollback(j, reason=_reason(exc), verify_restored=verify_restored)
        raise _verify_error(j, plan, exc, restored) from (None if isinstance(exc, _VerifyFailed) else exc)
    failpoint("after-commit")
    try:
        _write_history(j)
    except OSError as exc:  # committed all the same: the next command's recovery writes the line
        ui.warn(f"{plan.verb} {txn} is committed, but its history line could not be written ({exc}); "
                "the next rocmbuild command on this target writes it")
    out = Outcome(txn, plan.verb, "committed", plan, _verdict_json(verdict))
    if keep is not None:
        out.pruned = prune(sdir, keep)
    return out


class _VerifyFailed(Exception):
    def __init__(self, verdict: Any, failures: list[dict[str, Any]]) -> None:
        super().__init__("verification failed")
        self.verdict = verdict
        self.failures = failures


def _reason(exc: BaseException) -> str:
    if isinstance(exc, _VerifyFailed):
        return "verification failed"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if isinstance(exc, RocmbuildError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


def _verify_error(j: Journal, plan: Plan, exc: BaseException, restored: dict[str, Any]) -> VerifyError:
    failures = exc.failures if isinstance(exc, _VerifyFailed) else []
    lines = [f"  - {f.get('name')}: expected {f.get('expected')}, found {f.get('found')}"
             + (f" ({f.get('message')})" if f.get("message") else "") for f in failures]
    head = (f"{plan.verb} {j.id}: verification failed; every change was rolled back"
            if isinstance(exc, _VerifyFailed)
            else f"{plan.verb} {j.id}: {_reason(exc)}; every change was rolled back")
    back = ("the old state verifies again" if restored.get("ok")
            else "WARNING: the restored old state did not verify: " + "; ".join(
                [f"{f.get('name')}: {f.get('found')}" for f in restored.get("failures", [])]
                + list(restored.get("paths", []))))
    extra = [f"warning: the restored old state: {w.get('name')}: {w.get('found')}"
             for w in restored.get("warnings", [])]
    if restored.get("backups_kept"):
        extra.append(f"the backups are kept in {restored['backups_kept']}")
    if restored.get("journal_errors"):
        extra.append("the journal could not be updated (" + "; ".join(restored["journal_errors"])
                     + "): the next rocmbuild command (or `rocmbuild recover`) finishes it")
    return VerifyError(
        "\n".join([head, *lines, back, *extra]),
        "read the failed checks above; `rocmbuild status` shows what the environment loads now",
        details={"txn": j.id, "failures": failures, "restored": restored,
                 "verdict": _verdict_json(getattr(exc, "verdict", None))},
    )


def _finish_rollback(j: Journal, *, reason: str, verify_restored: Verify | None, quiet: bool = False,
                     recovered: bool = False) -> dict[str, Any]:
    """Revert every path of ``j`` to its before state, clean up, mark rolled back, write history.

    The reverts never depend on the journal: each journal write is attempted and a failure
    (ENOSPC, EIO: often the very reason for this rollback) is recorded in the result
    (``journal_errors``), never raised from here; every path is reverted whatever happens. The
    backups are removed only when every path is confirmed to be its old self *and* the journal
    says ``rolled_back``; else they are kept (``backups_kept``) for a later recovery or by hand."""
    was = j.state
    journal_errors: list[str] = []

    def record(**kw: Any) -> bool:
        try:
            j.set(**kw)
            return True
        except OSError as exc:
            journal_errors.append(f"{type(exc).__name__}: {exc}")
            return False

    record(state="rolling_back", reason=reason, state_before_rollback=j.data.get("state_before_rollback", was))
    fas = _file_actions(j)
    messages = []
    revert_errors: list[BaseException] = []
    n = 0
    for fa, step in reversed(fas):
        after = PathState.from_json(step.get("after")) if step.get("after") else None
        try:
            msg = fa.revert(after)
        except OSError as exc:  # e.g. a missing backup: still revert every other path
            revert_errors.append(exc)
            continue
        if msg:
            messages.append(msg)
            n += 1
            if n == 1 and len(fas) > 1:
                failpoint("mid-rollback")
    for fa, _ in fas:
        fa.discard()
    for fa, _ in fas:
        fa.remove_created_dirs()
    for d in {fa.dest.parent for fa, _ in fas}:
        if d.exists():
            try:
                disk.fsync_dir(d)
            except OSError as exc:
                journal_errors.append(f"fsync {d}: {exc}")
    if revert_errors:
        raise revert_errors[0]  # the journal stays unfinished: the next recovery retries
    # confirm by identity: every path is its before state again (a restore from a copied backup
    # is a new inode: then size + mtime_ns + mode, see FileAction.is_before)
    wrong = []
    for fa, _ in fas:
        now = observe(fa.dest)
        if not fa.is_before(now):
            wrong.append(f"{fa.dest}: expected {fa.before.describe()}, found {now.describe()}")
    restored: dict[str, Any] = {"ok": not wrong, "paths": wrong, "failures": []}
    if verify_restored is not None and not wrong:
        try:
            v = verify_restored(expectation_before(j.plan))
            restored = {"ok": bool(getattr(v, "ok", False)), "failures": _failures(v), "verdict": _verdict_json(v)}
            warnings = (restored["verdict"] or {}).get("warnings") if isinstance(restored["verdict"], dict) else None
            if warnings:
                restored["warnings"] = warnings
        except Exception as exc:  # noqa: BLE001 - report, never mask the rollback
            restored = {"ok": False, "failures": [{"name": "probe", "found": str(exc)}]}
    bdir = backup_dir(Path(j.plan.state_dir), j.id)
    if wrong and bdir.is_dir():
        restored["backups_kept"] = str(bdir)
        msg = (f"the backups of {j.id} are kept in {bdir}: {len(wrong)} path(s) were not confirmed to be "
               "their old selves again")
        messages.append(msg)
        if quiet:
            ui.warn(msg)
    needs_history = was != "planned" or recovered
    outcome = (f"recovered: rolled back (interrupted at '{was}')" if recovered else f"rolled back: {reason}")
    marked = record(state="rolled_back", rolled_back=_now(), restored=restored, revert_messages=messages,
                    history_outcome=outcome if needs_history else None, history_written=not needs_history)
    if marked and not wrong:
        shutil.rmtree(bdir, ignore_errors=True)
    elif not marked and bdir.is_dir():
        restored["backups_kept"] = str(bdir)
    if marked and needs_history:
        try:
            _write_history(j)
        except OSError as exc:
            journal_errors.append(f"history: {type(exc).__name__}: {exc}")
    if journal_errors:
        restored["journal_errors"] = journal_errors
    if not quiet:
        for m in messages:
            ui.info(m)
    return restored


def _write_history(j: Journal) -> bool:
    """Append ``j``'s history line unless one with its id is there already; then journal that it
    was written. Returns True when a line was appended."""
    sdir = Path(j.plan.state_dir)
    appended = False
    if not any(r.get("id") == j.id for r in state.read_history(sdir)):
        state.append_history(sdir, history_record(j, outcome=j.data.get("history_outcome") or j.state))
        appended = True
    j.set(history_written=True)
    return appended


def _history_missing(state_dir: Path) -> list[Journal]:
    return [j for j in journals(state_dir) if j.state in FINISHED and j.data.get("history_written") is False]


def needs_recovery(state_dir: Path) -> bool:
    """Something for :func:`recover` to do: an unfinished journal, or a finished one whose history
    line was never written."""
    return any(j.state not in FINISHED or j.data.get("history_written") is False for j in journals(state_dir))


def recover(state_dir: Path, *, verify_restored: Verify | None = None) -> list[dict[str, Any]]:
    """Roll back every unfinished transaction in ``state_dir`` (caller holds the lock), and write
    the missing history line of any finished one. Returns the rolled-back transactions."""
    done = []
    journal_errors: list[str] = []
    for j in pending(state_dir):
        was = j.data.get("state_before_rollback") if j.state == "rolling_back" else j.state
        restored = _finish_rollback(j, reason=f"recovered after an interruption at '{was}'",
                                    verify_restored=verify_restored, quiet=True, recovered=True)
        journal_errors += restored.get("journal_errors", [])
        done.append({"id": j.id, "verb": j.data["verb"], "interrupted_at": was, "restored": restored,
                     "actions": j.data.get("revert_messages", [])})
        ui.warn(f"recovered interrupted {j.data['verb']} {j.id} (stopped at '{was}'): rolled back to the "
                f"state before it" + (f"; {len(j.data.get('revert_messages', []))} path(s) restored"))
    for j in _history_missing(state_dir):
        try:
            if _write_history(j):
                ui.warn(f"wrote the missing history line of {j.data['verb']} {j.id} ({j.state})")
        except OSError as exc:
            journal_errors.append(f"history of {j.id}: {exc}")
    if journal_errors:
        raise TargetError(
            "recovery restored the files but could not record it: " + "; ".join(journal_errors),
            "free some space (or fix the disk) and run `rocmbuild recover` again; it is safe to repeat",
            details={"recovered": done, "journal_errors": journal_errors})
    return done


# --------------------------------------------------------------------------------------------
# history, backups, pruning


def history_record(j: Journal, *, outcome: str) -> dict[str, Any]:
    plan = j.plan
    meta = j.data.get("meta", {})
    return {
        "id": j.id, "time": j.data.get("created"), "verb": j.data["verb"], "recipe": plan.recipe,
        "commit": plan.commit, "artifact": plan.artifact, "version_before": plan.version_before,
        "version_after": plan.version_after, "files": [plan.actions[s["index"]].path for s in j.data["steps"]],
        "outcome": outcome, "undoes": list(plan.undoes),
        "backup_bytes": _dir_unique_bytes(backup_dir(Path(plan.state_dir), j.id)), **meta,
    }


def _dir_unique_bytes(d: Path) -> int:
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
    return _dir_unique_bytes(Path(state_dir) / "backups")


def _needed_identities(state_dir: Path) -> set[tuple[int, int]]:
    """(device, inode) of every file a rollback may still have to bring back:

    * for every path rocmbuild ever touched here, the file it held before rocmbuild's first
      transaction on it (the stock library a user wants back: ``rollback --to`` the oldest apply);
    * the files the latest apply in effect replaced (what a plain ``rollback`` restores).

    Identity, not transaction ids: after a rollback is itself undone ("redo"), the original inode
    lives on in the redo's backup, not in the backup of the apply that first replaced it."""
    needed: set[tuple[int, int]] = set()
    seen: set[str] = set()
    for j in journals(state_dir):
        if j.state not in FINISHED:
            continue
        plan = j.plan
        for step in j.data["steps"]:
            a = plan.actions[step["index"]]
            if a.path not in seen:
                seen.add(a.path)
                if a.before.kind == "file":
                    needed.add((a.before.dev, a.before.inode))
    applies = [j for j in active(state_dir) if j.data["verb"] == "apply"]
    if applies:
        j = applies[-1]
        for step in j.data["steps"]:
            a = j.plan.actions[step["index"]]
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
    """The transactions whose backups :func:`prune` never removes: the newest active transaction
    (what was just done), every transaction whose backup was *copied* (another filesystem: its
    identity cannot be matched by inode, so it is kept), and, for each file of
    :func:`_needed_identities` (the original pre-rocmbuild files, and what a plain ``rollback``
    restores), the newest transaction whose backups hold it (hardlinks of one inode: one is
    enough, and :func:`rollback_plan` finds it through :func:`find_backup`)."""
    act = active(state_dir)
    out = {act[-1].id} if act else set()
    needed = _needed_identities(state_dir)
    holder: dict[tuple[int, int], str] = {}  # identity -> the newest transaction whose backups hold it
    for j in journals(state_dir):  # oldest first
        d = backup_dir(state_dir, j.id)
        if not d.is_dir():
            continue
        if any(step.get("backup_copied") for step in j.data["steps"]):
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


def prune(state_dir: Path, keep: int) -> list[dict[str, Any]]:
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
    with_backups = [j for j in journals(state_dir)
                    if j.state in FINISHED and backup_dir(state_dir, j.id).is_dir()]
    excess = len(with_backups) - keep
    if excess <= 0:
        return []
    protected = protected_backups(state_dir)
    in_effect = {j.id for j in active(state_dir)}
    candidates = sorted((j for j in with_backups if j.id not in protected),
                        key=lambda j: (j.id in in_effect, _seq(j.id), j.id))
    out = []
    for j in candidates[:excess]:
        freed = _dir_unique_bytes(backup_dir(state_dir, j.id))
        shutil.rmtree(backup_dir(state_dir, j.id), ignore_errors=True)
        j.set(backups_pruned=_now())
        out.append({"id": j.id, "freed_bytes": freed})
        ui.warn(f"pruned the backups of {j.id} (--keep {keep}; {freed} bytes freed): it can no longer be rolled back")
    return out


# --------------------------------------------------------------------------------------------
# active transactions, drift, rollback


def active(state_dir: Path) -> list[Journal]:
    """Committed transactions whose effect is in place, oldest first (a replay of the journals).

    An apply is appended. A rollback that undid a *suffix* of the active list, from X on
    (``rollback --to X``), leaves the list as it was just before X was committed, plus itself:
    undoing a rollback therefore redoes what that rollback undid, and nothing else comes back.
    A rollback that undid something else (plain ``rollback``: the latest apply, with later
    rollbacks still in effect) removes what it undid and appends itself."""
    act: list[Journal] = []
    before: dict[str, list[Journal]] = {}  # id -> the active list just before it was committed
    for j in journals(state_dir):
        if j.state != "committed":
            continue
        before[j.id] = list(act)
        undoes = set(j.plan.undoes)
        if undoes:
            ids = [x.id for x in act]
            idx = min((ids.index(u) for u in undoes if u in ids), default=None)
            if idx is not None and set(ids[idx:]) == undoes and ids[idx] in before:
                act = list(before[ids[idx]])
            else:
                act = [x for x in act if x.id not in undoes]
        act.append(j)
    return act


def _latest_after(act: list[Journal]) -> dict[str, tuple[Journal, PathState]]:
    """For every path touched by an active transaction: the state the latest one left there."""
    out: dict[str, tuple[Journal, PathState]] = {}
    for j in act:
        for step in j.data["steps"]:
            a = j.plan.actions[step["index"]]
            after = PathState.from_json(step.get("after")) if step.get("after") else PathState("absent")
            out[a.path] = (j, after)
    return out


def _latest_source(act: list[Journal]) -> dict[str, str | None]:
    """For every path touched by an active transaction: the file whose bytes it placed there."""
    out: dict[str, str | None] = {}
    for j in act:
        for step in j.data["steps"]:
            a = j.plan.actions[step["index"]]
            out[a.path] = a.source
    return out


def drift(state_dir: Path) -> list[dict[str, Any]]:
    """Paths rocmbuild placed (active transactions) that no longer are what it left there (a file
    restored from a copied backup counts as unchanged when its bytes are the same)."""
    from rocmbuild.swap.plan import FsObserver, same_or_same_bytes

    out = []
    act = active(state_dir)
    sources = _latest_source(act)
    for path, (j, after) in sorted(_latest_after(act).items()):
        now = observe(path)
        if not same_or_same_bytes(now, after, path, sources.get(path), FsObserver()):
            out.append({"path": path, "txn": j.id, "expected": after.describe(), "found": now.describe()})
    return out


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


def rollback_plan(state_dir: Path, *, to: str | None = None, force: bool = False) -> Plan:
    from rocmbuild.swap import plan as _plan

    act = active(state_dir)
    if to is None:
        applies = [j for j in act if j.data["verb"] == "apply"]
        if not applies:
            raise TargetError("nothing to roll back: no committed apply is in effect on this target",
                              "`rocmbuild history` lists the transactions")
        undo = [applies[-1]]
    else:
        everything = journals(state_dir)
        full = resolve_txn([j.id for j in everything], to)
        ids = [j.id for j in act]
        if full not in ids:
            known = next(j for j in everything if j.id == full)
            why = known.state + (", undone since" if known.state == "committed" else "")
            raise TargetError(f"cannot roll back to {full}: it is not in effect ({why})",
                              "`rocmbuild history` marks the transactions in effect; pick one of those",
                              details={"txn": full, "state": known.state, "in_effect": ids})
        undo = act[ids.index(full):]
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
            nominal = _actions.make(a, j.id, backup_dir(state_dir, j.id), step["index"]).backup_path
            if not nominal.exists() and not step.get("backup_copied"):
                nominal = find_backup(state_dir, a.before) or nominal  # pruned, but held elsewhere
            backup = str(nominal)
        undos.append(Undo(path, latest[path][1], a.before, backup, j.id, copied=bool(step.get("backup_copied")),
                          expected_source=sources.get(path)))
        remove_dirs.extend(a.create_dirs)
    first, last = undo[0].plan, undo[-1].plan
    remove_dirs = sorted(set(remove_dirs), key=lambda d: -len(d))
    p, _drift = _plan.make_rollback(
        undos, prefix=first.prefix, python=first.python, libdir=first.libdir, layout=first.layout,
        outside=first.outside, state_dir=str(state_dir), library=first.library_before,
        library_before=last.library, version_before=last.version_after, version_after=first.version_before,
        encoding=first.encoding, library_name=first.library_name, recipe=first.recipe, commit=first.commit,
        undoes=tuple(j.id for j in undo), remove_dirs=tuple(remove_dirs), force=force,
    )
    return p
