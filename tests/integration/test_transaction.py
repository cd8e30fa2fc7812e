"""The transaction core on real files, without a target Python: a real artifact directory made
from the fixture library, a conda-style lib dir, and a verify callback standing in for the probe.

What this proves beyond tests/integration/test_apply.py: backups are hardlinks of the original
inode (no byte copied), staged files are the target's own inodes (never the artifact's), every failure mode before and
after the first rename leaves exactly the old state, recovery is idempotent and survives being
killed itself, the lock excludes a second holder in the same process, and drift is detected.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from rocmbuild.fs import disk
from rocmbuild.store import artifact
from rocmbuild.store.artifact import Artifact, Manifest
from rocmbuild.errors import InputError, LockedError, TargetError, VerifyError
from rocmbuild import swap as transaction
from rocmbuild.fs.root import Root
from rocmbuild.swap.roots import Roots
from rocmbuild.swap import actions, plan, statedir
from tests.support.cli import REPO
from tests.support.envs import stage_library
from tests.support.snapshots import inodes, snapshot

pytestmark = pytest.mark.slow


def make_artifact(root: Path, lib_dir: Path, version: str) -> Artifact:
    """An artifact directory as build.py makes it, from a staged lib dir (no cmake run)."""
    import shutil

    tree = root / "tree"
    shutil.copytree(lib_dir.parent, tree, symlinks=True)
    files = artifact.scan_tree(tree)
    libs = artifact.find_libraries(tree, files, ["libMIOpen"])
    m = Manifest(recipe="mini", key=f"key-{version}-{root.name}", version=version, expect_version=version,
                 encoding="miopen", smoke=None, commit="c" * 40, ref="develop", url="file:///x",
                 install_prefix="/usr/local", files=files, libraries=libs, data=("share/miopen/db",))
    disk.atomic_write_json(root / "manifest.json", m.to_json())
    return Artifact(root, m)


@pytest.fixture
def art(fixture_libs, tmp_path) -> Artifact:
    return make_artifact(tmp_path / "artifact", fixture_libs("3.5.1"), "3.5.1")


@pytest.fixture
def prefix(fixture_libs, tmp_path) -> Path:
    p = tmp_path / "prefix"
    stage_library(fixture_libs("3.5.0"), p / "lib")
    (p / "lib" / "libother.so").write_bytes(b"unrelated\n")
    return p


def facts(prefix: Path, layout="conda", inside=True) -> plan.TargetFacts:
    lib = prefix / "lib" / "libMIOpen.so.1.0"
    return plan.TargetFacts(str(prefix), "/nonexistent/python",
                            (("libMIOpen", (plan.LoadedFact(str(lib), layout, inside),)),), "3.5.0")


@dataclass
class V:
    ok: bool
    why: str = ""
    warnings: tuple = ()  # a Verdict's failed checks that only warn (none here)

    def failures(self):
        return [] if self.ok else [{"name": "identity", "expected": "x", "found": self.why}]

    def to_json(self):
        return {"ok": self.ok}


class Verifier:
    """Stands in for the probe: the expected library must be there, as a regular file."""

    def __init__(self, fail=False, raise_=None):
        self.fail, self.raise_, self.calls = fail, raise_, []

    def __call__(self, exp: transaction.Expectation):
        self.calls.append(exp)
        if not exp.restored:
            if self.raise_ is not None:
                raise self.raise_
            if self.fail:
                return V(False, "rejected by the fake")
        return V(Path(exp.library).is_file())


def test_commit_hardlinks_backups_and_staged_files(art, prefix):
    p = plan.make(art, facts(prefix))
    assert [a.kind for a in p.actions] == ["replace_file", "replace_link", "replace_link", "add_file"]
    assert [a.done for a in p.actions] == [False, True, True, False]  # the links are already right
    orig = os.stat(prefix / "lib/libMIOpen.so.1.0")
    v = Verifier()
    out = transaction.execute(p, verify=v, verify_restored=v)
    assert out.state == "committed" and [e.restored for e in v.calls] == [False]
    j = transaction.Journal.load(Path(p.state_dir) / "journal" / f"{out.id}.json")
    assert j.state == "committed" and j.backup_copies == 0
    # the backup is the original inode (a hardlink): no byte copied
    (bk,) = [b for b in (Path(p.state_dir) / "backups" / out.id).iterdir() if "libMIOpen" in b.name]
    assert (bk.stat().st_dev, bk.stat().st_ino) == (orig.st_dev, orig.st_ino)
    # the placed file is the target's own inode holding the artifact's bytes: never a hardlink
    # (nor a symlink) into the cache, so an in-place write there cannot reach the cache
    new = prefix / "lib/libMIOpen.so.1.0"
    cached = art.file("lib/libMIOpen.so.1.0")
    assert not new.is_symlink() and (new.stat().st_dev, new.stat().st_ino) != (cached.stat().st_dev, cached.stat().st_ino)
    assert new.read_bytes() == cached.read_bytes() and cached.stat().st_nlink == 1
    assert (prefix / "share/miopen/db/gfx1151.db.txt").read_bytes() == b"fixture perf db\n"
    assert art.intact() == []
    (line,) = statedir.read_history(Path(p.state_dir))
    assert line.id == out.id and line.outcome == "committed" and line.version_before == "3.5.0"
    assert transaction.drift(Path(p.state_dir)) == []


def test_the_placed_copy_is_fsynced_after_the_verification_and_before_the_commit(art, prefix, mocker):
    """The target's copy only starts its writeback while it is made; its fsync comes after the
    verification (the disk writes meanwhile) and before the journal says ``verified``."""
    seen = []
    real = actions._PlacesData.make_durable

    def spy(self, after):
        seen.append((Path(self.dest).name, transaction.Journal.load(
            Path(p.state_dir) / "journal" / f"{txn}.json").state, len(v.calls)))
        return real(self, after)

    mocker.patch.object(actions._PlacesData, "make_durable", spy)
    fsyncs = mocker.spy(os, "fsync")
    p = plan.make(art, facts(prefix))
    txn = transaction.new_id(Path(p.state_dir))
    v = Verifier()
    out = transaction.execute(p, verify=v, verify_restored=v, txn=txn)
    assert out.state == "committed"
    assert ("libMIOpen.so.1.0", "swapped", 1) in seen  # after the probe ran, before "verified"
    assert fsyncs.call_count > 0


def test_a_placed_file_replaced_during_the_verification_is_not_committed(art, prefix):
    """make_durable fsyncs the inode this transaction placed; another one there is rolled back."""
    before, ids = snapshot(prefix), inodes(prefix)

    class Swapper(Verifier):
        def __call__(self, exp):
            if not exp.restored:
                lib = prefix / "lib/libMIOpen.so.1.0"
                (prefix / "lib/intruder").write_bytes(lib.read_bytes())
                os.replace(prefix / "lib/intruder", lib)
            return super().__call__(exp)

    v = Swapper()
    with pytest.raises(VerifyError) as ei:
        transaction.execute(plan.make(art, facts(prefix)), verify=v, verify_restored=v)
    assert "was replaced while the transaction ran" in ei.value.message
    assert snapshot(prefix) == before and inodes(prefix) == ids


@pytest.mark.parametrize("failure", ["rejects", "raises", "ctrl-c"])
def test_failure_after_the_swap_restores_the_old_state(art, prefix, failure):
    before, ids = snapshot(prefix), inodes(prefix)
    v = {"rejects": Verifier(fail=True), "raises": Verifier(raise_=RuntimeError("probe crashed")),
         "ctrl-c": Verifier(raise_=KeyboardInterrupt())}[failure]
    p = plan.make(art, facts(prefix))
    with pytest.raises(VerifyError) as ei:
        transaction.execute(p, verify=v, verify_restored=v)
    assert ei.value.exit_code == 4 and "rolled back" in ei.value.message
    assert ei.value.details["restored"]["ok"] is True
    assert [e.restored for e in v.calls] == [False, True]  # the old state was verified again
    assert v.calls[1].library == str(prefix / "lib/libMIOpen.so.1.0") and v.calls[1].version == "3.5.0"
    assert snapshot(prefix) == before and inodes(prefix) == ids
    assert not (prefix / "share").exists()  # created dirs removed again
    sdir = Path(p.state_dir)
    assert [j.state for j in transaction.journals(sdir)] == ["rolled_back"]
    assert not (sdir / "backups" / transaction.journals(sdir)[0].id).exists()
    if failure == "rejects":
        assert ei.value.details["failures"][0]["found"] == "rejected by the fake"


def test_failure_before_the_first_rename_changes_nothing(art, prefix, mocker):
    before, ids = snapshot(prefix), inodes(prefix)
    real = Root.copy_in  # staging an artifact file: the target's own copy
    calls = {"n": 0}

    def flaky(self, fd, rel, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device", self.show(rel))
        return real(self, fd, rel, **kw)

    mocker.patch.object(Root, "copy_in", autospec=True, side_effect=flaky)
    p = plan.make(art, facts(prefix))
    with pytest.raises(TargetError) as ei:
        transaction.execute(p, verify=Verifier())
    assert "nothing was changed" in ei.value.hint
    assert snapshot(prefix) == before and inodes(prefix) == ids
    assert not list(prefix.rglob(".*rocmbuild-new-*"))


RUNNER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from rocmbuild.swap import plan
    from rocmbuild.swap import protocol as transaction
    p = plan.Plan.from_json(json.loads(Path(sys.argv[1]).read_text()))
    class V:
        ok = False
        def failures(self): return [{"name": "x"}]
        def to_json(self): return {}
    fail = sys.argv[2] == "fail"
    transaction.execute(p, verify=(lambda e: V()) if fail else None)
""")

