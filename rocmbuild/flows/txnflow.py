"""Transactions on a target, orchestrated: apply an artifact, rollback, history, recover, and
what ``status`` reports about rocmbuild's changes.

Decisions (see also rocmbuild.transaction's docstring):
* Order of apply: resolve the target -> recover unfinished journals (under the lock) -> probe
  (discover) -> refuse an incompatible artifact -> plan -> preflight (artifact intact, lib dir
  writable, free space) -> already applied? -> lock -> recover again, re-plan -> transaction.
* "Already applied" writes nothing at all in the target: no journal, no backup, no history line,
  and not even the lock file's pid -- it takes a *shared* flock on the existing lock file opened
  read-only, which still excludes a concurrent apply (that one would get exit 5).
* ``history`` only reads (it lists unfinished journals instead of recovering them); every verb
  that changes a target (apply, rollback, recover) recovers first.
* ``--allow-outside-prefix``: the state lives in $ROCMBUILD_HOME/targets/<hash>/ with a
  target.json naming the prefix, so history/recover/rollback given only --env find it again.
"""

from __future__ import annotations

import os
import shutil as _shutil
import tempfile as _tempfile
from pathlib import Path
from typing import Any

from rocmbuild import ui
from rocmbuild.build.artifact import Artifact
from rocmbuild.disk import nearest_existing
from rocmbuild.errors import InputError, TargetError, VerifyError
from rocmbuild import recipe as _recipe
from rocmbuild.swap import plan as _plan
from rocmbuild.swap import state
from rocmbuild.swap import transaction as _txn


def _verifier(python: Path, *, timeout: float, smoke: bool):
    """The verify callback: the probe in the target's Python (a fresh process), judged against the
    expectation (which file must be loaded, which version). The smoke test runs only for the new
    state; checking that an old state is back (``Expectation.restored``: a rollback, or the restore
    after a failed apply) needs no GPU test, and requires identity and version only: a failed
    compatibility check is reported as a warning (ui.warn, and ``verdict.warnings`` in the result
    JSON: the JSON contract in docs/json.md fixes the top-level keys)."""
    from rocmbuild.target import probe

    def verify(exp: "_txn.Expectation"):
        want_smoke = smoke and not exp.restored
        report = probe.run_probe(python, timeout=timeout, smoke=want_smoke)
        verdict = probe.judge(report, library=exp.library_name, encoding=exp.encoding, expect=exp.version,
                              expected_file=Path(exp.library), smoke=want_smoke)
        if not exp.restored:
            return verdict
        relaxed = _RestoredVerdict(verdict)
        for c in relaxed.warnings:
            ui.warn(f"the restored state fails the {c.name} check (it did before rocmbuild changed it, too): "
                    f"{c.found}" + (f"\n{c.message}" if c.message else ""))
        return relaxed

    return verify


class _RestoredVerdict:
    """A verdict on an *earlier* state put back (a rollback, or the restore after a failed apply):
    only what proves it is that state counts -- torch imports, one library loaded, it is the file
    restored (identity), at the version it had. A failed runtime/compile-time compatibility check
    is a warning: that state had it before rocmbuild ever changed anything (e.g. a stock 3.6 under
    a torch compiled against 3.5), and refusing to go back there would leave no way back at all."""

    WARN_ONLY = ("compatibility",)

    def __init__(self, verdict) -> None:
        self.verdict = verdict
        self.checks = verdict.checks
        self.report = verdict.report
        self.warnings = tuple(c for c in verdict.checks if not c.ok and c.name in self.WARN_ONLY)
        self.ok = all(c.ok for c in verdict.checks if c.name not in self.WARN_ONLY)

    def failures(self):
        return tuple(c for c in self.checks if not c.ok and c.name not in self.WARN_ONLY)

    def to_json(self) -> dict[str, Any]:
        return {**self.verdict.to_json(), "ok": self.ok, "failures": [c.name for c in self.failures()],
                "warnings": [c.to_json() for c in self.warnings]}

    def render(self) -> str:
        return self.verdict.render()


