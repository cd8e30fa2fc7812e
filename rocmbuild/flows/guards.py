"""What every verb that changes a target does around the swap: recover first, refuse early,
verify after.

Decisions:
* Recovery rolls back every unfinished journal of the target, each state dir under its lock,
  before the target is probed: a half-swapped target is never probed or planned on.
* A journal that cannot be read may record a swap that was never verified: every changing verb
  (apply, rollback, recover) refuses (``StateError``, exit 2) before it writes, naming the file,
  what it still tells and where its backups are; rocmbuild never guesses what it did. An
  unreadable history line only warns (the journals are the record that matters).
* Refusals come before anything is written: an artifact that cannot load under the target's torch
  (:func:`compat_refusal`), a changed artifact (a cache file whose identity moved since it was
  published and whose bytes no longer match: quarantined, exit 3), a lib dir that is not writable, too little free
  space for the bytes that must be copied (every artifact file: the target gets its own copy;
  backups are hardlinks and cost nothing) (:func:`preflight`).
* The libraries the artifact's libraries need (:func:`refuse_needed`, ``DT_NEEDED``): one that
  torch's process maps in another version (``libamdhip64.so.7`` needed, ``.so.6`` loaded: ROCm 7
  against ROCm 6) is refused (exit 2), before anything is written; one found nowhere is a warning
  (the verification after the swap proves the load: environment/needed.py).
* The GPU architecture (:func:`gpu_arch`): an artifact whose recorded targets do not cover every
  AMD GPU of this machine is refused (exit 2) before anything is recovered, locked or changed,
  unless ``--allow-other-arch`` (a warning; the result records it). A generic target covers its
  family. No AMD GPU found, no targets recorded, or a cuDNN artifact: said, never refused.
* The verifier runs the probe in the target's Python (a fresh process) and judges it against the
  expectation. The smoke test runs only for the new state; an old state put back (a rollback, the
  restore after a failed apply) must prove identity and version only: a failed compatibility check
  there is a warning (``ui.warn`` and ``verdict.warnings``), since that state had it before
  rocmbuild changed anything and refusing it would leave no way back at all.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from rocmbuild import progress, ui
from rocmbuild.store import cache
from rocmbuild.store.artifact import Artifact
from rocmbuild.fs.root import Root
from rocmbuild.fs.disk import nearest_existing
from rocmbuild.errors import InputError, StateError, TargetError
from rocmbuild.fs.locks import LockWait
from rocmbuild.recipe import arch
from rocmbuild.swap import plan as _plan
from rocmbuild.swap import statedir
from rocmbuild import swap as _txn
from rocmbuild.environment import verify as verify_mod
from rocmbuild.results.verdict import Check, Verdict

if TYPE_CHECKING:
    from rocmbuild.environment import needed

RESTORED_WARN_ONLY = ("compatibility",)


def unreadable_state(prefix: Path) -> list[_txn.Unreadable]:
    """Every journal and history line of the target (all its state dirs) that cannot be read, and
    every outside-prefix target record (it may be this target's)."""
    out: list[_txn.Unreadable] = []
    for d in statedir.state_dirs_for(prefix):
        out += _txn.unreadable(d) + statedir.history_lines(d)[1]
    return out + statedir.unreadable_targets()


def refuse_unreadable(prefix: Path) -> None:
    """StateError (exit 2) while a journal of the target cannot be read; warn of bad history lines."""
    bad = unreadable_state(prefix)
    for u in bad:
        if u.kind == "history":
            ui.warn(u.describe() + " (the line is skipped; the others are read)")
        elif u.kind == "target":
            ui.warn(u.describe() + " (that state dir is not used until its record is fixed)")
    broken = [u for u in bad if u.kind == "journal"]
    if not broken:
        return
    raise StateError(
        f"refusing to change {prefix}: {len(broken)} journal(s) cannot be read, and such a journal may "
        "record a swap that was never verified; nothing was changed\n" + "\n".join(f"  {u.describe()}" for u in broken),
        "look at the files it names: to get the state before it back, put each backup NNN-<name> from its "
        "backups dir over <name> in the environment (`mv`); then move the journal aside "
        "(`mv JOURNAL JOURNAL.broken`) and run again. `rocmbuild status` shows what the environment loads",
        details={"unreadable": [u.to_json() for u in bad]})


def recover_prefix(prefix: Path, *, wait: bool | LockWait,
                   verify_restored: _txn.Verify | None = None) -> list[_txn.Recovered]:
    """Recover every unfinished journal of the target (each state dir under its lock); refuse
    first while a journal cannot be read (:func:`refuse_unreadable`)."""
    refuse_unreadable(prefix)
    out: list[_txn.Recovered] = []
    for d in statedir.state_dirs_for(prefix):
        if _txn.needs_recovery(d):
            with statedir.TargetLock(d, wait=wait):
                out += _txn.recover(d, verify_restored=verify_restored)
    return out


def verifier(python: Path, *, timeout: float, smoke: bool,
             env: dict[str, str | None] | Callable[[], dict[str, str | None]] | None = None
             ) -> Callable[["_txn.Expectation"], Verdict]:
    """The verify callback for :func:`rocmbuild.swap.protocol.execute` (see the module notes);
    ``env``: the target's activation (``Target.activation.extras()``), so the activated env is judged;
    a callable is asked only when a verification runs (``recover`` with nothing to recover runs none)."""
    from rocmbuild.environment import probe
    from rocmbuild.environment import verify as verify_mod

    def verify(exp: "_txn.Expectation") -> Verdict:
        want_smoke = smoke and not exp.restored
        with progress.phase("verify", "verifying the restored state" if exp.restored else "verifying the new state") as ph:
            report = probe.run_probe(python, timeout=timeout, smoke=want_smoke, env=env() if callable(env) else env)
            verdict = verify_mod.judge(report, library=exp.library_name, encoding=exp.encoding, expect=exp.version,
                                       expected_file=exp.expected_files(),
                                       links=() if exp.restored else tuple(Path(x) for x in exp.links),
                                       smoke=want_smoke)
            ph.failed = not verdict.ok
        if not exp.restored:
            return verdict
        relaxed = verdict.relaxed(RESTORED_WARN_ONLY)
        for c in relaxed.warnings:
            ui.warn(f"the restored state fails the {c.shown_name} check (it did before rocmbuild changed it, too): "
                    f"{c.found}" + (f"\n{c.message}" if c.message else ""))
        return relaxed

    return verify


def compat_refusal(check: Check, report, encoding: str) -> InputError:
    """The error for an artifact that cannot load under this torch, naming a bundled recipe that
    fits when there is one (never one that does not exist)."""
    cv = report.compile_version
    lib = "cuDNN" if encoding == "cudnn" else "MIOpen"
    rule = ("the same major and a minor at least the compile-time one" if encoding == "cudnn"
            else "the same major.minor")
    hint = f"use a {lib} with {rule} as the torch's compile-time version, or a torch built against the artifact's"
    if cv:
        names = verify_mod.recipes_for(encoding, cv)
        hint = (f"this torch was compiled against {lib} {'.'.join(map(str, cv))}: use a {lib} with {rule}"
                + (f", e.g. the recipe {names[-1]} (`rocmbuild apply {names[-1]}`)" if names else "")
                + ", or install a torch built against the artifact's version")
    return InputError(
        f"refusing to apply: the artifact cannot load under this torch ({check.found}); nothing was changed\n"
        f"{check.message}",
        hint, details={"check": check.to_json()},
    )


def refuse_needed(artifact: Artifact, t, libdir: Path) -> needed.Needed:
    """The artifact's libraries' DT_NEEDED against what the target ``t`` provides
    (:mod:`rocmbuild.environment.needed`): a conflict is refused (:func:`needed_refusal`, exit 2),
    a SONAME found nowhere warned about; before anything is written."""
    from rocmbuild.environment import needed

    libs = artifact.manifest.libraries
    verdict = needed.check(artifact.tree, [lib.file for lib in libs], t.report, libdir, env=t.activation.extras(),
                           sonames=[lib.soname for lib in libs])
    if verdict.conflicts:
        raise needed_refusal(verdict, t.prefix)
    for rel, need in verdict.missing:
        ui.warn(f"the new {os.path.basename(rel)} needs {need}, which torch's process does not load and the loader's "
                f"dirs do not hold ({libdir}, its RUNPATH, LD_LIBRARY_PATH, ldconfig's cache): the verification "
                "after the swap shows whether it loads (if not, it is rolled back)")
    if verdict.skipped:
        ui.detail("DT_NEEDED not read (not an ELF file here): " + ", ".join(verdict.skipped))
    return verdict


def needed_refusal(verdict, prefix: Path) -> InputError:
    """The error for an artifact whose library needs another version of a library torch loads."""
    from rocmbuild.environment.needed import rocm_of

    lines = []
    for c in verdict.conflicts:
        era = f" ({rocm_of(c.mapped)})" if rocm_of(c.mapped) else ""
        lines.append(f"the new {os.path.basename(c.library)} needs {c.needed}, but torch in {prefix} loads "
                     f"{c.mapped}{era} from {c.mapped_path}")
    first = verdict.conflicts[0]
    want, have = rocm_of(first.needed), rocm_of(first.mapped)
    hint = (f"use a build for {have} (built with {have}'s compiler and libraries, or a package made for {have}), "
            f"or a torch built for {want}" if want and have else
            f"use a build linked against {first.mapped} (what this torch loads), or a torch that loads {first.needed}")
    return InputError(
        "refusing to apply: " + "; ".join(lines) + " (two versions of one library in one process do not work); "
        "nothing was changed", hint, details={"needed": verdict.to_json()})


def writable(d: Path) -> str | None:
    """None when ``d`` (or its nearest existing ancestor) accepts new files; else why not."""
    d = nearest_existing(d)
    if not d.is_dir():  # e.g. a file where the state dir belongs
        return f"{d} is not a directory"
    if not os.access(d, os.W_OK | os.X_OK):
        return f"{d} is not writable by this user"
    try:
        with Root.open(d, "the directory") as root:  # the test file is made and removed through its fd
            name = f".rocmbuild-write-test-{os.getpid()}"
            os.close(root.open_file(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            root.unlink(name, sync=False)
    except OSError as exc:
        return f"{d} is not writable: {exc.strerror or exc}"
    return None


def _copy_bytes(the_plan: "_plan.Plan") -> tuple[dict[int, int], dict[int, Path]]:
    """Bytes that must be copied per device (artifact -> lib dir, old file -> backups), and where."""
    need: dict[int, int] = {}
    where: dict[int, Path] = {}
    sdir = nearest_existing(Path(the_plan.state_dir))
    sdev = os.stat(sdir).st_dev
    for a in the_plan.pending:
        ddir = nearest_existing(Path(a.path).parent)
        ddev = os.stat(ddir).st_dev
        # an artifact file is always copied (a reflink costs less, but is not known in advance);
        # a backup put back is a hardlink unless it lives on another filesystem
        if a.source and (a.sha256 is not None or os.stat(a.source).st_dev != ddev):
            need[ddev] = need.get(ddev, 0) + a.size
            where[ddev] = ddir
        if a.before.kind == "file" and a.before.dev != sdev:
            need[sdev] = need.get(sdev, 0) + a.before.size
            where[sdev] = sdir
    return need, where


def preflight(the_plan: "_plan.Plan", artifact: Artifact) -> int:
    """Refuse what cannot succeed before anything is changed (InputError for a changed artifact,
    TargetError, exit 2, for the target); returns the bytes that will be copied."""
    bad = artifact.intact()
    if bad:
        raise InputError(
            f"the artifact {artifact.path} is not intact: " + ", ".join(bad[:10]) + (" ..." if len(bad) > 10 else ""),
            "a cached file is missing or was changed; remove that artifact directory and build again",
            details={"artifact": str(artifact.path), "changed": bad},
        )
    if the_plan.already_applied:
        return 0  # nothing will be written: do not even test-write (the no-op writes nothing)
    cache.check_untampered(artifact)  # a cache file changed since it was published: exit 3, quarantined
    for d in sorted({Path(a.path).parent for a in the_plan.pending} | {Path(the_plan.state_dir)}):
        why = writable(d)
        if why:
            raise TargetError(f"cannot change the target: {why}; nothing was changed",
                              "run as a user who owns the environment (or fix its permissions)",
                              details={"dir": str(d)})
    need, where = _copy_bytes(the_plan)
    for dev, n in need.items():
        free = shutil.disk_usage(where[dev]).free
        if n + (1 << 20) > free:
            raise TargetError(
                f"not enough free space in {where[dev]}: {n} bytes must be copied (the target gets its own "
                f"copy of each artifact file), {free} free; nothing was changed",
                "free some space in the environment's filesystem and run again",
                details={"needed": n, "free": free, "dir": str(where[dev])},
            )
    return sum(need.values())


def gpu_arch(targets: tuple[str, ...] | None, encoding: str | None, *, allow_other_arch: bool = False,
             host: tuple[str, ...] | None = None) -> arch.ArchMatch:
    """The artifact's targets against this machine's GPUs (detected unless ``host`` is given);
    a mismatch allowed by ``--allow-other-arch`` is warned about and marked ``allowed``."""
    from rocmbuild.environment import gpu

    found = tuple(gpu.detect()) if host is None else host
    m = arch.match(targets, found, amd=encoding != "cudnn")
    if m.status == arch.MISMATCH and allow_other_arch:
        ui.warn(f"{m.detail}: applying anyway (--allow-other-arch); its GPU kernels will not load on this GPU")
        return replace(m, allowed=True)
    if m.status == arch.NO_GPU:
        ui.warn(m.detail)  # said even with --json: the check the user may count on did not run
    return m


def arch_refusal(m: arch.ArchMatch) -> InputError:
    """The error for an artifact built for other GPUs than this machine's."""
    return InputError(
        f"refusing to apply: {m.detail}; nothing was changed",
        f"build it for this machine's GPUs (--gpu-targets {','.join(m.host) if m.host else 'gfxNNNN'}, or GPU_TARGETS = \"auto\" on "
        "this machine), or pass --allow-other-arch to apply it anyway",
        details={"gpu_arch": m.to_json()})


def refuse_other_arch(targets: tuple[str, ...] | None, encoding: str | None, *,
                      allow_other_arch: bool = False) -> arch.ArchMatch:
    """:func:`gpu_arch`, raising :func:`arch_refusal` (exit 2) for a mismatch not allowed."""
    m = gpu_arch(targets, encoding, allow_other_arch=allow_other_arch)
    if m.refused:
        raise arch_refusal(m)
    return m
