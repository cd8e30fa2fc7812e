"""Locks that speak: each lock rocmbuild takes (the target, a source cache, an artifact key), held
by a real other process, names that process (pid and command line) at once; fails with exit 5 by
default; ``--wait`` queues behind it; ``--wait-timeout S`` gives up after S seconds (exit 5); a
dead holder's record is taken over with a note; an orphaned child that kept the lock's descriptor
is named as the real holder.

The holder is a real process using rocmbuild's own ``FileLock`` (so it writes a real holder
record), started in its own session and killed by process group in teardown. For the source and
key locks, the holder plays "another run building this artifact": when told to release, it puts
the artifact (moved aside) back into the cache first, so the waiting run finds a cache hit after
the lock and compiles nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from rocmbuild import recipe as recipe_mod
from rocmbuild.store import cache
from rocmbuild.sources import source
from rocmbuild.errors import LockedError
from rocmbuild.home import artifacts_dir
from rocmbuild.fs.locks import LockWait
from rocmbuild.swap import statedir
from tests.support.cli import REPO, rb
from tests.support.leaks import running

pytestmark = pytest.mark.slow

HOLDER = textwrap.dedent("""
    import os, sys
    from rocmbuild.fs.disk import FileLock
    path, aside, dest, _marker, mode = sys.argv[1:6]
    lock = FileLock(path, shared=mode == "shared").acquire()
    print("locked", flush=True)
    sys.stdin.readline()  # the test says when to finish (or closes the pipe)
    if aside != "-":
        os.replace(aside, dest)  # "the build finished": the artifact is in the cache
    lock.release()
""")

ORPHANING_HOLDER = textwrap.dedent("""
    import os, sys, time
    from rocmbuild.fs.disk import FileLock
    lock = FileLock(sys.argv[1]).acquire()
    child = os.fork()
    if child == 0:  # keeps the locked descriptor, outlives the holder
        time.sleep(600)
        os._exit(0)
    print(child, flush=True)
    os._exit(0)  # dies holding the lock: its record stays, the child keeps the flock
""")


class Holders:
    """Real lock-holding processes, each in its own session; all groups killed at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.marker = f"lock-holder-{uuid.uuid4().hex[:8]}"

    def start(self, path: Path, aside: Path | None = None, dest: Path | None = None, *,
              mode: str = "exclusive") -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(aside or "-"), str(dest or "-"),
                              self.marker, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=str(REPO), env=_env(), start_new_session=True)
        self.procs.append(p)
        assert p.stdout.readline().strip() == "locked"
        return p

    def orphaning(self, path: Path) -> int:
        p = subprocess.Popen([sys.executable, "-c", ORPHANING_HOLDER, str(path)], stdout=subprocess.PIPE,
                             text=True, cwd=str(REPO), env=_env(), start_new_session=True)
        self.procs.append(p)
        child = int(p.stdout.readline())
        assert p.wait(timeout=30) == 0
        return child

    @staticmethod
    def finish(p: subprocess.Popen) -> None:
        p.stdin.write("done\n")
        p.stdin.flush()
        assert p.wait(timeout=30) == 0

    def kill_all(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    return e


@pytest.fixture
def holders():
    h = Holders()
    try:
        yield h
    finally:
        h.kill_all()


@pytest.fixture
def home_copy(txn_world, tmp_path, monkeypatch):
    """A private copy of the session's home (its source clone, its artifacts) with ``mini``'s
    artifact moved aside: building ``mini`` is a miss until a holder puts it back."""
    home = tmp_path / "home"
    shutil.copytree(txn_world.home, home, symlinks=True)
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))
    key = txn_world.artifacts["mini"].key
    aside = tmp_path / "aside"
    os.replace(artifacts_dir(home) / key, aside)
    return home, key, aside


def _lock_of(kind: str, txn_world, home: Path, key: str, env) -> Path:
    if kind == "target":
        return env.prefix / ".rocmbuild" / "lock"
    if kind == "source":
        tree = source.checkout_path(recipe_mod.load(txn_world.recipe("mini")), home)
        return tree.with_name(tree.name + ".lock")
    return artifacts_dir(home) / f".{key}.lock"


