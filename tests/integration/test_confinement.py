"""Nothing it reads can steer a write: a planted journal, a symlink planted after planning, a
symlinked state dir, a hostile umask. Each attack of the confinement issue, reproduced against
real envs, real journals and real ``python -m rocmbuild`` processes, with canary files outside
every root that must stay byte-identical with one link.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rocmbuild import swap as transaction
from rocmbuild.swap import actions, plan
from rocmbuild.swap.roots import Roots
from tests.support.cli import REPO, rb
from tests.support.snapshots import listing, snapshot
from tests.support.watch import Watched

pytestmark = pytest.mark.slow


class Canaries:
    """Files outside every root: each must keep its bytes and its single link."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.files = {}
        for name in ("libMIOpen.so.1.0", "canary", "miopen.db.txt"):
            p = root / name
            p.write_bytes(b"canary " + name.encode() + b"\n")
            self.files[p] = p.read_bytes()

    def intact(self) -> None:
        for p, data in self.files.items():
            assert p.read_bytes() == data, f"{p} was written"
            assert os.lstat(p).st_nlink == 1, f"{p} is hard-linked to something ({os.lstat(p).st_nlink} links)"
        assert sorted(self.root.iterdir()) == sorted(self.files), f"new entries in {self.root}"


def _json(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def env350(target_env):
    def make(layout="conda", **kw):
        return target_env("3.5.0", layout=layout, compile_version="3.5.1", **kw)

    return make


def _crashed_apply(txn_home, env, failpoint="after-swap") -> Path:
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, env={"ROCMBUILD_FAILPOINTS": failpoint})
    assert r.returncode == 137, r.stderr
    return next((env.prefix / ".rocmbuild/journal").glob("*.json"))


def _edit_journal(journal: Path, edit) -> None:
    data = json.loads(journal.read_text())
    edit(data)
    journal.write_text(json.dumps(data))


# --------------------------------------------------------------------------------------------
# 1. recovery follows no symlink inside the prefix


@pytest.mark.parametrize("verb", ["recover", "apply"])
def test_a_planted_journal_through_a_symlink_writes_nothing_outside(txn_home, env350, tmp_path, verb):
    env = env350("conda")
    canaries = Canaries(tmp_path / "outside")
    journal = _crashed_apply(txn_home, env)
    os.symlink(canaries.root, env.prefix / "lib/evil")  # lib/evil -> /outside
    (backup,) = [b for b in (env.prefix / ".rocmbuild/backups" / journal.stem).iterdir() if "libMIOpen" in b.name]

    def through_evil(data):
        for a in data["plan"]["actions"]:
            if a["role"] == "library":
                a["path"] = "lib/evil/libMIOpen.so.1.0"

    _edit_journal(journal, through_evil)
    backup.unlink()
    backup.write_bytes(b"attacker bytes\n")
    args = ["recover"] if verb == "recover" else ["apply", txn_home.recipe("mini")]
    r = rb(*args, "--env", env.prefix, "--json")
    assert r.returncode == 2, r.stderr
    assert "symbolic link" in _json(r)["error"]["message"]
    canaries.intact()


def test_a_journal_naming_a_path_outside_the_lib_and_share_dirs_is_refused(txn_home, env350, tmp_path):
    env = env350("conda")
    canaries = Canaries(tmp_path / "outside")
    journal = _crashed_apply(txn_home, env)
    rel = os.path.relpath(canaries.root / "libMIOpen.so.1.0", env.prefix)  # ../../outside/...

    def outside(data):
        data["plan"]["actions"][0]["path"] = rel

    _edit_journal(journal, outside)
    frozen = listing(env.prefix)
    r = rb("recover", "--env", env.prefix, "--json")
    assert r.returncode == 2, r.stderr
    assert str(journal) in _json(r)["error"]["message"]
    canaries.intact()
    assert listing(env.prefix) == frozen


