"""Look after a target: rollback, recover, history, status and verify.

Decisions:
* ``history``, ``status`` and ``verify`` only read: unfinished journals are listed, not
  recovered. Every verb that changes a target (apply, rollback, recover) recovers first.
* A journal or history line that cannot be read is listed by ``status`` and ``history``
  (``unreadable``: its path, what it still tells, where its backups are); the changing verbs refuse
  while a journal is unreadable (guards.refuse_unreadable), ``recover`` included (exit 2).
* ``history --limit N`` keeps the newest N (default: all; the JSON stays oldest first, ``total``
  counts every one). ``status`` hands the loaded libraries' (device, inode) -> version to drift,
  so a drifted file torch loads is named with the version torch reports for it.
* ``history`` marks the state found in another prefix: ``origins`` (``copied`` after a ``cp -a``,
  ``moved`` after a ``mv``) and each line's ``origin``; its paths are this prefix's, rebased.
* ``rollback`` undoes the latest apply in effect (or everything from ``--to`` on) as its own
  journaled, verified transaction; the old state is checked like a restored one (identity and
  version; an incompatibility it always had is a warning). Drift refuses (exit 2) unless ``force``.
* ``rollback --if-applied`` (re-runnable fleet rollbacks): after recovery, no apply in effect (with
  ``--to``: that transaction no longer in effect and no later apply in effect) is a success with
  ``nothing_to_roll_back``; an unknown ``--to`` id is still exit 2. The check runs outside the
  target lock (no state dir may exist to lock): an apply racing it is simply not undone.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from rocmbuild.fs import locks
from rocmbuild import progress, ui
from rocmbuild.proc import runner
from rocmbuild.store import differs
from rocmbuild.store.manifest import MANIFEST, read_manifest
from rocmbuild.store.provenance import origin as artifact_origin
from rocmbuild.errors import RocmbuildError, TargetError, VerifyError
from rocmbuild.home import artifacts_dir, cache_home
from rocmbuild.fs.locks import LockWait
from rocmbuild.flows import guards
from rocmbuild.results import (
    HistoryResult,
    HistoryRow,
    InEffect,
    LibraryStatus,
    RecoverResult,
    RollbackResult,
    StatusChanges,
    StatusResult,
    Stock,
    Unfinished,
    VerifyResult,
    txn_order,
)
from rocmbuild.results.driftresult import drift_check
from rocmbuild.results.stateresult import StateOrigin, dotted
from rocmbuild.results.txnresult import TargetRef
from rocmbuild.swap import dbreport, statedir, strays
from rocmbuild.swap.mapping import layout_of
from rocmbuild.swap.pathstate import observe
from rocmbuild.results.swaprecords import Drift
from rocmbuild.swap.landing import origin
from rocmbuild import swap as _txn
from rocmbuild.environment import target, versions
from rocmbuild.environment import verify as verify_mod


def _pick_state_dir(prefix: Path, redo: bool = False) -> Path:
    """The state dir a plain rollback (or ``redo``) acts in: the one whose newest apply in effect
    (or rollback to redo) is the newest."""
    def newest(d: Path) -> str | None:
        m = _txn.model(d)
        return m.redo.rollback if redo and m.redo else (None if redo else (m.stack[-1] if m.stack else None))
    dirs = [(d, n) for d in statedir.state_dirs_for(prefix) if (n := newest(d))]
    if not dirs:
        if redo:
            raise TargetError(f"nothing to redo on {prefix}: no rollback since the last apply took anything out of effect",
                              "`redo` re-applies what the last `rollback` undid, until the next apply; "
                              "`rocmbuild history` lists the transactions")
        raise TargetError(f"nothing to roll back: no apply by rocmbuild is in effect on {prefix}",
                          "`rocmbuild history` lists what was done to this target; `rocmbuild redo` "
                          "re-applies what the last rollback undid")
    return max(dirs, key=lambda dn: txn_order(dn[1]))[0]


def _state_dir_of(prefix: Path, to: str, flag: str = "--to") -> tuple[Path, str]:
    """The state dir holding the transaction ``to`` names (its number, id, or a prefix unique
    among every journal of the target, in all its state dirs) and its full id; ``0``/``stock``:
    the state dir of a plain rollback. InputError (exit 2) for an empty, ambiguous or unknown one,
    naming ``flag`` (the option that gave it)."""
    if _txn.is_stock(to):
        return _pick_state_dir(prefix), to
    where: dict[str, Path] = {}
    for d in statedir.state_dirs_for(prefix):
        for j in _txn.journals(d):
            where.setdefault(j.id, d)
    full = _txn.resolve_txn(list(where), to, flag)
    return where[full], full


def _nothing_to_undo(prefix: Path, to: str | None) -> bool:
    """``--if-applied``: no apply in effect (with ``--to``: none in effect beyond the state after it)."""
    dirs = statedir.state_dirs_for(prefix)
    if to is None or _txn.is_stock(to):
        return not any(_txn.model(d).stack for d in dirs)
    sdir, full = _state_dir_of(prefix, to)
    m = _txn.model(sdir)
    return full in m.stacks and not [x for x in m.stack if x not in m.stacks[full]]


def rollback(*, env: str | None = None, python: str | None = None, to: str | None = None, force: bool = False,
             wait: bool | LockWait = False, keep: int = 5, probe_timeout: float = 300.0,
             if_applied: bool = False, undo: str | None = None) -> RollbackResult:
    """``rocmbuild rollback``: the newest apply in effect out of effect, or (``to``) the state after
    that transaction back (``0``/``stock``: before the first), or (``undo``) the state right before
    that apply (it and every apply after it undone: what a fleet rollout undoes its own apply with)."""
    prefix, py = target.resolve(env, python)
    recovered = guards.recover_prefix(prefix, wait=wait)
    if undo is not None:
        usdir, full = _state_dir_of(prefix, undo, "--undo")
        to = _txn.point_before(_txn.model(usdir), full)
    if if_applied and _nothing_to_undo(prefix, to):
        return RollbackResult(None, None, (), None, (), tuple(recovered), (), target=TargetRef(str(prefix), str(py)))
    sdir, to = _state_dir_of(prefix, to) if to is not None else (_pick_state_dir(prefix), None)
    return _restore(prefix, py, sdir, lambda: _txn.rollback_plan(sdir, to=to, force=force), wait=wait, keep=keep,
                    probe_timeout=probe_timeout, recovered=recovered)


def redo(*, env: str | None = None, python: str | None = None, force: bool = False, wait: bool | LockWait = False,
         keep: int = 5, probe_timeout: float = 300.0) -> RollbackResult:
    """``rocmbuild redo``: undo the last rollback (what it undid is in effect again), verified."""
    prefix, py = target.resolve(env, python)
    recovered = guards.recover_prefix(prefix, wait=wait)
    sdir = _pick_state_dir(prefix, redo=True)
    return _restore(prefix, py, sdir, lambda: _txn.redo_plan(sdir, force=force), wait=wait, keep=keep,
                    probe_timeout=probe_timeout, recovered=recovered)


def _restore(prefix: Path, py, sdir: Path, make, *, wait, keep: int, probe_timeout: float,
             recovered: list) -> RollbackResult:
    """Run a rollback or redo plan (``make``, called under the lock) as a verified transaction."""
    with statedir.TargetLock(sdir, wait=wait):
        if _txn.needs_recovery(sdir):
            recovered += _txn.recover(sdir)
        p = replace(make(), python=str(py))
        verify = guards.verifier(py, timeout=probe_timeout, smoke=False, env=target.probe_env(prefix, py))
        what = f"redoing {p.redoes}" if p.redoes else f"rolling back {', '.join(p.undoes)}"
        ui.info(f"{what} on {prefix} ({len(p.pending)} path(s))")
        with progress.phase("swap", f"swapping {len(p.pending)} path(s) back in {prefix}"):
            out = _txn.execute(p, verify=verify, verify_restored=verify, keep=keep, meta={"python": str(py)})
    m = _txn.model(sdir)
    return RollbackResult(p, txn=out.id, undoes=tuple(p.undoes), verdict=out.verdict, pruned=tuple(out.pruned),
                          recovered=tuple(recovered), forced_drift=tuple(p.notes),
                          reapplies=tuple(x for x in m.stack if m.redone_by.get(x) == out.id),
                          restores_to=p.restores_to, in_effect=m.stack)


def recover(*, env: str | None = None, python: str | None = None, wait: bool | LockWait = False,
            probe_timeout: float = 300.0) -> RecoverResult:
    """``rocmbuild recover``: only recovery (roll back unfinished transactions); nothing: says so."""
    prefix, py = target.resolve(env, python, check=False)  # nothing to recover: the target's code never runs
    verify = guards.verifier(py, timeout=probe_timeout, smoke=False, env=lambda: target.probe_env(prefix, py))
    done = guards.recover_prefix(prefix, wait=wait, verify_restored=verify)
    return RecoverResult(str(prefix), tuple(done))


def _unfinished(d: Path) -> list[Unfinished]:
    """The journals not finished; one whose recorded pid holds the target's lock right now is in
    progress (a running apply or rollback), not interrupted."""
    holder = locks.read_holder(Path(d) / "lock")
    live = holder.pid if holder.alive() else None
    return [Unfinished(j.id, j.verb, j.state, running_pid=live if live is not None and j.pid == live else None)
            for j in _txn.pending(d)]


def history(*, env: str | None = None, python: str | None = None, limit: int | None = None) -> HistoryResult:
    """``rocmbuild history``: every transaction (read-only; unfinished ones are listed, not recovered);
    ``limit``: only the newest N (still oldest first in the JSON; ``total`` counts them all)."""
    prefix, _py = target.resolve(env, python, check=False)  # read-only: the target's code never runs (--env)
    home = cache_home()
    rows: list[HistoryRow] = []
    unfinished: list[Unfinished] = []
    origins: list[StateOrigin] = []
    total = 0
    for d in statedir.state_dirs_for(prefix):
        m = _txn.model(d)
        pruned = {j.id for j in _txn.journals(d) if j.backups_pruned}
        lines, _bad = statedir.history_lines(d)
        for rec in lines:
            rows.append(HistoryRow(rec, **_effect_of(m, rec), backups_pruned=rec.id in pruned, state_dir=str(d),
                                   origin=origin(rec.prefix_identity, prefix),
                                   build=differs.of_key(home, rec.artifact) if rec.artifact else {}))
        unfinished += _unfinished(d)
        origins += [StateOrigin(str(d), rel, where) for rel, where in _txn.foreign(d)]
        total += _txn.backup_bytes(d)
    rows.sort(key=lambda r: (r.line.time or "", r.line.id))
    shown = rows[-limit:] if limit is not None else rows
    return HistoryResult(str(prefix), tuple(shown), tuple(unfinished), total,
                         tuple(guards.unreadable_state(prefix)), tuple(origins), limit=limit, total=len(rows))


def _effect_of(m, rec: statedir.HistoryLine) -> dict:
    """What the model says of one history line (docs/json.md, ``history``): its kind, in effect
    (applies only), undone / redone by which transaction, and whether ``redo`` would undo it."""
    i = rec.id
    j = next((x for x in m.committed if x.id == i), None)
    return {"kind": m.kind(i) or rec.verb, "in_effect": i in m.stack, "undone_by": m.undone_by.get(i),
            "redone_by": m.redone_by.get(i), "redo_next": bool(m.redo and m.redo.rollback == i),
            "restores_to": j.plan.restores_to if j else None, "redoes": j.plan.redoes if j else None}


def status_changes(prefix: Path, loaded: dict[tuple[int, int], str | None] | None = None) -> StatusChanges:
    """What rocmbuild changed in this target (transactions in effect), unfinished journals, drift
    (paths rocmbuild placed that are no longer what it left), backup bytes and the stock version.
    ``loaded``: (device, inode) -> version of each library the target's torch loads now: a drifted
    file that is one of them gets that version (the process vouches for it; nothing is dlopened here)."""
    dirs, in_effect, unfinished, drift, total, stocks, redos = [], [], [], [], 0, [], []
    for d in statedir.state_dirs_for(Path(prefix)):
        dirs.append(str(d))
        m = _txn.model(d)
        redos += [m.redo] if m.redo else []
        for j in m.in_effect:
            p = j.plan
            art = j.meta.get("artifact_path")
            man = _manifest_of(p.artifact_path)
            built = differs.facts(man.inputs) if man else {}
            in_effect.append(InEffect(j.id, j.verb, p.recipe, p.commit, p.version_before, p.version_after,
                                      tuple(j.files), art,
                                      artifact_origin(Path(art)) if art else None, man.fixes if man else (),
                                      man.found() if man else (), redone_by=m.redone_by.get(j.id),
                                      package=man.package if man else None, build=built,
                                      differs=_apart(man, built)))
        here = _unfinished(d)
        unfinished += here
        busy = {p for j in _txn.pending(d) if any(u.id == j.id and u.running_pid for u in here) for p in j.files}
        drift += [_found_version(x, loaded or {}) for x in _txn.drift(d) if x.path not in busy]
        total += _txn.backup_bytes(d)
        stocks += [s for s in [_txn.stock_version(d)] if s]
    first = min(stocks, key=lambda s: txn_order(s[0])) if stocks else None
    in_effect.sort(key=lambda t: txn_order(t.id))
    redo = max(redos, key=lambda r: txn_order(r.rollback)) if redos else None
    return StatusChanges(tuple(dirs), tuple(in_effect), tuple(unfinished), tuple(drift), total,
                         tuple(guards.unreadable_state(Path(prefix))), Stock(*first) if first else None, redo)


def _manifest_of(artifact_path: str | None):
    """The manifest of the artifact a transaction placed (its fixes, what it was built with): read
    only from an artifact of this cache (a journal names the path), None when gone or unreadable."""
    if not artifact_path:
        return None
    art = Path(artifact_path)
    try:
        if not art.resolve().is_relative_to(artifacts_dir(cache_home()).resolve()):
            return None
        return read_manifest(art / MANIFEST)
    except (OSError, RocmbuildError):
        return None


def _apart(man, built: dict[str, str]) -> dict[str, str | None]:
    """What tells the build in effect apart from the other builds of its recipe in this cache
    (store/differs.py); {} when there is no other."""
    if man is None or not built:
        return {}
    others = [f for key, f in differs.cached(cache_home(), man.recipe) if key != man.key and f]
    return differs.differing([built, *others])[0] if others else {}


def _found_version(d: Drift, loaded: dict[tuple[int, int], str | None]) -> Drift:
    now = observe(d.path)
    version = loaded.get((now.dev, now.inode)) if now.kind == "file" else None
    return replace(d, found_version=version, found_version_from="process") if version else d


def _library_status(t, lib) -> LibraryStatus:
    r = t.report
    version = None
    if lib.kind in ("miopen", "cudnn") and r.backend in (None, lib.kind):
        n = r.effective_version_int(lib.kind)
        version = str(versions.decode_version(n, lib.kind)) if n is not None else None
    found, preload = strays.scan(lib.path, lib.soname) if lib.kind == "miopen" and not lib.deleted else ((), False)
    return LibraryStatus(lib, t.inside_prefix(lib.path), layout_of(lib.path, (t.prefix, os.path.realpath(t.prefix))), version,
                         tuple(str(x) for x in t.links_to(Path(lib.path))), found, preload)


def status(*, env: str | None = None, python: str | None = None, probe_timeout: float = 300.0,
           want_hash: bool = False, check: bool = False) -> StatusResult:
    """``rocmbuild status``: what the target loads now, and what rocmbuild changed there; ``check``
    (``--check``): DRIFT is the result's error (exit 4), the report is still printed."""
    t = target.discover(env, python, timeout=probe_timeout, want_hash=want_hash)
    libs = tuple(_library_status(t, lib) for lib in t.report.libraries)
    loaded = {(s.library.dev, s.library.inode): s.version for s in libs if not s.library.deleted}
    changes = status_changes(t.prefix, loaded)
    gate = drift_check(changes, dotted(t.report.runtime_version), str(t.prefix))
    return StatusResult(t, libs, changes, databases(t), drift_check=gate, gate=check)