def _run(kind: str, txn_world, env, *extra: str):
    """``apply`` for the target lock; ``build`` for the source and artifact-key locks."""
    if kind == "target":
        return rb("apply", txn_world.recipe("mini"), "--env", env.prefix, *extra)
    return rb("build", txn_world.recipe("mini"), *extra)


KINDS = ["target", "source", "key"]
WHAT = {"target": "the target", "source": "the source cache", "key": "the build of artifact"}


@pytest.mark.parametrize("kind", KINDS)
def test_a_held_lock_fails_at_once_naming_pid_and_command(kind, txn_world, home_copy, holders, target_env):
    home, key, aside = home_copy
    env = target_env("3.5.0", compile_version="3.5.1")
    if kind == "target":
        os.replace(aside, artifacts_dir(home) / key)  # apply is a cache hit: only the target lock is in the way
    h = holders.start(_lock_of(kind, txn_world, home, key, env))
    t = time.monotonic()
    r = _run(kind, txn_world, env, "--json")
    assert r.returncode == 5, r.stderr
    assert time.monotonic() - t < 30  # it did not wait for the holder (which never lets go by itself)
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "LockedError" and err["details"]["pid"] == str(h.pid)
    assert err["message"].startswith(WHAT[kind]) and f"pid {h.pid}" in err["message"]
    assert holders.marker in err["message"] and "since " in err["message"]  # the command line, and since when
    assert "--wait" in err["hint"]
    assert h.poll() is None  # the holder was not disturbed