RECOVER = textwrap.dedent("""
    import sys
    from rocmbuild.swap import recovery
    print(len(recovery.recover(sys.argv[1])))
""")


def _py(code: str, *args, env=None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=e)


# the kill points that leave an unfinished journal (``after-commit`` leaves a committed one without
# its history line: test_killed_after_commit_recovery_writes_the_history_line_once)
UNFINISHED_POINTS = [p for p in transaction.FAILPOINTS if p != "after-commit"]
# a recovery killed at mid-rollback dies only when it has reverts to do (paths swapped before)
NOTHING_SWAPPED = ("after-journal", "after-stage", "after-backup")


@pytest.mark.parametrize("point", UNFINISHED_POINTS)
def test_killed_at_every_step_recovery_is_idempotent(art, prefix, tmp_path, point):
    """Kill the transaction at ``point``; kill the recovery itself half way; recover again."""
    before, ids = snapshot(prefix), inodes(prefix)
    p = plan.make(art, facts(prefix))
    pj = tmp_path / "plan.json"
    pj.write_text(json.dumps(p.to_json()))
    r = _py(RUNNER, pj, "fail" if point == "mid-rollback" else "ok", env={"ROCMBUILD_FAILPOINTS": point})
    assert r.returncode == 137, r.stderr
    sdir = Path(p.state_dir)
    assert len(transaction.pending(sdir)) == 1
    r = _py(RECOVER, sdir, env={"ROCMBUILD_FAILPOINTS": "mid-rollback"})
    # a recovery that has paths to restore (two actions: the library and a data file) is itself
    # killed after its first revert; one with nothing swapped has no revert, and finishes
    assert r.returncode == (0 if point in NOTHING_SWAPPED else 137), r.stderr
    r = _py(RECOVER, sdir)
    assert r.returncode == 0, r.stderr
    r2 = _py(RECOVER, sdir)
    assert r2.stdout.strip() == "0"  # ... and recovery finishes, once
    assert snapshot(prefix) == before and inodes(prefix) == ids
    assert not list(prefix.rglob(".*rocmbuild-*"))
    assert transaction.pending(sdir) == []
    assert statedir.read_history(sdir)[-1].outcome.startswith("recovered: rolled back")
    # and the next transaction succeeds
    out = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    assert out.state == "committed"


