"""`rocmbuild apply / rollback / history / recover / status` on real fake-torch environments.

Real venvs whose fake torch dlopens a real libMIOpen, real artifacts built once per session by the
real build (the session's ``txn_world``, tests/support/world.py), real `python -m rocmbuild` processes, real exit codes --
including the `os._exit(137)` of every failpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rocmbuild.fs import disk
from tests.support.cli import rb
from tests.support.envs import stage_library
from tests.support.snapshots import full_listing, inodes, snapshot

pytestmark = pytest.mark.slow

LAYOUTS = ["conda", "wheel"]


def _real_lib(env) -> Path:
    return env.libfile


def _json(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def _version_of(env) -> str:
    r = rb("status", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    return _json(r)["torch"]["runtime_version"]


@pytest.fixture
def env350(target_env):
    def make(layout="conda", **kw):
        return target_env("3.5.0", layout=layout, compile_version="3.5.1", **kw)

    return make


@pytest.mark.parametrize("layout", LAYOUTS)
def test_apply_then_rollback_restores_every_path(txn_home, env350, layout):
    env = env350(layout)
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    data = _json(r)
    assert data["ok"] and not data["already_applied"] and data["txn"]
    assert data["plan"]["layout"] == layout
    art = txn_home.artifacts["mini"]
    lib_dest = Path(data["plan"]["library"])
    # the placed file is the target's own copy of the artifact's file (never its inode), and the
    # target loads it
    st, ast = os.stat(lib_dest), os.stat(art.file("lib/libMIOpen.so.1.0"))
    assert (st.st_dev, st.st_ino) != (ast.st_dev, ast.st_ino) and ast.st_nlink == 1
    assert lib_dest.read_bytes() == art.file("lib/libMIOpen.so.1.0").read_bytes()
    assert _version_of(env) == "3.5.1"
    data_file = Path(data["plan"]["libdir"]).parent / "share/miopen/db/gfx1151.db.txt"
    assert data_file.read_bytes() == b"fixture perf db\n"
    if layout == "wheel":
        assert lib_dest == env.libfile and not any(p.is_symlink() for p in lib_dest.parent.iterdir())
    # status reports the transaction in effect
    s = _json(rb("status", "--env", env.prefix, "--json"))
    assert [t["id"] for t in s["changes"]["in_effect"]] == [data["txn"]] and not s["changes"]["drift"]

    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    rb_data = _json(r)
    assert rb_data["undoes"] == [data["txn"]]
    assert snapshot(env.prefix) == before  # content, mode, link targets; created dirs gone
    assert inodes(env.prefix) == ids  # the original inode itself is back
    assert _version_of(env) == "3.5.0"
    assert not list(Path(env.prefix).rglob("*.rocmbuild-new-*"))

    h = _json(rb("history", "--env", env.prefix, "--json"))
    assert [t["verb"] for t in h["transactions"]] == ["apply", "rollback"]
    first = h["transactions"][0]
    assert first["version_before"] == "3.5.0" and first["version_after"] == "3.5.1"
    assert first["recipe"] == "mini" and first["commit"] == art.manifest.commit and first["outcome"] == "committed"
    # every backup is a hardlink (+0 bytes copied): the apply's of the original (back in the target,
    # so it costs nothing); the rollback's of the copy the apply placed, which only it keeps alive now
    sdir = Path(rb_data["target"]["state_dir"], "backups")
    originals = [p for p in (sdir / data["txn"]).iterdir() if p.is_file()]
    assert originals and all(p.stat().st_nlink > 1 for p in originals)
    placed = [p for p in (sdir / rb_data["txn"]).iterdir() if p.is_file()]
    assert placed and all(p.stat().st_nlink == 1 for p in placed)
    assert h["backup_bytes"] == sum(p.stat().st_blocks * 512 for p in placed)
    assert "backups keep alive" in h["backup_bytes_note"]


def test_apply_twice_is_a_noop_touching_no_file(txn_home, env350):
    env = env350("conda")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    listing = full_listing(env.prefix)
    history = (Path(env.prefix) / ".rocmbuild/history.jsonl").read_bytes()
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert _json(r)["already_applied"] is True
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)
    assert r.returncode == 0 and "already applied" in r.stdout
    assert full_listing(env.prefix) == listing  # same paths, inodes, mtimes, sizes: nothing written
    assert (Path(env.prefix) / ".rocmbuild/history.jsonl").read_bytes() == history


@pytest.mark.parametrize("layout", LAYOUTS)
def test_failed_verification_rolls_back_exit_4(txn_home, env350, layout):
    env = env350(layout)
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--expect", "3.5.9", "--json")
    assert r.returncode == 4, r.stderr
    err = _json(r)["error"]
    assert "verification failed; every change was rolled back" in err["message"]
    assert [f["name"] for f in err["details"]["failures"]] == ["version"]
    assert err["details"]["restored"]["ok"] is True  # the probe confirmed the old state
    assert "3.5.9" in r.stderr and "old state verifies again" in r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
    assert _version_of(env) == "3.5.0"
    h = _json(rb("history", "--env", env.prefix, "--json"))
    assert h["transactions"][-1]["outcome"].startswith("rolled back")
    assert not any(Path(env.prefix, ".rocmbuild/backups").iterdir())


def test_incompatible_artifact_is_refused_before_anything(txn_home, env350):
    env = env350("conda")
    before, listing = snapshot(env.prefix), full_listing(env.prefix)
    r = rb("apply", txn_home.recipe("mini-develop"), "--env", env.prefix)
    assert r.returncode == 2, r.stderr
    assert "miopen-3.5.1" in r.stderr and "3.6.0" in r.stderr
    assert snapshot(env.prefix) == before and full_listing(env.prefix) == listing
    assert not (Path(env.prefix) / ".rocmbuild").exists()


# --------------------------------------------------------------------------------------------
# failpoints: kill at every step, then status + recover: exactly the old state; next apply works

APPLY_POINTS = ["after-journal", "after-stage", "after-backup", "mid-swap", "after-swap", "after-verify"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("point", APPLY_POINTS + ["mid-rollback"])
def test_failpoint_then_status_and_recover_restore_the_old_state(txn_home, env350, point, layout):
    env = env350(layout)
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    args = ["apply", txn_home.recipe("mini"), "--env", env.prefix]
    if point == "mid-rollback":
        args += ["--expect", "3.5.9"]  # verification fails, the rollback is killed half way
    r = rb(*args, env={"ROCMBUILD_FAILPOINTS": point})
    assert r.returncode == 137, (r.returncode, r.stderr)
    assert f"failpoint {point}" in r.stderr

    s = rb("status", "--env", env.prefix, "--json")
    assert s.returncode == 0, s.stderr
    unfinished = _json(s)["changes"]["unfinished"]
    assert len(unfinished) == 1 and unfinished[0]["verb"] == "apply"

    r = rb("recover", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    rec = _json(r)["recovered"]
    assert len(rec) == 1 and rec[0]["restored"]["ok"] is True
    assert "recovered interrupted apply" in r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
    assert not list(Path(env.prefix).rglob("*.rocmbuild-*-2*"))  # no staged/restore temps left
    assert _version_of(env) == "3.5.0"

    again = rb("recover", "--env", env.prefix)
    assert again.returncode == 0 and "nothing to recover" in again.stdout
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert _version_of(env) == "3.5.1"


def test_failpoint_in_a_rollback_transaction_recovers_to_the_applied_state(txn_home, env350):
    env = env350("wheel")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    applied, ids = snapshot(env.prefix), inodes(env.prefix)
    r = rb("rollback", "--env", env.prefix, env={"ROCMBUILD_FAILPOINTS": "mid-swap"})
    assert r.returncode == 137
    # the next command that changes the target recovers first, and says so
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert "recovered interrupted rollback" in r.stderr
    assert _json(r)["recovered"][0]["interrupted_at"] == "swapping"
    assert _version_of(env) == "3.5.0"
    # and `redo` re-applies exactly what that rollback undid
    assert rb("redo", "--env", env.prefix).returncode == 0
    assert snapshot(env.prefix) == applied and inodes(env.prefix) == ids


def test_killed_between_commit_and_history_the_next_command_writes_the_line(txn_home, env350):
    env = env350("conda")
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, env={"ROCMBUILD_FAILPOINTS": "after-commit"})
    assert r.returncode == 137, r.stderr
    assert _json(rb("history", "--env", env.prefix, "--json"))["transactions"] == []
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")  # already applied ...
    assert r.returncode == 0 and _json(r)["already_applied"] is True, r.stderr
    assert "wrote the missing history line" in r.stderr  # ... after the recovery wrote the line
    (t,) = _json(rb("history", "--env", env.prefix, "--json"))["transactions"]
    assert t["outcome"] == "committed" and t["in_effect"] is True
    assert rb("recover", "--env", env.prefix).returncode == 0
    assert len(_json(rb("history", "--env", env.prefix, "--json"))["transactions"]) == 1


def test_rollback_to_an_incompatible_stock_library_warns_but_succeeds(txn_home, target_env):
    """The env ships libMIOpen 3.6.0 under a torch compiled against 3.5.1 (broken before rocmbuild
    came). apply mini (3.5.1) fixes it; rollback must still be able to go back: identity and
    version are required, the compatibility failure is a warning (stderr and JSON)."""
    env = target_env("3.6.0", compile_version="3.5.1")
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert _version_of(env) == "3.5.1"
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    data = _json(r)
    assert [w["name"] for w in data["verdict"]["warnings"]] == ["compatibility"]
    assert data["verdict"]["ok"] is True and data["verdict"]["failures"] == []
    assert "fails the compatibility check" in r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
    assert _version_of(env) == "3.6.0"
    h = _json(rb("history", "--env", env.prefix, "--json"))
    assert [t["verb"] for t in h["transactions"]] == ["apply", "rollback"]
    assert all(t["outcome"] == "committed" for t in h["transactions"])


# --------------------------------------------------------------------------------------------
# running processes, locking


LOOPER = textwrap.dedent("""
    import ctypes, os, sys, time
    lib = ctypes.CDLL(sys.argv[1])
    M, m, p = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    seen = set()
    print("ready", flush=True)
    n = 0
    while not os.path.exists(sys.argv[2]):
        assert lib.miopenGetVersion(ctypes.byref(M), ctypes.byref(m), ctypes.byref(p)) == 0
        seen.add("%d.%d.%d" % (M.value, m.value, p.value))
        n += 1
    print(",".join(sorted(seen)), n, flush=True)