def test_a_journal_naming_another_dir_of_the_prefix_is_refused(txn_home, env350, tmp_path):
    env = env350("conda")
    journal = _crashed_apply(txn_home, env)
    victim = env.prefix / "bin/python3-config-victim"
    victim.write_bytes(b"keep me\n")

    def elsewhere(data):
        data["plan"]["actions"][0]["path"] = "bin/python3-config-victim"
        data["plan"]["actions"][0]["before"] = {"kind": "absent"}

    _edit_journal(journal, elsewhere)
    r = rb("recover", "--env", env.prefix, "--json")
    assert r.returncode == 2, r.stderr
    assert victim.read_bytes() == b"keep me\n"


# --------------------------------------------------------------------------------------------
# 2. rollback and a late symlink


def test_rollback_through_a_share_dir_swapped_for_a_symlink_deletes_nothing_outside(txn_home, env350, tmp_path):
    env = env350("conda")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    db = env.prefix / "share/miopen/db"
    placed = sorted(p.name for p in db.iterdir())
    assert placed, "the fixture artifact installs db files"
    outside = tmp_path / "outside-db"
    outside.mkdir()
    for name in placed:  # the same names, someone else's files
        (outside / name).write_bytes(b"not yours\n")
    shutil.rmtree(db)
    os.symlink(outside, db)
    for force in ([], ["--force"]):
        r = rb("rollback", *force, "--env", env.prefix, "--json")
        assert r.returncode == 2, r.stderr
        assert sorted(p.name for p in outside.iterdir()) == placed
        assert all((outside / n).read_bytes() == b"not yours\n" for n in placed)


def test_a_lib_dir_swapped_for_a_symlink_after_planning_receives_nothing(txn_home, env350, tmp_path):
    env = env350("wheel")
    libdir = env.torch_dir / "lib"
    outside = tmp_path / "outside-lib"
    run = Watched(["apply", txn_home.recipe("mini"), "--env", env.prefix, "--json"], tty=False,
                  env={"ROCMBUILD_PAUSEPOINTS": "after-journal", "ROCMBUILD_PAUSE_SECONDS": "3"})
    try:
        run.wait_for(lambda w: "pausepoint after-journal" in w.text(), what="the pausepoint")
        shutil.copytree(libdir, outside, symlinks=True)  # the same files, elsewhere
        before = snapshot(outside)
        libdir.rename(libdir.with_name("lib.real"))
        os.symlink(outside, libdir)
        code = run.finish(timeout=120)
    finally:
        run.kill()
    assert code == 2, run.text()
    assert snapshot(outside) == before
    assert not [p for p in outside.iterdir() if "rocmbuild" in p.name]
    assert json.loads(run.out)["error"]["type"] == "ConfinementError"


# --------------------------------------------------------------------------------------------
# 4. symlinked state


@pytest.mark.parametrize("which", [".rocmbuild", ".rocmbuild/journal", ".rocmbuild/backups"])
def test_a_symlinked_state_dir_is_refused_never_followed(txn_home, env350, tmp_path, which):
    env = env350("conda")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = env.prefix / which
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, link)
    before = snapshot(env.prefix)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 2, r.stderr
    err = _json(r)["error"]
    assert err["type"] == "StatePathError" and "symbolic link" in err["message"] and err["hint"], r.stderr
    assert list(elsewhere.iterdir()) == []
    assert snapshot(env.prefix) == before


# --------------------------------------------------------------------------------------------
# 9. modes and owners do not depend on the umask or on who runs rocmbuild


def _run_with_umask(mask: int, *args: str) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "rocmbuild", *args], capture_output=True, text=True, env=e,
                          preexec_fn=lambda: os.umask(mask), timeout=300)


def _modes(prefix: Path, *rels: str) -> dict[str, int]:
    return {r: stat.S_IMODE(os.lstat(prefix / r).st_mode) for r in rels}