def test_rollback_plan_restores_and_detects_drift(art, prefix, fixture_libs):
    before, ids = snapshot(prefix), inodes(prefix)
    out = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    sdir = prefix / ".rocmbuild"
    # drift: a package manager replaced our file (by rename, as they do)
    lib = prefix / "lib/libMIOpen.so.1.0"
    tmp = prefix / "lib/.update"
    tmp.write_bytes(lib.read_bytes() + b"\0")
    os.replace(tmp, lib)
    (d,) = transaction.drift(sdir)
    assert d["path"] == str(lib) and d["txn"] == out.id
    with pytest.raises(TargetError) as ei:
        transaction.rollback_plan(sdir)
    assert "drift" in ei.value.message and ei.value.exit_code == 2
    rp = transaction.rollback_plan(sdir, force=True)
    assert rp.undoes == (out.id,) and rp.library == str(lib) and rp.version_after == "3.5.0"
    v = Verifier()
    rout = transaction.execute(rp, verify=v)
    assert v.calls[0].library == str(lib) and v.calls[0].version == "3.5.0"
    assert snapshot(prefix) == before and inodes(prefix) == ids
    # the clobbered file was backed up by the rollback (so even a forced rollback is reversible)
    assert any(b.stat().st_size == lib.stat().st_size + 1 for b in (sdir / "backups" / rout.id).iterdir())
    assert [j.id for j in transaction.active(sdir)] == [rout.id]


def test_lock_excludes_a_second_holder_and_names_the_pid(tmp_path):
    sdir = tmp_path / "prefix" / ".rocmbuild"
    with statedir.TargetLock(sdir):
        # the holder record names this process (the lock file held its bare pid before it was a record)
        assert json.loads((sdir / "lock").read_text())["pid"] == os.getpid()
        with pytest.raises(LockedError) as ei:
            statedir.TargetLock(sdir).acquire()
        assert ei.value.exit_code == 5 and f"pid {os.getpid()}" in ei.value.message
        with pytest.raises(LockedError):
            statedir.TargetLock(sdir, shared=True).acquire()
    with statedir.TargetLock(sdir, shared=True):
        pass
    other = tmp_path / "other" / ".rocmbuild"
    with statedir.TargetLock(other, shared=True):  # no state yet: creates nothing
        assert not other.exists()


def test_outside_prefix_state_dir_is_found_by_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCMBUILD_HOME", str(tmp_path / "home"))
    d = statedir.target_state_dir(tmp_path / "env", Path("/opt/rocm/lib"), outside=True)
    assert d.parent == tmp_path / "home" / "state" / "targets" and len(d.name) == 16  # ROCMBUILD_HOME/state
    statedir.register_outside_target(d, tmp_path / "env", Path("/opt/rocm/lib"))
    assert statedir.state_dirs_for(tmp_path / "env") == [d]
    assert statedir.state_dirs_for(tmp_path / "elsewhere") == []