def _warnings(verdict: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list((verdict or {}).get("warnings") or [])


def _recover_prefix(prefix: Path, *, wait: bool, verify_restored=None) -> list[dict[str, Any]]:
    """Recover every unfinished journal of the target (each state dir under its lock)."""
    out: list[dict[str, Any]] = []
    for d in state.state_dirs_for(prefix):
        if _txn.needs_recovery(d):
            with state.TargetLock(d, wait=wait):
                out += _txn.recover(d, verify_restored=verify_restored)
    return out


def _writable(d: Path) -> str | None:
    """None when ``d`` (or its nearest existing ancestor) accepts new files; else why not."""
    d = nearest_existing(d)
    if not os.access(d, os.W_OK | os.X_OK):
        return f"{d} is not writable by this user"
    try:
        fd, tmp = _tempfile.mkstemp(prefix=".rocmbuild-write-test-", dir=d)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return f"{d} is not writable: {exc.strerror or exc}"
    return None


def preflight(the_plan: "_plan.Plan", artifact: Artifact) -> dict[str, Any]:
    """Refuse, before anything is changed, what cannot succeed: a changed/incomplete artifact
    (InputError), a lib dir that is not writable, too little free space for the bytes that must be
    copied (hardlinks cost nothing) (TargetError, exit 2)."""
    bad = artifact.intact()
    if bad:
        raise InputError(
            f"the artifact {artifact.path} is not intact: " + ", ".join(bad[:10]) + (" ..." if len(bad) > 10 else ""),
            "a cached file is missing or was changed; remove that artifact directory and build again",
            details={"artifact": str(artifact.path), "changed": bad},
        )
    if the_plan.already_applied:
        return {"copy_bytes": 0}  # nothing will be written: do not even test-write (the no-op writes nothing)
    dirs = sorted({Path(a.path).parent for a in the_plan.pending} | {Path(the_plan.state_dir)})
    for d in dirs:
        why = _writable(d)
        if why:
            raise TargetError(f"cannot change the target: {why}; nothing was changed",
                              "run as a user who owns the environment (or fix its permissions)",
                              details={"dir": str(d)})
    need: dict[int, int] = {}
    where: dict[int, Path] = {}
    sdev = os.stat(nearest_existing(Path(the_plan.state_dir))).st_dev
    for a in the_plan.pending:
        ddir = nearest_existing(Path(a.path).parent)
        ddev = os.stat(ddir).st_dev
        if a.source and os.stat(a.source).st_dev != ddev:
            need[ddev] = need.get(ddev, 0) + a.size
            where[ddev] = ddir
        if a.before.kind == "file" and a.before.dev != sdev:
            need[sdev] = need.get(sdev, 0) + a.before.size
            where[sdev] = nearest_existing(Path(the_plan.state_dir))
    for dev, n in need.items():
        free = _shutil.disk_usage(where[dev]).free
        if n + (1 << 20) > free:
            raise TargetError(
                f"not enough free space in {where[dev]}: {n} bytes must be copied (different filesystem "
                f"than the artifact cache), {free} free; nothing was changed",
                "free some space, or put $ROCMBUILD_HOME on the target's filesystem so files are hardlinked",
                details={"needed": n, "free": free, "dir": str(where[dev])},
            )
    return {"copy_bytes": sum(need.values())}


def _compat_refusal(check, report, encoding: str) -> InputError:
    hint = "build a MIOpen whose major.minor matches the torch's compile-time version"
    cv = report.compile_version
    if cv:
        try:
            names = [n for n, _ in _recipe.available(()) if n.startswith(f"miopen-{cv[0]}.{cv[1]}")]
        except Exception:  # noqa: BLE001 - a broken recipe dir must not hide the refusal
            names = []
        want = names[0] if names else f"miopen-{cv[0]}.{cv[1]}.{cv[2]}"
        hint = (f"this torch was compiled against MIOpen {cv[0]}.{cv[1]}: use the recipe {want} "
                f"(`rocmbuild apply {want}`), or install a torch built against the artifact's major.minor")
    return InputError(
        f"refusing to apply: the artifact cannot load under this torch ({check.found}); nothing was changed\n"
        f"{check.message}",
        hint, details={"check": check.to_json() if hasattr(check, "to_json") else str(check)},
    )


def _result(the_plan: "_plan.Plan", **kw: Any) -> dict[str, Any]:
    return {"target": {"prefix": the_plan.prefix, "python": the_plan.python, "layout": the_plan.layout,
                       "libdir": the_plan.libdir, "state_dir": the_plan.state_dir},
            "plan": the_plan.to_json(), **kw}


def _discover_and_plan(artifact: Artifact, *, env: str | None, python: str | None, probe_timeout: float,
                       allow_outside_prefix: bool, expect: str | None, target_hint=None):
    """Probe the target (or take ``target_hint``, a Target probed moments ago in this run), refuse
    an artifact that cannot load under its torch, plan the swap (pure)."""
    from rocmbuild.target import probe, target

    m = artifact.manifest
    stems = [lib.name for lib in m.libraries]
    t = target_hint or target.discover(env, python, timeout=probe_timeout)
    if m.version and m.encoding:
        check = probe.compatible(m.version, t.report, m.encoding)
        if not check.ok:
            raise _compat_refusal(check, t.report, m.encoding)
    else:
        ui.warn("the artifact records no version: compatibility is only checked after the swap")
    rt = t.report.runtime(m.encoding)
    facts = _plan.facts_from(t, stems, str(rt) if rt is not None else None)
    return t, facts, _plan.make(artifact, facts, allow_outside_prefix=allow_outside_prefix, expect=expect)


def plan_artifact(artifact: Artifact, *, env: str | None = None, python: str | None = None,
                  allow_outside_prefix: bool = False, probe_timeout: float = 300.0,
                  expect: str | None = None) -> dict[str, Any]:
    """The file actions ``apply`` would take for this artifact on this target; changes nothing
    (no lock, no recovery, no journal)."""
    _t, _facts, the_plan = _discover_and_plan(artifact, env=env, python=python, probe_timeout=probe_timeout,
                                              allow_outside_prefix=allow_outside_prefix, expect=expect)
    return {"plan": the_plan.to_json(), "text": the_plan.render(), "already_applied": the_plan.already_applied}


def apply_artifact(artifact: Artifact, *, env: str | None = None, python: str | None = None,
                   expect: str | None = None, smoke: bool = False, wait: bool = False, keep: int = 5,
                   allow_outside_prefix: bool = False, probe_timeout: float = 300.0,
                   target_hint=None) -> dict[str, Any]:
    """Place an already-built artifact into the target, transactionally. See the notes above.

    "Already applied" is the provisioning fast path (a script runs apply on every boot): one
    probe of the target, no file written. The probe that found the library in place is the
    verification (its maps identity is compared with the destination's inode at judging time,
    under the shared lock); only ``--smoke`` costs a second probe."""
    from rocmbuild.target import probe, target

    m = artifact.manifest
    prefix, py = target.resolve(env, python)
    recovered = _recover_prefix(prefix, wait=wait)
    stems = [lib.name for lib in m.libraries]
    library = stems[0] if stems else "libMIOpen"

    def discover_and_plan(hint=None):
        return _discover_and_plan(artifact, env=env, python=python, probe_timeout=probe_timeout,
                                  allow_outside_prefix=allow_outside_prefix, expect=expect, target_hint=hint)

    t, facts, the_plan = discover_and_plan(None if recovered else target_hint)
    pre = preflight(the_plan, artifact)
    verify = _verifier(py, timeout=probe_timeout, smoke=smoke)
    sdir = Path(the_plan.state_dir)

    def already(lock_shared: bool) -> dict[str, Any]:
        exp = _txn.expectation_after(the_plan)
        if smoke:
            verdict = verify(exp)
        else:
            verdict = probe.judge(t.report, library=exp.library_name, encoding=exp.encoding, expect=exp.version,
                                  expected_file=Path(exp.library))
        if not verdict.ok:
            fails = _txn._failures(verdict)
            raise VerifyError(
                "the artifact is already in place, but verification fails:\n" + "\n".join(
                    f"  - {f['name']}: expected {f['expected']}, found {f['found']}" for f in fails),
                "nothing was changed; `rocmbuild status` shows what the environment loads",
                details={"failures": fails, "verdict": verdict.to_json()})
        ui.info(f"already applied: {m.recipe} {m.version or ''} is in place in {the_plan.prefix}; nothing changed")
        return _result(the_plan, already_applied=True, txn=None, verdict=verdict.to_json(), recovered=recovered,
                       artifact=str(artifact.path), pruned=[])

    if the_plan.already_applied:
        with state.TargetLock(sdir, wait=wait, shared=True):
            if _plan.make(artifact, facts, allow_outside_prefix=allow_outside_prefix, expect=expect).already_applied:
                return already(True)
        # changed between the probe and the lock: take the full path below
    if the_plan.outside:
        sdir.mkdir(parents=True, exist_ok=True)
        state.register_outside_target(sdir, Path(the_plan.prefix), Path(the_plan.libdir))
    with state.TargetLock(sdir, wait=wait):
        if _txn.needs_recovery(sdir):
            recovered += _txn.recover(sdir, verify_restored=verify)
        lib_now = t.library(probe.probe_kind(library))
        if recovered or (lib_now is not None and not lib_now.same_file(lib_now.path)):
            t, facts, the_plan = discover_and_plan()  # the target changed while we waited
        else:
            the_plan = _plan.make(artifact, facts, allow_outside_prefix=allow_outside_prefix, expect=expect)
        if the_plan.already_applied:
            return already(False)
        ui.info(f"applying {m.recipe} {m.version or ''} to {the_plan.prefix} ({len(the_plan.pending)} path(s))")
        out = _txn.execute(the_plan, verify=verify, verify_restored=verify, keep=keep,
                           meta={"python": str(py), "artifact_path": str(artifact.path)})
    ui.info(f"applied {out.id}: {the_plan.library} verified ({m.version or '?'}); `rocmbuild rollback` undoes it")
    return _result(the_plan, already_applied=False, txn=out.id, verdict=out.verdict, pruned=out.pruned,
                   recovered=recovered, artifact=str(artifact.path), copy_bytes=pre["copy_bytes"])


def _pick_state_dir(prefix: Path) -> Path:
    dirs = [d for d in state.state_dirs_for(prefix) if _txn.active(d)]
    if not dirs:
        raise TargetError(f"nothing to roll back: rocmbuild has no committed transaction in effect on {prefix}",
                          "`rocmbuild history` lists what was done to this target")
    return max(dirs, key=lambda d: _txn.active(d)[-1].id)


def _state_dir_of(prefix: Path, to: str) -> tuple[Path, str]:
    """The state dir holding the transaction ``to`` names (exact id, or a prefix unique among every
    journal of the target, in all its state dirs) and its full id; InputError (exit 2) for an empty,
    ambiguous or unknown one."""
    where: dict[str, Path] = {}
    for d in state.state_dirs_for(prefix):
        for j in _txn.journals(d):
            where.setdefault(j.id, d)
    full = _txn.resolve_txn(list(where), to)
    return where[full], full


def rollback(*, env: str | None = None, python: str | None = None, to: str | None = None, force: bool = False,
             wait: bool = False, keep: int = 5, probe_timeout: float = 300.0) -> dict[str, Any]:
    """``rocmbuild rollback``: undo the latest apply in effect (or everything from ``to`` on), as its own
    journaled, verified transaction. Drift refuses (exit 2) unless ``force``."""
    from dataclasses import replace

    from rocmbuild.target import target

    prefix, py = target.resolve(env, python)
    recovered = _recover_prefix(prefix, wait=wait)
    if to is not None:
        sdir, to = _state_dir_of(prefix, to)
    else:
        sdir = _pick_state_dir(prefix)
    with state.TargetLock(sdir, wait=wait):
        if _txn.needs_recovery(sdir):
            recovered += _txn.recover(sdir)
        p = _txn.rollback_plan(sdir, to=to, force=force)
        p = replace(p, python=str(py))
        verify = _verifier(py, timeout=probe_timeout, smoke=False)
        ui.info(f"rolling back {', '.join(p.undoes)} on {prefix} ({len(p.pending)} path(s))")
        out = _txn.execute(p, verify=verify, verify_restored=verify, keep=keep, meta={"python": str(py)})
    warnings = _warnings(out.verdict)
    ui.info(f"rolled back {', '.join(p.undoes)} as {out.id}; {p.library} ({p.version_after or '?'}) verified"
            + (f" (with {len(warnings)} warning(s): " + ", ".join(w["name"] for w in warnings) + ")" if warnings else ""))
    return _result(p, txn=out.id, undoes=list(p.undoes), verdict=out.verdict, pruned=out.pruned,
                   recovered=recovered, forced_drift=list(p.notes))


def history(*, env: str | None = None, python: str | None = None) -> dict[str, Any]:
    """``rocmbuild history``: every transaction (read-only; unfinished ones are listed, not recovered)."""
    from rocmbuild.target import target

    prefix, _py = target.resolve(env, python)
    rows: list[dict[str, Any]] = []
    unfinished = []
    total = 0
    for d in state.state_dirs_for(prefix):
        act = {j.id for j in _txn.active(d)}
        pruned = {j.id for j in _txn.journals(d) if j.data.get("backups_pruned")}
        for rec in state.read_history(d):
            rows.append({**rec, "in_effect": rec["id"] in act, "backups_pruned": rec["id"] in pruned,
                         "state_dir": str(d)})
        unfinished += [{"id": j.id, "verb": j.data["verb"], "state": j.state} for j in _txn.pending(d)]
        total += _txn.backup_bytes(d)
    rows.sort(key=lambda r: (r.get("time") or "", r["id"]))
    return {"prefix": str(prefix), "transactions": rows, "unfinished": unfinished, "backup_bytes": total,
            "backup_bytes_note": "bytes only the backups keep alive (backup files with no other link)"}


def render_history(h: dict[str, Any]) -> str:
    lines = [f"history of {h['prefix']}"]
    for r in h["transactions"]:
        ver = f"{r.get('version_before') or '?'} -> {r.get('version_after') or '?'}"
        what = r.get("recipe") or "-"
        if r.get("undoes"):
            what += f" (undoes {', '.join(r['undoes'])})"
        flag = " [in effect]" if r.get("in_effect") else ""
        flag += " [backups pruned]" if r.get("backups_pruned") else ""
        lines.append(f"  {r['id']}  {r.get('time')}  {r['verb']:8} {what} @ {(r.get('commit') or '-')[:12]}  "
                     f"{ver}  {len(r.get('files') or [])} file(s)  {r.get('outcome')}{flag}")
    if not h["transactions"]:
        lines.append("  no transactions")
    for u in h["unfinished"]:
        lines.append(f"  UNFINISHED {u['id']} {u['verb']} (stopped at '{u['state']}'): run `rocmbuild recover`")
    lines.append(f"backups hold {h['backup_bytes']} bytes on disk that nothing else keeps alive "
                 "(backups hardlinked to files still in use cost nothing)")
    return "\n".join(lines)


def recover(*, env: str | None = None, python: str | None = None, wait: bool = False,
            probe_timeout: float = 300.0) -> dict[str, Any]:
    """``rocmbuild recover``: only recovery (roll back unfinished transactions); nothing: says so."""
    from rocmbuild.target import target

    prefix, py = target.resolve(env, python)
    verify = _verifier(py, timeout=probe_timeout, smoke=False)
    done = _recover_prefix(prefix, wait=wait, verify_restored=verify)
    return {"prefix": str(prefix), "recovered": done}


def status_changes(prefix: Path) -> dict[str, Any]:
    """For ``status``: what rocmbuild changed in this target (transactions in effect), unfinished
    journals, drift (paths rocmbuild placed that are no longer what it left) and backup bytes."""
    out: dict[str, Any] = {"state_dirs": [], "in_effect": [], "unfinished": [], "drift": [], "backup_bytes": 0}
    for d in state.state_dirs_for(Path(prefix)):
        out["state_dirs"].append(str(d))
        for j in _txn.active(d):
            p = j.plan
            out["in_effect"].append({"id": j.id, "verb": j.data["verb"], "recipe": p.recipe, "commit": p.commit,
                                     "version_before": p.version_before, "version_after": p.version_after,
                                     "files": [p.actions[s["index"]].path for s in j.data["steps"]]})
        out["unfinished"] += [{"id": j.id, "verb": j.data["verb"], "state": j.state} for j in _txn.pending(d)]
        out["drift"] += _txn.drift(d)
        out["backup_bytes"] += _txn.backup_bytes(d)
    return out


def render_status_changes(c: dict[str, Any]) -> str:
    lines = []
    for t in c["in_effect"]:
        lines.append(f"rocmbuild {t['verb']} {t['id']}: {t['recipe'] or '-'} {t['version_before'] or '?'} -> "
                     f"{t['version_after'] or '?'} ({len(t['files'])} path(s))")
    for u in c["unfinished"]:
        lines.append(f"UNFINISHED {u['verb']} {u['id']} (stopped at '{u['state']}'): the next rocmbuild command "
                     "that changes this target rolls it back; `rocmbuild recover` does only that")
    for d in c["drift"]:
        lines.append(f"DRIFT {d['path']}: rocmbuild left {d['expected']}, found {d['found']} (changed since "
                     f"{d['txn']}; `rocmbuild rollback` refuses without --force)")
    if not lines:
        lines.append("rocmbuild has changed nothing in this target")
    return "\n".join(lines)