def test_umask_077_leaves_the_db_and_the_state_readable_by_everyone(txn_home, env350, tmp_path):
    env = env350("conda")
    shutil.rmtree(env.prefix / "share", ignore_errors=True)
    r = _run_with_umask(0o077, "apply", txn_home.recipe("mini"), "--env", str(env.prefix))
    assert r.returncode == 0, r.stderr
    sdir = env.prefix / ".rocmbuild"
    dirs = ["share", "share/miopen", "share/miopen/db", ".rocmbuild", ".rocmbuild/journal"]
    assert set(_modes(env.prefix, *dirs).values()) == {0o755}
    state_files = [str(p.relative_to(env.prefix)) for p in sdir.rglob("*") if p.is_file()
                   and "backups" not in p.parts]
    assert state_files and set(_modes(env.prefix, *state_files).values()) == {0o644}
    dbs = [str(p.relative_to(env.prefix)) for p in (env.prefix / "share/miopen/db").iterdir()]
    assert set(_modes(env.prefix, *dbs).values()) == {0o644}
    # a user who is not root reads the db and the state (every dir above is made traversable)
    for d in [tmp_path, *tmp_path.parents]:
        if d == Path("/"):
            break
        os.chmod(d, os.stat(d).st_mode | 0o001)
    for rel in (dbs[0], ".rocmbuild/history.jsonl"):
        assert subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(env.prefix / rel)],
                              capture_output=True).returncode == 0, rel


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give files to another user")
def test_a_root_run_leaves_a_users_env_wholly_the_users(txn_home, env350):
    env = env350("conda")
    nobody = int(subprocess.run(["id", "-u", "nobody"], capture_output=True, text=True).stdout)
    nogroup = int(subprocess.run(["id", "-g", "nobody"], capture_output=True, text=True).stdout)
    shutil.rmtree(env.prefix / "share", ignore_errors=True)
    for root, dirs, files in os.walk(env.prefix):
        for n in dirs + files + ["."]:
            os.chown(os.path.join(root, n), nobody, nogroup, follow_symlinks=False)
    # what the swap writes is the question here, not whose identity runs the env's code: the env's
    # python links to the test's own interpreter, which the owner (nobody) may not be able to run
    # (a pyenv under /root, 0700), so its code runs as root (--run-as root; docs/verification.md)
    root_run = ("--env", env.prefix, "--run-as", "root")
    assert rb("apply", txn_home.recipe("mini"), *root_run).returncode == 0
    assert rb("rollback", *root_run).returncode == 0
    assert rb("apply", txn_home.recipe("mini"), *root_run).returncode == 0
    wrong = []
    for root, dirs, files in os.walk(env.prefix):
        for n in dirs + files:
            st = os.lstat(os.path.join(root, n))
            if (st.st_uid, st.st_gid) != (nobody, nogroup):
                wrong.append(os.path.join(root, n))
    assert wrong == []


# --------------------------------------------------------------------------------------------
# durable rollback: every unlink and rmdir is fsynced before the journal says it is finished


def test_rollback_fsyncs_each_removal_before_the_journal_is_finished(txn_home, env350, mocker):
    env = env350("conda")
    shutil.rmtree(env.prefix / "share", ignore_errors=True)
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    sdir = env.prefix / ".rocmbuild"
    events: list[tuple[str, str]] = []
    real_unlink, real_rmdir, real_fsync, real_save = os.unlink, os.rmdir, os.fsync, transaction.Journal.save

    def unlink(name, *a, dir_fd=None, **k):
        where = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else os.path.dirname(str(name))
        events.append(("unlink", where))
        return real_unlink(name, *a, dir_fd=dir_fd, **k)

    def rmdir(name, *a, dir_fd=None, **k):
        where = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else os.path.dirname(str(name))
        events.append(("rmdir", where))
        return real_rmdir(name, *a, dir_fd=dir_fd, **k)

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def save(self):
        events.append(("journal", self.state))
        return real_save(self)

    mocker.patch.object(os, "unlink", side_effect=unlink)
    mocker.patch.object(os, "rmdir", side_effect=rmdir)
    mocker.patch.object(os, "fsync", side_effect=fsync)
    mocker.patch.object(transaction.Journal, "save", autospec=True, side_effect=save)
    transaction.execute(transaction.rollback_plan(sdir), verify=None)
    finished = events.index(("journal", "committed"))
    removals = [(i, e) for i, e in enumerate(events[:finished]) if e[0] in ("unlink", "rmdir")
                and str(env.prefix / "share") in e[1]]
    assert removals, "the rollback removed the data files it had added"
    for i, (_kind, where) in removals:
        assert ("fsync", where) in events[i + 1:finished], f"no fsync of {where} before the journal was finished"
    assert not (env.prefix / "share").exists()