def _record_fsyncs(mocker) -> list[str]:
    """Patch os.fsync to record the path of every fd it is given (then really fsync)."""
    real = os.fsync
    seen: list[str] = []

    def fsync(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    mocker.patch.object(os, "fsync", side_effect=fsync)
    return seen


def _no_link(mocker):
    import errno

    def no_link(src, dst, *a, **k):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    mocker.patch.object(actions.os, "link", side_effect=no_link)


def test_across_filesystems_files_are_copied_and_fsynced(art, prefix, mocker):
    """No hardlink possible (EXDEV): staging and backups copy (with mode and mtime), each copy is
    fsynced (data and inode) before the journal depends on it, the result is the same content, and
    a rollback restores the old content (a copy: another inode)."""
    before = snapshot(prefix)
    _no_link(mocker)
    fsynced = _record_fsyncs(mocker)
    out = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    sdir = prefix / ".rocmbuild"
    j = transaction.journals(sdir)[0]
    assert j.backup_copies == 1
    lib_step = next(st for a, st in j.changes if a.role == "library")
    assert lib_step.backup_copied is True
    new = prefix / "lib/libMIOpen.so.1.0"
    staged = actions.staged_name(new, out.id)
    # the staged copy (written under its temp name with O_EXCL, its writeback started) was fsynced
    # in place before the commit, and the backup copy (written as NAME.part, renamed) before use
    assert str(new) in fsynced and str(staged) not in fsynced
    (bk,) = [b for b in (sdir / "backups" / out.id).iterdir() if "libMIOpen" in b.name]
    assert str(bk) + ".part" in fsynced
    assert str(prefix / "lib") in fsynced and str(sdir / "backups" / out.id) in fsynced
    assert new.stat().st_ino != art.file("lib/libMIOpen.so.1.0").stat().st_ino
    assert new.read_bytes() == art.file("lib/libMIOpen.so.1.0").read_bytes()
    assert transaction.drift(sdir) == []
    transaction.execute(transaction.rollback_plan(sdir), verify=Verifier())
    assert snapshot(prefix) == before
    assert out.state == "committed"


def test_restore_from_a_copied_backup_verifies_cleanly(art, prefix, mocker):
    """Backups copied (EXDEV, as for --allow-outside-prefix with the state in $ROCMBUILD_HOME): a
    restore is a new inode, so the restored state is confirmed by size + mode (+ sha256 against
    the backup): a failed verification's rollback reports the old state verified (no WARNING) and
    removes its backups. (make_rollback's done-check: tests/unit/test_plan.py.)"""
    before = snapshot(prefix)
    lib = prefix / "lib/libMIOpen.so.1.0"
    orig = os.stat(lib)
    _no_link(mocker)
    p = plan.make(art, facts(prefix))
    v = Verifier(fail=True)
    # keep the original inode alive (as a process that has the library loaded does), so that the
    # restored copy cannot get its inode number back by reuse
    held = open(lib, "rb")
    try:
        with pytest.raises(VerifyError) as ei:
            transaction.execute(p, verify=v, verify_restored=v)
    finally:
        held.close()
    assert ei.value.details["restored"]["ok"] is True, ei.value.details["restored"]
    assert "WARNING" not in ei.value.message and "old state verifies again" in ei.value.message
    assert [e.restored for e in v.calls] == [False, True]  # the restored state was probed, not skipped
    assert snapshot(prefix) == before
    now = os.stat(lib)
    assert now.st_ino != orig.st_ino and (now.st_size, now.st_mtime_ns, now.st_mode) == (
        orig.st_size, orig.st_mtime_ns, orig.st_mode)
    sdir = prefix / ".rocmbuild"
    (j,) = transaction.journals(sdir)
    assert j.state == "rolled_back" and not (sdir / "backups" / j.id).exists()
    assert snapshot(prefix) == before


# --------------------------------------------------------------------------------------------
# pruning, rollback --to, a failing journal, fsync, unconfirmed restores, the history line


@pytest.fixture
def art_b(fixture_libs, tmp_path) -> Artifact:
    """A second artifact: the 3.5.1 library with other bytes (a "fix" build)."""
    import shutil

    src = tmp_path / "b-src"
    shutil.copytree(fixture_libs("3.5.1").parent, src, symlinks=True)
    lib = src / "lib" / "libMIOpen.so.1.0"
    data = lib.read_bytes() + b"\0fixed build\0"
    lib.unlink()
    lib.write_bytes(data)
    return make_artifact(tmp_path / "artifact-b", src / "lib", "3.5.1")


def test_prune_rejects_keep_below_one(prefix):
    for keep in (0, -1):
        with pytest.raises(ValueError, match="at least 1"):
            transaction.prune(prefix / ".rocmbuild", keep)


def test_boot_loop_with_keep_5_still_rolls_back_to_the_original(art, art_b, prefix):
    """7 applies alternating two artifacts with keep=5: the first apply's backups (the stock
    library) and the newest one's survive pruning, so `rollback --to 0` (the stock state)
    restores the original bytes and inodes."""
    before, ids = snapshot(prefix), inodes(prefix)
    sdir = prefix / ".rocmbuild"
    outs = []
    for n in range(7):
        a = art if n % 2 == 0 else art_b
        outs.append(transaction.execute(plan.make(a, facts(prefix)), verify=Verifier(), keep=5))
    first, last = outs[0].id, outs[-1].id
    kept = sorted(d.name for d in (sdir / "backups").iterdir())
    assert len(kept) == 5 and first in kept and last in kept
    assert [p["id"] for o in outs for p in o.pruned] == [outs[1].id, outs[2].id]  # the oldest unprotected
    transaction.execute(transaction.rollback_plan(sdir, to="0"), verify=Verifier(), keep=5)
    assert snapshot(prefix) == before and inodes(prefix) == ids


def test_prune_keeps_what_redo_needs_and_removes_undone_backups_first(art, art_b, prefix):
    sdir = prefix / ".rocmbuild"
    t1 = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier(), keep=None)
    t2 = transaction.execute(plan.make(art_b, facts(prefix)), verify=Verifier(), keep=None)
    t3 = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier(), keep=None)
    r4 = transaction.execute(transaction.rollback_plan(sdir), verify=Verifier(), keep=None)  # undoes t3
    m = transaction.model(sdir)
    assert m.stack == (t1.id, t2.id) and m.undone_by == {t3.id: r4.id}
    assert m.redo.rollback == r4.id and m.redo.reapplies == (t3.id,)
    # t2's backup holds the only inode a plain rollback restores; t3's is the one just rolled
    # back: `redo` may need it, so it is kept too
    assert transaction.protected_backups(sdir) == {t1.id, t2.id, t3.id, r4.id}
    assert [p["id"] for p in transaction.prune(sdir, 3)] == []
    # a new apply ends the redo: now t3 (undone, not redoable) goes first, though t2 is older
    t5 = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier(), keep=None)
    assert transaction.model(sdir).redo is None
    pruned = transaction.prune(sdir, 3)
    assert [p["id"] for p in pruned][0] == t3.id and not pruned[0]["in_effect"]
    assert t5.id in [d.name for d in (sdir / "backups").iterdir()]