@pytest.mark.parametrize("kind", KINDS)
def test_wait_timeout_gives_up_after_about_that_long(kind, txn_world, home_copy, holders, target_env):
    home, key, aside = home_copy
    env = target_env("3.5.0", compile_version="3.5.1")
    if kind == "target":
        os.replace(aside, artifacts_dir(home) / key)
    h = holders.start(_lock_of(kind, txn_world, home, key, env))
    r = _run(kind, txn_world, env, "--wait-timeout", "1", "--json")
    assert r.returncode == 5, r.stderr
    err = json.loads(r.stdout)["error"]
    waited = float(re.search(r"gave up after waiting ([\d.]+) s", err["message"]).group(1))
    assert 1.0 <= waited < 2.0 and f"pid {h.pid}" in err["message"]
    # the waiting line is on stderr even with --json, naming the holder and the limit
    assert f"waiting for {WHAT[kind]}" in r.stderr and f"pid {h.pid}" in r.stderr
    assert "giving up after 1 s" in r.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_wait_queues_then_succeeds_when_the_holder_finishes(kind, txn_world, home_copy, holders, target_env):
    home, key, aside = home_copy
    env = target_env("3.5.0", compile_version="3.5.1")
    dest = artifacts_dir(home) / key
    if kind == "target":
        os.replace(aside, dest)
        h = holders.start(_lock_of(kind, txn_world, home, key, env))
    else:
        h = holders.start(_lock_of(kind, txn_world, home, key, env), aside, dest)
    cmd = ["apply", txn_world.recipe("mini"), "--env", str(env.prefix)] if kind == "target" \
        else ["build", txn_world.recipe("mini")]
    run = subprocess.Popen([sys.executable, "-m", "rocmbuild", *cmd, "--wait", "--json"], cwd=str(REPO),
                           env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        line = ""
        for _ in range(20):  # it says whom it waits for before it waits
            line = run.stderr.readline()
            if "waiting for" in line or not line:
                break
        assert f"waiting for {WHAT[kind]}" in line and f"pid {h.pid}" in line, line
        time.sleep(1.0)
        assert run.poll() is None  # still queued behind the holder
        holders.finish(h)
        out, rest = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 0, line + rest
    data = json.loads(out)
    assert data["ok"]
    if kind != "target":
        assert data["cached"] is True and data["key"] == key  # the holder's build was found: nothing compiled
        assert "configuring" not in rest


@pytest.mark.parametrize("kind", KINDS)
def test_the_waiting_line_comes_within_a_second(kind, txn_world, home_copy, holders, target_env, capsys):
    """In process: from the moment the lock is asked for to the line naming the holder."""
    home, key, _aside = home_copy
    env = target_env("3.5.0", compile_version="3.5.1")
    path = _lock_of(kind, txn_world, home, key, env)
    h = holders.start(path)
    policy = LockWait(wait=True, timeout=1.5)
    if kind == "target":
        lock = statedir.TargetLock(path.parent, wait=policy)
        take = lock.acquire
    elif kind == "source":
        take = source.source_lock(recipe_mod.load(txn_world.recipe("mini")), home=home, wait=policy).__enter__
    else:
        take = cache.key_lock(home, key, wait=policy).__enter__
    errors: list[BaseException] = []

    def attempt():
        try:
            take()
        except LockedError as exc:
            errors.append(exc)

    t = time.monotonic()
    th = threading.Thread(target=attempt)
    th.start()
    seen = ""
    while "waiting for" not in seen and time.monotonic() - t < 5:
        seen += capsys.readouterr().err
        time.sleep(0.02)
    said = time.monotonic() - t
    th.join(10)
    assert "waiting for" in seen and f"pid {h.pid}" in seen and holders.marker in seen
    assert said < 1.0, f"the waiting line took {said:.2f} s"
    assert errors and errors[0].exit_code == 5 and "gave up after waiting 1.5 s" in errors[0].message


def test_a_dead_holders_record_is_taken_over_with_a_note(txn_home, target_env, holders):
    env = target_env("3.5.0", compile_version="3.5.1")
    lock = env.prefix / ".rocmbuild" / "lock"
    h = holders.start(lock)
    os.killpg(h.pid, signal.SIGKILL)  # dies holding it: the flock goes, the record stays
    h.wait()
    assert json.loads(lock.read_text())["pid"] == h.pid
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert f"took over the target ({lock}) from pid {h.pid}" in r.stderr and holders.marker in r.stderr
    assert "ended without releasing" in r.stderr
    assert lock.read_text() == ""  # released cleanly: nothing left to take over
    r = rb("rollback", "--env", env.prefix)
    assert r.returncode == 0 and "took over" not in r.stderr, r.stderr


def test_an_orphan_that_kept_the_lock_is_named(txn_home, target_env, holders):
    env = target_env("3.5.0", compile_version="3.5.1")
    lock = env.prefix / ".rocmbuild" / "lock"
    lock.parent.mkdir(parents=True)
    child = holders.orphaning(lock)
    dead = json.loads(lock.read_text())["pid"]
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 5, r.stderr
    err = json.loads(r.stdout)["error"]
    assert f"held by pid {child}" in err["message"] and f"recorded holder, pid {dead}" in err["message"]
    assert "is dead" in err["message"] and "orphaned child" in err["message"]
    assert f"kill {child}" in err["hint"]
    os.kill(child, signal.SIGKILL)  # the leftover is stopped: the lock is free, its record is stale
    deadline = time.monotonic() + 10
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)
    assert r.returncode == 0 and f"from pid {dead}" in r.stderr, r.stderr


def test_a_shared_holder_is_found_and_named(tmp_path, holders):
    """A shared holder (the "already applied" path) writes no record: it is named from /proc."""
    sdir = tmp_path / "prefix" / ".rocmbuild"
    sdir.mkdir(parents=True)
    (sdir / "lock").write_text(json.dumps({"pid": 999999999, "since": 1.0}))  # a stale record, too
    h = holders.start(sdir / "lock", mode="shared")
    with pytest.raises(LockedError) as ei:
        statedir.TargetLock(sdir).acquire()
    assert f"held (shared) by pid {h.pid}" in ei.value.message and holders.marker in ei.value.message
    assert "kill" not in ei.value.hint  # a live reader, not a leftover
    holders.finish(h)
    with statedir.TargetLock(sdir):  # free again: the stale record is taken over
        assert json.loads((sdir / "lock").read_text())["pid"] == os.getpid()