""")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_process_using_the_old_library_survives_apply_and_rollback(txn_home, env350, layout, tmp_path):
    env = env350(layout)
    load = env.prefix / "lib/libMIOpen.so.1" if layout == "conda" else env.libfile
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-c", LOOPER, str(load), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
        assert _version_of(env) == "3.5.1"  # a new process loads the new library ...
        assert rb("rollback", "--env", env.prefix).returncode == 0
        assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
        assert proc.poll() is None  # ... while this one is still running
        stop.touch()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0  # not killed by SIGBUS/SIGSEGV
    versions, calls = out.split()
    assert versions == "3.5.0" and int(calls) > 1000  # it kept calling, and kept seeing the old library


HOLDER = textwrap.dedent("""
    import sys, time
    from rocmbuild.fs import disk
    from rocmbuild.home import cache_home
    from rocmbuild.swap import statedir
    lock = statedir.TargetLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    lock.release()
""")


def test_two_applies_at_once_one_gets_exit_5_naming_the_pid(txn_home, env350):
    env = env350("conda")
    before = snapshot(env.prefix)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(env.prefix / ".rocmbuild"), "600"],
                              stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).parents[2]))
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
        assert r.returncode == 5, r.stderr
        assert f"pid {holder.pid}" in _json(r)["error"]["message"]
        assert snapshot(env.prefix) == before
        r = rb("rollback", "--env", env.prefix)
        # nothing to roll back is found before locking (no state dir with a transaction in effect)
        assert r.returncode == 2 and "nothing to roll back" in r.stderr, r.stderr
    finally:
        holder.kill()
        holder.wait()


def test_wait_queues_behind_the_holder(txn_home, env350):
    env = env350("conda")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(env.prefix / ".rocmbuild"), "2"],
                              stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).parents[2]))
    try:
        assert holder.stdout.readline().strip() == "locked"
        t = time.monotonic()
        r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--wait")
        assert r.returncode == 0, r.stderr
        assert time.monotonic() - t > 1.0
    finally:
        holder.kill()
        holder.wait()


# --------------------------------------------------------------------------------------------
# refusals: exit 2, nothing changed


def _ro_bind(path: Path) -> bool:
    r = subprocess.run(["mount", "--bind", "-o", "ro", str(path), str(path)], capture_output=True)
    return r.returncode == 0


def test_read_only_lib_dir_exit_2_nothing_changed(txn_home, env350, mocker):
    """Root ignores chmod 0555, so a real read-only bind mount is used when we may mount; else the
    write check is made to fail (os.access for that directory), in process."""
    env = env350("conda")
    libdir = env.prefix / "lib"
    before, listing = snapshot(env.prefix), full_listing(env.prefix)
    if shutil.which("mount") and _ro_bind(libdir):
        try:
            r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)
        finally:
            subprocess.run(["umount", str(libdir)], check=True)
        assert r.returncode == 2, r.stderr
        assert "not writable" in r.stderr and "nothing was changed" in r.stderr
    else:  # pragma: no cover - unprivileged CI
        from rocmbuild.cli import app as cli

        real_access = os.access
        mocker.patch("rocmbuild.flows.guards.os.access",
                     side_effect=lambda p, m, *a, **k: False if Path(p) == libdir else real_access(p, m, *a, **k))
        assert cli.main(["apply", txn_home.recipe("mini"), "--env", str(env.prefix)]) == 2
    assert snapshot(env.prefix) == before and full_listing(env.prefix) == listing


def test_not_enough_space_exit_2(txn_home, env350, mocker, capsys):
    """Only bytes that must be copied count: put the artifact on "another filesystem" by making
    the hardlink impossible to rely on (device numbers differ) and the disk report tiny."""
    from rocmbuild.cli import app as cli

    env = env350("conda")
    before = snapshot(env.prefix)
    real_stat = os.stat
    art_tree = str(txn_home.artifacts["mini"].tree)

    class FakeStat:
        def __init__(self, st):
            self._st = st

        def __getattr__(self, k):
            return getattr(self._st, k)

        @property
        def st_dev(self):
            return self._st.st_dev + 1

    mocker.patch("rocmbuild.flows.guards.os.stat",
                 side_effect=lambda p, *a, **k: FakeStat(real_stat(p, *a, **k)) if str(p).startswith(art_tree)
                 else real_stat(p, *a, **k))
    mocker.patch("rocmbuild.flows.guards.shutil.disk_usage", return_value=shutil._ntuple_diskusage(100, 100, 1000))
    code = cli.main(["apply", txn_home.recipe("mini"), "--env", str(env.prefix)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "not enough free space" in err and "nothing was changed" in err
    assert snapshot(env.prefix) == before
    assert not (Path(env.prefix) / ".rocmbuild").exists()


def test_library_outside_the_prefix_exit_2_unless_allowed(txn_home, env350, fixture_libs, tmp_path):
    env = env350("conda")
    system = tmp_path / "opt-rocm" / "lib"
    stage_library(fixture_libs("3.5.0"), system)
    env.configure(load=str(system / "libMIOpen.so.1"))
    before, sys_before = snapshot(env.prefix), snapshot(system.parent)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)
    assert r.returncode == 2, r.stderr
    assert "outside the prefix" in r.stderr and "--allow-outside-prefix" in r.stderr
    assert snapshot(env.prefix) == before and snapshot(system.parent) == sys_before
    assert not (Path(env.prefix) / ".rocmbuild").exists()

    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--allow-outside-prefix", "--json")
    assert r.returncode == 0, r.stderr
    sdir = Path(_json(r)["target"]["state_dir"])
    assert sdir.parent == Path(os.environ["ROCMBUILD_HOME"]) / "state" / "targets"  # home.state_home()
    assert disk.read_json(sdir / "target.json")["prefix"] == str(env.prefix)
    assert _version_of(env) == "3.5.1"
    h = _json(rb("history", "--env", env.prefix, "--json"))
    assert len(h["transactions"]) == 1
    assert rb("rollback", "--env", env.prefix).returncode == 0
    assert snapshot(system.parent) == sys_before and snapshot(env.prefix) == before
    shutil.rmtree(sdir)  # the session home is shared


def test_missing_artifact_file_exit_2_nothing_changed(txn_home, env350, tmp_path, mocker, capsys):
    from rocmbuild.store.artifact import Artifact, Manifest
    from rocmbuild.cli import app as cli
    from rocmbuild.flows import build as workflow

    env = env350("conda")
    before, listing = snapshot(env.prefix), full_listing(env.prefix)
    src = txn_home.artifacts["mini"]
    broken = tmp_path / "broken-artifact"
    shutil.copytree(src.path, broken, symlinks=True)
    (broken / "tree/share/miopen/db/gfx1151.db.txt").unlink()
    art = Artifact(broken, Manifest.from_json(disk.read_json(broken / "manifest.json")))
    mocker.patch.object(workflow, "build_recipe", return_value=art)
    assert cli.main(["apply", txn_home.recipe("mini"), "--env", str(env.prefix), "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert "missing a file" in err["message"] and "gfx1151.db.txt" in err["message"]
    (broken / "tree/lib/libMIOpen.so.1.0").unlink()
    assert cli.main(["apply", txn_home.recipe("mini"), "--env", str(env.prefix), "--json"]) == 2
    assert "libMIOpen.so.1.0" in json.loads(capsys.readouterr().out)["error"]["message"]
    assert snapshot(env.prefix) == before and full_listing(env.prefix) == listing


# --------------------------------------------------------------------------------------------
# drift, history, pruning, rollback --to


def test_drift_is_reported_and_rollback_refuses_without_force(txn_home, env350):
    env = env350("conda")
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    lib = env.prefix / "lib/libMIOpen.so.1.0"
    # a package manager update: a new file renamed over ours (never in place: it is the cache's inode)
    tmp = lib.parent / ".conda-update"
    shutil.copyfile(txn_home.artifacts["mini-fix"].file("lib/libMIOpen.so.1.0"), tmp)
    os.replace(tmp, lib)
    s = rb("status", "--env", env.prefix, "--json")
    drift = _json(s)["changes"]["drift"]
    assert [d["path"] for d in drift] == [str(lib)]
    assert "DRIFT" in rb("status", "--env", env.prefix).stdout
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 2
    assert "drift" in _json(r)["error"]["message"] and "--force" in _json(r)["error"]["hint"]
    r = rb("rollback", "--env", env.prefix, "--force")
    assert r.returncode == 0, r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids


def test_rollback_to_and_keep_pruning(txn_home, env350):
    env = env350("conda")
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    a = _json(rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json"))
    placed_a = os.stat(env.prefix / "lib/libMIOpen.so.1.0")  # the target's own copy
    b = _json(rb("apply", txn_home.recipe("mini-fix"), "--env", env.prefix, "--json"))
    assert b["ok"] and b["plan"]["version_before"] == "3.5.1"
    # --to: never empty, never unknown; the state after the newest is the state now
    for to, words in (("", "needs a transaction number"), ("0009", "no transaction"), ("2", "nothing to roll back")):
        r = rb("rollback", "--env", env.prefix, "--to", to, "--json")
        assert r.returncode == 2 and words in _json(r)["error"]["message"], r.stderr
    # plain rollback undoes the latest apply only
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 0 and _json(r)["undoes"] == [b["txn"]]
    st = os.stat(env.prefix / "lib/libMIOpen.so.1.0")
    art = os.stat(txn_home.artifacts["mini"].file("lib/libMIOpen.so.1.0"))
    # the inode apply a placed is back (by rename from b's backup); it never was the cache's
    assert (st.st_dev, st.st_ino) == (placed_a.st_dev, placed_a.st_ino) != (art.st_dev, art.st_ino)
    # apply b again, then --to 0: undo everything, in one transaction
    b2 = _json(rb("apply", txn_home.recipe("mini-fix"), "--env", env.prefix, "--json"))
    r = rb("rollback", "--env", env.prefix, "--to", "0", "--json")
    assert r.returncode == 0, r.stderr
    assert _json(r)["undoes"] == [a["txn"], b2["txn"]] and _json(r)["restores_to"] == "stock"
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
    # --keep 1 prunes older backups and says so
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--keep", "1", "--json")
    assert r.returncode == 0, r.stderr
    pruned = _json(r)["pruned"]
    assert pruned and not any(p["in_effect"] for p in pruned)  # only undone ones: nothing to say
    kept = [d.name for d in (env.prefix / ".rocmbuild/backups").iterdir()]
    assert kept == [_json(r)["txn"]]
    c = _json(rb("apply", txn_home.recipe("mini-fix"), "--env", env.prefix, "--keep", "1", "--json"))
    assert c["pruned"] == []  # the newest apply's backups and the originals' are never pruned
    undo = rb("rollback", "--env", env.prefix)
    assert undo.returncode == 0 and "backups" not in undo.stderr, undo.stderr
    kept = sorted(d.name for d in (env.prefix / ".rocmbuild/backups").iterdir())
    assert kept[:2] == [_json(r)["txn"], c["txn"]] and len(kept) == 3  # and the rollback's, for redo
    h = _json(rb("history", "--env", env.prefix, "--json"))
    assert sum(t["backups_pruned"] for t in h["transactions"]) == len(pruned)
    text = rb("history", "--env", env.prefix).stdout
    assert "backups pruned" in text and "KiB on disk" in text  # sizes as cache list says them
    # the state after an undone transaction: a rollback only undoes, and says what to do
    r = rb("rollback", "--env", env.prefix, "--to", b2["txn"], "--json")
    assert r.returncode == 2 and "redo" in _json(r)["error"]["hint"]


def test_recover_with_nothing_to_recover_exit_0(txn_home, env350):
    env = env350("conda")
    r = rb("recover", "--env", env.prefix)
    assert r.returncode == 0 and "nothing to recover" in r.stdout
    assert not (Path(env.prefix) / ".rocmbuild").exists()


def _ok(*args) -> dict:
    r = rb(*args, "--json")
    assert r.returncode == 0, (args, r.stderr[-2000:])
    return _json(r)


def test_redo_with_keep_1_still_restores_the_original(txn_home, env350):
    env = env350("conda")
    p = env.prefix
    s0 = snapshot(p)
    a = _ok("apply", txn_home.recipe("mini"), "--env", p, "--keep", "1")["txn"]
    s_a = snapshot(p)
    _ok("rollback", "--env", p, "--keep", "1")
    assert snapshot(p) == s0
    assert _ok("redo", "--env", p, "--keep", "1")["reapplies"] == [a]
    assert snapshot(p) == s_a
    _ok("apply", txn_home.recipe("mini-fix"), "--env", p, "--keep", "1")
    _ok("rollback", "--env", p, "--to", "0")
    assert snapshot(p) == s0


def test_plain_rollbacks_walk_back_after_pruning(txn_home, env350):
    env = env350("conda")
    p = env.prefix
    s0 = snapshot(p)
    _ok("apply", txn_home.recipe("mini"), "--env", p, "--keep", "2")
    s_a = snapshot(p)
    _ok("apply", txn_home.recipe("mini-fix"), "--env", p, "--keep", "2")
    s_b = snapshot(p)
    _ok("apply", txn_home.recipe("mini"), "--env", p, "--keep", "2")
    _ok("rollback", "--env", p, "--keep", "2")
    assert snapshot(p) == s_b
    _ok("rollback", "--env", p, "--keep", "2")  # the backup of the apply it undoes was protected
    assert snapshot(p) == s_a
    _ok("rollback", "--env", p, "--keep", "2")
    assert snapshot(p) == s0


def test_pruned_intermediate_state_is_refused_cleanly_and_the_original_still_restores(txn_home, env350):
    """With --keep 1 a rollback can need a backup that was pruned while its transaction was undone:
    the rollback is refused (exit 2, nothing changed) and `--to 0` still works."""
    env = env350("conda")
    p = env.prefix
    s0 = snapshot(p)
    _ok("apply", txn_home.recipe("mini"), "--env", p, "--keep", "1")
    _ok("apply", txn_home.recipe("mini-fix"), "--env", p, "--keep", "1")
    _ok("rollback", "--env", p, "--keep", "1")
    _ok("apply", txn_home.recipe("mini-fix"), "--env", p, "--keep", "1")
    s_c = snapshot(p)
    _ok("rollback", "--env", p, "--to", "0", "--keep", "1")
    assert snapshot(p) == s0
    _ok("redo", "--env", p, "--keep", "1")
    assert snapshot(p) == s_c
    refused = rb("rollback", "--env", p, "--json")
    if refused.returncode != 0:  # what it needs was pruned while undone: a clear refusal
        assert refused.returncode == 2 and "pruned" in _json(refused)["error"]["hint"]
        assert snapshot(p) == s_c
    _ok("rollback", "--env", p, "--to", "0")
    assert snapshot(p) == s0