def test_rollback_to_zero_undoes_everything_and_redo_brings_the_last_rollback_back(art, art_b, prefix):
    """apply a, apply b, rollback (undoes b), apply b2, rollback --to 0: nothing is in effect and
    b (undone by a rollback, then past an apply) does not come back; redo re-applies a and b2."""
    sdir = prefix / ".rocmbuild"
    a = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    b = transaction.execute(plan.make(art_b, facts(prefix)), verify=Verifier())
    r3 = transaction.execute(transaction.rollback_plan(sdir), verify=Verifier())
    s_a = snapshot(prefix)
    b2 = transaction.execute(plan.make(art_b, facts(prefix)), verify=Verifier())
    s_b2 = snapshot(prefix)
    r5 = transaction.execute(transaction.rollback_plan(sdir, to="0"), verify=Verifier())
    m = transaction.model(sdir)
    assert m.stack == () and m.undone_by == {b.id: r3.id, a.id: r5.id, b2.id: r5.id}
    assert m.kind(r5.id) == "rollback" and r5.plan.restores_to == "stock"
    r6 = transaction.execute(transaction.redo_plan(sdir), verify=Verifier())
    m = transaction.model(sdir)
    assert m.stack == (a.id, b2.id) and m.redone_by == {a.id: r6.id, b2.id: r6.id} and m.kind(r6.id) == "redo"
    assert snapshot(prefix) == s_b2 and m.redo is None
    # --to 1: the state after a (b2 out of effect again), then redo once more
    transaction.execute(transaction.rollback_plan(sdir, to="1"), verify=Verifier())
    assert transaction.model(sdir).stack == (a.id,) and snapshot(prefix) == s_a
    with pytest.raises(TargetError, match="nothing to roll back") as ei:
        transaction.rollback_plan(sdir, to=a.id)  # the state after a is the state now
    assert ei.value.exit_code == 2
    with pytest.raises(TargetError, match=r"a rollback never re-applies \(it only takes applies out of effect\)$"):
        transaction.rollback_plan(sdir, to=b.id)  # b was undone: that state needs a re-apply


def test_rollback_to_resolves_numbers_and_ids_among_all_journals(art, prefix):
    sdir = prefix / ".rocmbuild"
    t1 = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    r2 = transaction.execute(transaction.rollback_plan(sdir), verify=Verifier())
    assert transaction.model(sdir).stack == () and [j.id for j in transaction.active(sdir)] == [r2.id]
    for empty in ("", "  "):
        with pytest.raises(InputError, match="needs a transaction number") as ei:
            transaction.rollback_plan(sdir, to=empty)
        assert ei.value.exit_code == 2
    with pytest.raises(InputError, match="no transaction") as ei:
        transaction.rollback_plan(sdir, to="0009")
    assert ei.value.details["known"] == [t1.id, r2.id] and r2.id in ei.value.message
    # the number, the id and a unique prefix of it name the same transaction
    for to in ("1", "0001", t1.id, t1.id[:8]):
        with pytest.raises(TargetError, match=f"cannot roll back to the state after {t1.id}: {t1.id} was in effect"):
            transaction.rollback_plan(sdir, to=to)
    for to in ("0", "stock", "2", r2.id):  # the stock state, the state after the rollback: the state now
        with pytest.raises(TargetError, match="nothing to roll back"):
            transaction.rollback_plan(sdir, to=to)