# --------------------------------------------------------------------------------------------
# the roots themselves


def test_roots_refuse_a_path_outside_the_target(txn_home, env350, tmp_path):
    env = env350("conda")
    p = plan.make(txn_home.artifacts["mini"], plan.TargetFacts(
        str(env.prefix), str(env.python),
        (("libMIOpen", (plan.LoadedFact(str(env.prefix / "lib/libMIOpen.so.1.0"), "conda", True),)),), "3.5.0"))
    with Roots.of(p.prefix, p.libdir, p.outside, p.state_dir) as roots:
        for bad in (tmp_path / "x", env.prefix / ".rocmbuild/lock", env.prefix):
            with pytest.raises(Exception) as e:
                roots.rel(bad)
            assert type(e.value).__name__ == "ConfinementError"
        assert roots.rel(env.prefix / "lib/libMIOpen.so.1.0") == "lib/libMIOpen.so.1.0"
        fa = actions.make(p.actions[0], "0000-test", roots, 0)
        assert fa.rel == "lib/libMIOpen.so.1.0"


# --------------------------------------------------------------------------------------------
# status during a running transaction


def test_status_during_a_running_apply_says_in_progress_not_unfinished(txn_home, env350):
    env = env350("conda")
    run = Watched(["apply", txn_home.recipe("mini"), "--env", env.prefix], tty=False,
                  env={"ROCMBUILD_PAUSEPOINTS": "after-swap", "ROCMBUILD_PAUSE_SECONDS": "30"})
    try:
        run.wait_for(lambda w: "pausepoint after-swap" in w.text(), what="the pausepoint")
        s = rb("status", "--env", env.prefix, "--json")
        assert s.returncode == 0, s.stderr
        changes = _json(s)["changes"]
        (u,) = changes["unfinished"]
        assert u["running_pid"] == run.proc.pid and changes["drift"] == []
        text = rb("status", "--env", env.prefix).stdout
        assert f"pid {run.proc.pid}" in text and "in progress" in text
        assert "UNFINISHED" not in text and "DRIFT" not in text
    finally:
        run.kill()
    s = rb("status", "--env", env.prefix, "--json")  # killed: now it is an interrupted one
    assert _json(s)["changes"]["unfinished"][0]["running_pid"] is None


def test_a_recovery_that_cannot_confirm_the_old_state_exits_4(txn_home, env350):
    """A backup swapped for other bytes (another inode): recovery puts them back, cannot confirm
    they are the original, and says so with exit 4 and where the backups are -- never "ok"."""
    env = env350("conda")
    journal = _crashed_apply(txn_home, env)
    (backup,) = [b for b in (env.prefix / ".rocmbuild/backups" / journal.stem).iterdir() if "libMIOpen" in b.name]
    data, ino = backup.read_bytes(), backup.stat().st_ino
    other = backup.with_name("other")
    other.write_bytes(data)  # made while the original lives: another inode number for sure
    os.replace(other, backup)  # the same bytes, another inode: not provably the original
    assert backup.stat().st_ino != ino
    r = rb("recover", "--env", env.prefix, "--json")
    assert r.returncode == 4, r.stderr
    err = _json(r)["error"]
    assert "not confirmed" in err["message"] and str(backup.parent) in err["message"]
    assert "0 path(s) restored" not in r.stderr and "rolled back to the state before it" not in r.stderr