def _with_drift(t, verdict):
    """``verdict`` with the drift check (results/driftresult.py) appended: what torch loads must be what
    rocmbuild's history says is in place. Only when rocmbuild changed this target."""
    libs = (_library_status(t, x) for x in t.report.libraries if not x.deleted)
    loaded = {(s.library.dev, s.library.inode): s.version for s in libs}
    check = drift_check(status_changes(t.prefix, loaded), dotted(t.report.runtime_version), str(t.prefix))
    if check is None:
        return verdict
    checks = (*verdict.checks, check)
    return replace(verdict, checks=checks, ok=verdict.ok and check.ok)


def databases(t) -> "dbreport.DbReport | None":
    """The MIOpen databases the loaded libMIOpen reads (swap/dbreport.py); None: none is loaded."""
    lib = next((x for x in t.report.libraries if x.kind == "miopen" and not x.deleted), None)
    if lib is None:
        return None
    return dbreport.report(t.prefix, lib.path, env=runner.environment(t.activation.extras()))


def verify(*, env: str | None = None, python: str | None = None, probe_timeout: float = 300.0,
           want_hash: bool = False, smoke: bool = False, library: str | None = None, encoding: str | None = None,
           expect: str | None = None, expect_file: str | list[str] | None = None) -> VerifyResult:
    """``rocmbuild verify``: judge what the target loads; VerifyError (exit 4) when a check fails.
    Library and encoding follow the backend the probe found unless given; a contradiction: InputError."""
    t = target.discover(env, python, timeout=probe_timeout, want_hash=want_hash, smoke=smoke)
    library, encoding = verify_mod.choose(t.report, library, encoding)
    files = [expect_file] if isinstance(expect_file, str) else list(expect_file or ())
    verdict = _with_drift(t, verify_mod.judge(t.report, library=library, encoding=encoding, expect=expect,
                                              expected_file=[Path(f) for f in files] if files else None, smoke=smoke))
    if not verdict.ok:
        bad = verdict.failures()
        raise VerifyError(
            f"verification failed in {t.prefix}: " + "; ".join(f"{c.shown_name}: expected {c.expected}, found {c.found}"
                                                               for c in bad)
            + (f"\n{t.difference.text()}" if t.difference is not None else ""),
            " ".join(dict.fromkeys(c.message for c in bad if c.message)) or "see the checks above",  # each once
            details={"checks": [c.to_json() for c in verdict.checks], "failures": [c.name for c in bad],
                     "target": t.to_json()},
        )
    return VerifyResult(t, verdict, databases(t))