def test_a_failing_journal_write_after_the_first_rename_still_reverts_everything(art, prefix, mocker):
    """ENOSPC from the journal write that records the first rename: the swap stops, every path
    is reverted by rename from its backup although no further journal write succeeds either, and
    the original error is raised (as the cause); the backups stay until the journal is finished,
    which the next recovery does."""
    import errno

    before, ids = snapshot(prefix), inodes(prefix)
    real_save = transaction.Journal.save
    disk = {"full": False}

    def save(self):
        if disk["full"] or (self.state == "swapping" and any(st.swapped for st in self.steps)):
            disk["full"] = True
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        return real_save(self)

    mocker.patch.object(transaction.Journal, "save", autospec=True, side_effect=save)
    p = plan.make(art, facts(prefix))
    with pytest.raises(VerifyError) as ei:
        transaction.execute(p, verify=Verifier())
    cause = ei.value.__cause__
    assert isinstance(cause, OSError) and cause.errno == errno.ENOSPC
    assert "No space left on device" in ei.value.message and "journal could not be updated" in ei.value.message
    assert snapshot(prefix) == before and inodes(prefix) == ids
    assert not list(prefix.rglob(".*rocmbuild-*"))
    sdir = Path(p.state_dir)
    (j,) = transaction.pending(sdir)  # on disk the journal still says "swapping"
    assert j.state == "swapping" and (sdir / "backups" / j.id).is_dir()
    mocker.stopall()  # space again
    (rec,) = transaction.recover(sdir)
    assert rec["restored"]["ok"] is True
    assert snapshot(prefix) == before and inodes(prefix) == ids
    assert transaction.pending(sdir) == [] and not (sdir / "backups" / j.id).exists()


def test_stage_and_new_directories_are_fsynced(art, prefix, mocker):
    """DESIGN step 4: a staged copy's directory entry is fsynced at once, its bytes (writeback
    started while it was copied) by make_durable, before the commit; every directory created (data parents, journal/, backups/, backups/<txn>/) is followed by an
    fsync of its parent."""
    p = plan.make(art, facts(prefix))
    rts = Roots.of(p.prefix, p.libdir, p.outside, p.state_dir)
    fsynced = _record_fsyncs(mocker)
    lib_action = next(a for a in p.actions if a.role == "library")
    fa = actions.make(lib_action, "0000-test", rts, 0)
    after = fa.stage()
    # the directory holding the staged copy; its bytes once placed (make_durable, before the commit)
    assert fsynced == [str(prefix / "lib")]
    saved = prefix / "stock.so"
    os.link(prefix / "lib/libMIOpen.so.1.0", saved)
    fa.apply()
    fa.make_durable(after)
    assert fsynced == [str(prefix / "lib"), str(prefix / "lib"), str(prefix / "lib/libMIOpen.so.1.0")]  # the rename too
    with pytest.raises(OSError, match="was replaced while the transaction ran"):
        fa.make_durable(replace(after, inode=after.inode + 1))
    os.replace(saved, prefix / "lib/libMIOpen.so.1.0")  # the stock library again, for the rest
    fa.discard()
    fsynced.clear()
    data_action = next(a for a in p.actions if a.role == "data")
    assert data_action.create_dirs == tuple(str(prefix / d) for d in ("share", "share/miopen", "share/miopen/db"))
    actions.make(data_action, "0000-test", rts, 3).stage()
    assert fsynced[:3] == [str(prefix), str(prefix / "share"), str(prefix / "share/miopen")]
    assert fsynced[3:] == [str(prefix / "share/miopen/db")]  # the staged file's directory entry
    actions.make(data_action, "0000-test", rts, 3).discard()
    rts.close()
    shutil.rmtree(prefix / ".rocmbuild")
    fsynced.clear()
    out = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    sdir = prefix / ".rocmbuild"
    assert str(prefix) in fsynced  # .rocmbuild/ created
    assert str(sdir) in fsynced  # journal/ and backups/ created
    assert str(sdir / "backups") in fsynced  # backups/<txn>/ created
    assert str(sdir / "backups" / out.id) in fsynced


def test_unconfirmed_restore_keeps_the_backups_and_says_so(art, prefix, mocker):
    lib = prefix / "lib/libMIOpen.so.1.0"
    real_revert = actions.ReplaceFile.revert

    def revert(self, after):
        return "" if self.dest == lib else real_revert(self, after)  # the library is not put back

    mocker.patch.object(actions.ReplaceFile, "revert", autospec=True, side_effect=revert)
    p = plan.make(art, facts(prefix))
    v = Verifier(fail=True)
    with pytest.raises(VerifyError) as ei:
        transaction.execute(p, verify=v, verify_restored=v)
    restored = ei.value.details["restored"]
    sdir = Path(p.state_dir)
    (j,) = transaction.journals(sdir)
    assert restored["ok"] is False and restored["paths"] and str(lib) in restored["paths"][0]
    assert restored["backups_kept"] == str(sdir / "backups" / j.id)
    assert "WARNING" in ei.value.message and "backups are kept" in ei.value.message
    assert j.state == "rolled_back" and any("are kept" in m for m in j.revert_messages)
    (bk,) = [b for b in (sdir / "backups" / j.id).iterdir() if "libMIOpen" in b.name]
    assert (bk.stat().st_dev, bk.stat().st_ino) == (p.actions[0].before.dev, p.actions[0].before.inode)
    assert transaction.needs_recovery(sdir) is False


