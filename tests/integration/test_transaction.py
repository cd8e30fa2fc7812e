"""The transaction core on real files, without a target Python: a real artifact directory made
from the fixture library, a conda-style lib dir, and a verify callback standing in for the probe.

What this proves beyond tests/integration/test_apply.py: backups are hardlinks of the original
inode (no byte copied), staged files are hardlinks of the artifact, every failure mode before and
after the first rename leaves exactly the old state, recovery is idempotent and survives being
killed itself, the lock excludes a second holder in the same process, and drift is detected.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocmbuild import actions, artifact, plan, state, transaction
from rocmbuild.artifact import Artifact, Manifest
from rocmbuild.errors import LockedError, TargetError, VerifyError
from tests.envs import stage_library
from tests.txn_helpers import REPO, inodes, snapshot

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
    state.atomic_write_json(root / "manifest.json", m.to_json())
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
    assert j.state == "committed" and j.data["backup_copies"] == 0
    # the backup is the original inode (a hardlink): no byte copied
    (bk,) = [b for b in (Path(p.state_dir) / "backups" / out.id).iterdir() if "libMIOpen" in b.name]
    assert (bk.stat().st_dev, bk.stat().st_ino) == (orig.st_dev, orig.st_ino)
    # the placed file is the artifact's file (a hardlink), never a symlink into the cache
    new = prefix / "lib/libMIOpen.so.1.0"
    assert not new.is_symlink() and new.stat().st_ino == art.file("lib/libMIOpen.so.1.0").stat().st_ino
    assert (prefix / "share/miopen/db/gfx1151.db.txt").read_bytes() == b"fixture perf db\n"
    assert art.intact() == []
    (line,) = state.read_history(Path(p.state_dir))
    assert line["id"] == out.id and line["outcome"] == "committed" and line["version_before"] == "3.5.0"
    assert transaction.drift(Path(p.state_dir)) == []


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
    real = actions.link_or_copy
    calls = {"n": 0}

    def flaky(src, dst):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device", str(dst))
        return real(src, dst)

    mocker.patch.object(actions, "link_or_copy", side_effect=flaky)
    p = plan.make(art, facts(prefix))
    with pytest.raises(TargetError) as ei:
        transaction.execute(p, verify=Verifier())
    assert "nothing was changed" in ei.value.hint
    assert snapshot(prefix) == before and inodes(prefix) == ids
    assert not list(prefix.rglob(".*rocmbuild-new-*"))


RUNNER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from rocmbuild import plan, transaction
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
    from rocmbuild import transaction
    print(len(transaction.recover(sys.argv[1])))
""")


def _py(code: str, *args, env=None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=e)


@pytest.mark.parametrize("point", transaction.FAILPOINTS)
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
    # a recovery that has several paths to restore is itself killed half way ...
    assert r.returncode in (0, 137), r.stderr
    r = _py(RECOVER, sdir)
    assert r.returncode == 0, r.stderr
    r2 = _py(RECOVER, sdir)
    assert r2.stdout.strip() == "0"  # ... and recovery finishes, once
    assert snapshot(prefix) == before and inodes(prefix) == ids
    assert not list(prefix.rglob(".*rocmbuild-*"))
    assert transaction.pending(sdir) == []
    assert state.read_history(sdir)[-1]["outcome"].startswith("recovered: rolled back")
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
    with state.TargetLock(sdir):
        assert (sdir / "lock").read_text().strip() == str(os.getpid())
        with pytest.raises(LockedError) as ei:
            state.TargetLock(sdir).acquire()
        assert ei.value.exit_code == 5 and f"pid {os.getpid()}" in ei.value.message
        with pytest.raises(LockedError):
            state.TargetLock(sdir, shared=True).acquire()
    with state.TargetLock(sdir, shared=True):
        pass
    other = tmp_path / "other" / ".rocmbuild"
    with state.TargetLock(other, shared=True):  # no state yet: creates nothing
        assert not other.exists()


def test_outside_prefix_state_dir_is_found_by_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCMBUILD_HOME", str(tmp_path / "home"))
    d = state.target_state_dir(tmp_path / "env", Path("/opt/rocm/lib"), outside=True)
    assert d.parent == tmp_path / "home" / "targets" and len(d.name) == 16
    state.register_outside_target(d, tmp_path / "env", Path("/opt/rocm/lib"))
    assert state.state_dirs_for(tmp_path / "env") == [d]
    assert state.state_dirs_for(tmp_path / "elsewhere") == []


def test_across_filesystems_files_are_copied_and_fsynced(art, prefix, mocker):
    """No hardlink possible (EXDEV): staging and backups copy (with mode and mtime), the result is
    the same content, and a rollback restores the old content (a copy: another inode)."""
    import errno

    before = snapshot(prefix)

    def no_link(src, dst, *a, **k):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    mocker.patch.object(actions.os, "link", side_effect=no_link)
    out = transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    sdir = prefix / ".rocmbuild"
    j = transaction.journals(sdir)[0]
    assert j.data["backup_copies"] == 1
    new = prefix / "lib/libMIOpen.so.1.0"
    assert new.stat().st_ino != art.file("lib/libMIOpen.so.1.0").stat().st_ino
    assert new.read_bytes() == art.file("lib/libMIOpen.so.1.0").read_bytes()
    assert transaction.drift(sdir) == []
    transaction.execute(transaction.rollback_plan(sdir), verify=Verifier())
    assert snapshot(prefix) == before
    assert out.state == "committed"
