"""What ``-q``/``--quiet`` prints on stdout: one line per result, nothing else.

``brief(result)`` picks the line(s) by the result's type, like :func:`rocmbuild.cli.render.text`
does for the full text. Progress, notes and details are off with ``-q`` (stderr: only warnings
and errors); what is left is what a script wants to read or log.

Decisions (per verb; docs/progress.md, "quiet", in words):
* a verb with one outcome prints one line (``apply``, ``rollback``, ``build``, ``plan``,
  ``status``, ``verify``, ``export``, ``lock``, ``recover``, ``cache verify``, ``cache gc``,
  ``push``, ``demo``): the line a person would grep for, e.g.
  ``applied 0003: miopen-demo 3.5.0 -> 3.5.1 in /env``;
* ``doctor -q`` prints only what fails, one line per failed check, and nothing when all is ok
  (its exit code says the rest); ``cache verify -q`` likewise prints its one summary line only;
* a listing prints one line per item and no header or footer (``recipes``: names; ``cache list``:
  key, recipe, version; ``history``: one transaction per line, newest first: id, kind, time, recipe, versions, state; ``log --list``: paths);
* a verb whose output *is* the data (``show``, ``completion``, ``config list``, ``key generate``,
  ``log``, ``cache dir``) prints it as without ``-q``: there is nothing else to drop.
A renderer returns ``None`` to fall back to the full text.
"""

from __future__ import annotations

from functools import singledispatch

from rocmbuild.cli.statetext import history_state
from rocmbuild.names import safe_text
from rocmbuild.results import (
    ApplyResult,
    BuildPlan,
    BuildResult,
    CacheGcResult,
    CacheListResult,
    CacheRmResult,
    CacheVerifyResult,
    DemoResult,
    DoctorResult,
    DryRunResult,
    ExportResult,
    HistoryResult,
    LockResult,
    PushResult,
    RecipesResult,
    RecoverResult,
    RemoteListResult,
    RollbackResult,
    StatusResult,
    VerifyResult,
)


def _lines(items) -> str:
    return "\n".join(safe_text(str(i)) for i in items)


@singledispatch
def brief(result: object) -> str | None:  # a VerbResult
    """The quiet text of ``result`` (None: the full text is already what ``-q`` shows)."""
    return None


@brief.register
def _recipes(r: RecipesResult) -> str:
    return _lines(e.name for e in r.recipes)


@brief.register
def _plan(p: BuildPlan) -> str:
    state = "cached" if p.cached else f"would substitute from {p.substitute}" if p.substitute else "would build"
    return _lines([f"{p.recipe} {(p.cache_key or '-')[:16]} {state}"])


@brief.register
def _build(r: BuildResult) -> str:
    m = r.artifact.manifest
    verb = "cached" if r.artifact.cached else "substituted" if r.substituted else "built"
    return _lines([f"{verb} {m.recipe} {m.version or '?'} {m.key[:16]} {r.artifact.path}"])


@brief.register
def _status(r: StatusResult) -> str:
    return _lines([r.summary])


@brief.register
def _verify(r: VerifyResult) -> str:
    v = r.verdict
    return _lines([f"{'verified' if v.ok else 'FAILED'} {r.target.prefix}" + (
        "" if v.ok else ": " + ", ".join(c.shown_name for c in v.failures()))])


@brief.register
def _doctor(r: DoctorResult) -> str:
    return _lines([*(f"[fail] {c.name}: {c.detail}" + (f" (fix: {c.fix})" if c.fix else "") for c in r.failed),
                   *([f"install what is missing: {r.install}"] if r.install else [])])


@brief.register
def _cache_verify(r: CacheVerifyResult) -> str:
    bad = [e for e in r.entries if e.status != "ok"]
    lines = [f"quarantined {e.key[:16]} {e.recipe or '?'} -> {e.quarantined_to}" for e in bad]
    return _lines(lines or [f"{len(r.entries)} artifact(s) ok"])


@brief.register
def _cache_list(r: CacheListResult) -> str:
    return _lines(f"{a.info.key[:16]} {a.info.recipe or '?'} {a.info.version or '?'} {a.info.path}" for a in r.artifacts)


@brief.register
def _cache_gc(r: CacheGcResult) -> str:
    verb = "would remove" if r.dry_run else "removed"
    return _lines([f"{verb} {len(r.removed)} item(s), {sum(c.bytes for c in r.removed)} bytes"])


@brief.register
def _cache_rm(r: CacheRmResult) -> str:
    return _lines(f"removed {c.key[:16] if c.key else ''} {c.path}" for c in r.removed)


@brief.register
def _export(r: ExportResult) -> str:
    return _lines([r.bundle.file])


@brief.register
def _lock(r: LockResult) -> str:
    return _lines([r.lock_file])


@brief.register
def _apply(r: ApplyResult) -> str:
    p = r.plan
    if r.already_applied:
        return _lines([f"already applied: {p.recipe} {p.version_after or '?'} in {p.prefix}"])
    return _lines([f"applied {r.txn}: {p.recipe} {p.version_before or '?'} -> {p.version_after or '?'} in {p.prefix}"])


@brief.register
def _dry_run(d: DryRunResult) -> str:
    if d.target_error is not None:
        return _lines(["dry run: the apply would be refused"])
    if d.target_plan is None:
        return _lines(["dry run: nothing would change" + (f" ({d.target_note})" if d.target_note else "")])
    plan = d.target_plan.plan
    if plan.already_applied:
        return _lines([f"dry run: already applied: {plan.recipe} {plan.version_after or '?'} in {plan.prefix}"])
    return _lines([f"dry run: would apply {plan.recipe} {plan.version_before or '?'} -> {plan.version_after or '?'} "
                   f"in {plan.prefix}"])


@brief.register
def _rollback(r: RollbackResult) -> str:
    p = r.plan
    if p is None:
        return _lines([f"nothing to roll back in {r.prefix}"])
    head = (f"redid {', '.join(r.reapplies) or '-'} (undid the rollback {p.redoes}) as {r.txn}" if p.redoes
            else f"rolled back {', '.join(r.undoes)} as {r.txn}")  # a redo reads as a redo, as in the text
    return _lines([f"{head}: {p.version_before or '?'} -> {p.version_after or '?'} in {p.prefix}"])


@brief.register
def _history(h: HistoryResult) -> str:
    """id, kind (a redo is a redo, not the rollback its journal records), time, recipe, versions,
    then its state (in effect, undone by N, done, ...), as the table says it."""
    return _lines(" ".join([t.line.id, t.kind or t.line.verb, t.line.time or "?", t.line.recipe or "-",
                            f"{t.line.version_before or '?'} -> {t.line.version_after or '?'}",
                            f"({'; '.join(history_state(t))})"])
                  for t in reversed(h.transactions))


@brief.register
def _recover(r: RecoverResult) -> str:
    if not r.recovered:
        return ""
    return _lines(f"recovered {e.verb} {e.id} in {r.prefix}" for e in r.recovered)


@brief.register
def _demo(r: DemoResult) -> str:
    return _lines(["demo passed" if r.error is None else f"demo FAILED at {r.failed.name if r.failed else '?'}"])


@brief.register
def _push(r: PushResult) -> str:
    return _lines([f"{'pushed' if r.uploaded else 'already there'} {r.recipe} {r.version or '?'} {r.key[:16]} {r.url}"])


@brief.register
def _remote_list(r: RemoteListResult) -> str:
    return _lines(f"{a.key[:16]} {a.recipe or '?'} {a.version or '?'}" for a in r.artifacts)