def test_killed_after_commit_recovery_writes_the_history_line_once(art, prefix, tmp_path):
    p = plan.make(art, facts(prefix))
    pj = tmp_path / "plan.json"
    pj.write_text(json.dumps(p.to_json()))
    r = _py(RUNNER, pj, "ok", env={"ROCMBUILD_FAILPOINTS": "after-commit"})
    assert r.returncode == 137, r.stderr
    sdir = Path(p.state_dir)
    (j,) = transaction.journals(sdir)
    assert j.state == "committed" and j.history_written is False
    assert statedir.read_history(sdir) == [] and transaction.pending(sdir) == []
    assert transaction.needs_recovery(sdir) is True
    r = _py(RECOVER, sdir)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr  # nothing rolled back ...
    assert "wrote the missing history line" in r.stderr
    (line,) = statedir.read_history(sdir)  # ... but the history line is there
    assert line.id == j.id and line.outcome == "committed"
    assert transaction.Journal.load(j.path).history_written is True
    assert transaction.needs_recovery(sdir) is False
    transaction.recover(sdir)
    assert len(statedir.read_history(sdir)) == 1  # idempotent
    assert [x.id for x in transaction.active(sdir)] == [j.id]


def test_redo_then_boot_loop_keeps_the_original(art, art_b, prefix):
    """A redo moves the original inode into the redo's backups; pruning protects files by
    identity, so a boot loop afterwards (default keep 5) still lets `rollback --to 0` bring the
    stock library back, byte for byte."""
    before, ids = snapshot(prefix), inodes(prefix)
    sdir = prefix / ".rocmbuild"
    first = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    transaction.execute(transaction.rollback_plan(sdir), verify=Verifier())
    transaction.execute(transaction.redo_plan(sdir), verify=Verifier())  # redo `first`
    assert transaction.model(sdir).stack == (first.id,)
    for n in range(6):
        transaction.execute(plan.make(art if n % 2 else art_b, facts(prefix)), verify=Verifier())
    transaction.execute(transaction.rollback_plan(sdir, to="0"), verify=Verifier())
    assert snapshot(prefix) == before and inodes(prefix) == ids


def test_a_failing_commit_write_reverts_at_once(art, prefix, mocker):
    """ENOSPC when the journal is marked committed: the change is reverted now (exit 4 path),
    not left for the next command's recovery."""
    import errno

    before = snapshot(prefix)
    real = transaction.Journal.save

    def save(self):
        if self.state == "committed":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self)

    mocker.patch.object(transaction.Journal, "save", autospec=True, side_effect=save)
    p = plan.make(art, facts(prefix))
    with pytest.raises(VerifyError) as ei:
        transaction.execute(p, verify=Verifier())
    assert "No space left" in str(ei.value.message) + str(ei.value.__cause__)
    assert snapshot(prefix) == before
    assert [j.state for j in transaction.journals(Path(p.state_dir))] == ["rolled_back"]


def test_failed_apply_over_copied_backups_is_not_drift(art, art_b, prefix, mocker):
    """Backups on another filesystem are copies: reverting a failed apply restores the previous
    file as a new inode with the same bytes. That is not drift: status reports none and a plain
    rollback needs no --force. A really changed file (other bytes) still is drift."""
    import errno

    mocker.patch.object(actions.os, "link", side_effect=OSError(errno.EXDEV, "Invalid cross-device link"))
    sdir = prefix / ".rocmbuild"
    transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    s_a = snapshot(prefix)
    transaction.execute(plan.make(art_b, facts(prefix)), verify=Verifier())
    s_b = snapshot(prefix)
    with pytest.raises(VerifyError):
        transaction.execute(plan.make(art, facts(prefix)), verify=Verifier(fail=True), verify_restored=Verifier())
    assert snapshot(prefix) == s_b
    assert transaction.drift(sdir) == []
    transaction.execute(transaction.rollback_plan(sdir), verify=Verifier())
    assert snapshot(prefix) == s_a
    # other bytes, same size and mode: drift all the same
    lib = prefix / "lib" / "libMIOpen.so.1.0"
    data = bytearray(lib.read_bytes())
    data[-1] ^= 0xFF
    tmp = lib.with_name("clobber.tmp")
    tmp.write_bytes(bytes(data))
    os.chmod(tmp, lib.stat().st_mode)
    os.replace(tmp, lib)
    assert [d["path"] for d in transaction.drift(sdir)] == [str(lib)]
    with pytest.raises(TargetError, match="drift"):
        transaction.rollback_plan(sdir)


# --------------------------------------------------------------------------------------------
# the journal as a typed value, the transaction as its only writer


def test_a_journal_is_a_typed_value_that_round_trips(art, prefix):
    """Read once into values (each step a Step, its ``after`` a PathState, the plan a Plan, the
    prefix's identity a PrefixIdentity); written whole, a journal reads back equal to itself."""
    from rocmbuild.swap.journal import Step
    from rocmbuild.swap.landing import PrefixIdentity
    from rocmbuild.swap.pathstate import PathState

    out = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    (j,) = transaction.journals(prefix / ".rocmbuild")
    assert j.id == out.id and isinstance(j.plan, plan.Plan) and isinstance(j.prefix_identity, PrefixIdentity)
    assert j.steps and all(isinstance(st, Step) and isinstance(st.after, PathState) and st.swapped for st in j.steps)
    lib = prefix / "lib/libMIOpen.so.1.0"
    lib_step = next(st for a, st in j.changes if a.path == str(lib))
    assert (lib_step.after.dev, lib_step.after.inode) == (lib.stat().st_dev, lib.stat().st_ino)
    assert transaction.Journal.from_json(j.path, j.to_json()) == j
    again = j.save()
    assert transaction.Journal.load(j.path) == again and again.updated is not None


def test_fields_a_journal_does_not_name_are_kept_when_it_is_written_again(art, prefix):
    """A field another rocmbuild wrote (unknown here) is kept as read and written back whole when
    this version changes the journal (docs/state-files.md: ignored, never dropped)."""
    sdir = prefix / ".rocmbuild"
    out = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    path = sdir / "journal" / f"{out.id}.json"
    data = json.loads(path.read_text())
    data["from_a_newer_rocmbuild"] = {"x": [1, 2]}
    data["history_written"] = False  # as if killed before its history line: recovery writes it
    path.write_text(json.dumps(data))
    (sdir / "history.jsonl").unlink()
    (j,) = transaction.journals(sdir)
    assert j.extra == {"from_a_newer_rocmbuild": {"x": [1, 2]}}
    assert transaction.recover(sdir) == []  # writes the history line, then the journal again
    assert json.loads(path.read_text())["from_a_newer_rocmbuild"] == {"x": [1, 2]}
    assert transaction.Journal.load(path).history_written is True
    transaction.execute(transaction.rollback_plan(sdir), verify=Verifier())
    assert json.loads(path.read_text())["from_a_newer_rocmbuild"] == {"x": [1, 2]}


def test_the_transaction_marks_steps_in_memory_and_writes_the_journal_whole(art, prefix, mocker):
    """Transaction.mark changes a step in memory only; Transaction.set writes the whole journal
    through Journal.save (the one writer); a write that fails keeps the change in memory for the
    rollback that follows, and the file keeps the last whole journal."""
    import errno

    from rocmbuild.swap.journal import Journal, Step, journal_dir, now
    from rocmbuild.swap.transaction import Transaction

    p = plan.make(art, facts(prefix))
    sdir = Path(p.state_dir)
    j = Journal(journal_dir(sdir) / "0001-x.json", "0001-x", p.verb, "planned", p,
                tuple(Step(i) for i in range(len(p.actions))), created=now()).save()
    on_disk = j.path.read_bytes()
    with Transaction.open(j) as t:
        assert [fa.action for fa in t.actions] == [p.actions[st.index] for st in t.steps]
        t.mark(0, swapped=True)
        assert t.steps[0].swapped and j.path.read_bytes() == on_disk  # not written
        assert not Journal.load(j.path).steps[0].swapped
        t.set(state="staged")
        loaded = Journal.load(j.path)
        assert loaded.state == "staged" and loaded.steps[0].swapped and loaded == t.journal
        written = j.path.read_bytes()
        mocker.patch.object(Journal, "save", autospec=True, side_effect=OSError(errno.ENOSPC, "No space left"))
        with pytest.raises(OSError):
            t.set(state="backed_up", backup_copies=3)
        assert t.state == "backed_up" and t.journal.backup_copies == 3  # the change is the transaction's
        assert j.path.read_bytes() == written  # the file: the last whole journal


def test_a_restored_state_whose_probe_raises_is_a_failed_check_in_the_documented_shape(art, prefix):
    """The verification of the restored state raises (the target's Python is gone, say): the
    rollback still completes, and ``restored.failures`` holds a ``probe`` check as every failure is
    documented, ``{name, expected, found, message}`` (docs/json.md)."""
    before = snapshot(prefix)

    def restored_probe(exp: transaction.Expectation):
        raise RuntimeError("the target's Python is gone")

    with pytest.raises(VerifyError) as ei:
        transaction.execute(plan.make(art, facts(prefix)), verify=Verifier(fail=True), verify_restored=restored_probe)
    restored = ei.value.details["restored"]
    assert restored["ok"] is False and restored["failures"] == [
        {"name": "probe", "expected": "the restored state answers the probe", "found": "the target's Python is gone",
         "message": ""}]
    assert ei.value.details["failures"] == [{"name": "identity", "expected": "x", "found": "rejected by the fake", "message": ""}]
    assert "WARNING: the restored old state did not verify: probe: the target's Python is gone" in ei.value.message
    assert snapshot(prefix) == before
