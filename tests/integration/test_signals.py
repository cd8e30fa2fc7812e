"""Every way a run is stopped: SIGINT, SIGTERM and SIGHUP during a build and during each step of an
apply, a second signal during the rollback, a SIGKILL of rocmbuild, a probe whose torch forks.

Real `python -m rocmbuild` processes, real signals, the fixture's real slow build
(``MIOPEN_FIXTURE_SLOW``), real fake-torch envs. "No process left" is checked by scanning /proc
for any process whose working directory or command line is inside the test's tree.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocmbuild.proc import runner
from rocmbuild.builder import pipeline
from rocmbuild.store import cache
from rocmbuild.errors import LockedError
from rocmbuild.home import build_dir, cache_home
from tests.support.builds import make_checkout, make_recipe
from tests.integration.test_json_contract import TABLES
from tests.support.cli import REPO, kill_group
from tests.support.recipes import write_fixture_recipe
from tests.support.snapshots import inodes, snapshot

pytestmark = pytest.mark.slow

STOPS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
# rocmbuild as a user starts it: the stop signals at their defaults, whatever this test inherited
# (a `&` job of a non-interactive shell ignores SIGINT; nohup ignores SIGHUP)
LAUNCH = ("import runpy, signal\n"
          "for s in (signal.SIGINT, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
          "runpy.run_module('rocmbuild', run_name='__main__')\n")


class Run:
    """A started `rocmbuild` process; stderr read as it comes."""

    def __init__(self, *args, env: dict | None = None) -> None:
        e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
        self.proc = subprocess.Popen([sys.executable, "-c", LAUNCH, *map(str, args)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=e, cwd=str(REPO), start_new_session=True)
        self.err = b""

    def wait_for(self, text: str, timeout: float = 90) -> None:
        """Read stderr until ``text`` appears (fails after ``timeout``)."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stderr, selectors.EVENT_READ)
            while text.encode() not in self.err:
                assert time.monotonic() < deadline, f"never saw {text!r}; stderr so far:\n{self.err.decode()}"
                if sel.select(0.2):
                    chunk = os.read(self.proc.stderr.fileno(), 65536)
                    assert chunk or self.proc.poll() is None, f"exited before {text!r}:\n{self.err.decode()}"
                    self.err += chunk

    def finish(self, timeout: float = 60) -> tuple[int, dict | None, str]:
        out, err = self.proc.communicate(timeout=timeout)
        self.err += err
        return self.proc.returncode, (json.loads(out) if out.strip() else None), self.err.decode()

    def kill(self) -> None:
        kill_group(self.proc)


@pytest.fixture
def started():
    """Start rocmbuild runs; teardown kills each one's group and anything left under tmp."""
    runs: list[Run] = []

    def start(*args, env=None) -> Run:
        runs.append(Run(*args, env=env))
        return runs[-1]

    yield start
    for r in runs:
        if r.proc.poll() is None:
            r.kill()


def _documented(details: dict) -> None:
    """The stop's details hold the keys of docs/json.md's ``interrupted`` table, and no other."""
    keys = TABLES["interrupted"]
    assert set(details) <= set(keys) and {k for k, optional in keys.items() if not optional} <= set(details)


def users_of(path: Path) -> list[runner.Process]:
    """Live processes (not this one) whose cwd or command line is inside ``path``."""
    root = str(Path(path).resolve())
    return [p for p in runner.processes() if p.pid != os.getpid()
            and ((p.cwd or "").startswith(root) or root in p.command)]


def gone(path: Path, within: float = 10) -> list[runner.Process]:
    deadline = time.monotonic() + within
    while (left := users_of(path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture(autouse=True)
def _no_survivors(tmp_path):
    yield
    for p in users_of(tmp_path):  # never leave a tree behind, even when a test failed
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --------------------------------------------------------------------------------------------
# build


@pytest.fixture
def slow_recipe(monorepo, tmp_path):
    return write_fixture_recipe(tmp_path / "recipes", "slow", url=monorepo.url, ref="rocm-7.1.0", jobs=2,
                                defines={"MIOPEN_FIXTURE_SLOW": True})


def _wait_slow_step(home: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    # the step's own `cmake -E sleep 271` (not " 271" anywhere: the supervisor's command line holds
    # rocmbuild's pid, and a pid of 271xx matched before the build had made its temp artifact)
    while not [p for p in users_of(home) if p.command.endswith("sleep 271")]:
        assert time.monotonic() < deadline, "the slow build step never started"
        time.sleep(0.1)


@pytest.mark.parametrize("sig", STOPS, ids=lambda s: s.name)
def test_a_signal_during_build_ends_the_tree_and_the_next_build_works(started, slow_recipe, sig):
    home = cache_home()
    run = started("build", slow_recipe, "--json")
    _wait_slow_step(home)
    run.proc.send_signal(sig)
    code, out, err = run.finish(timeout=30)
    assert code == 128 + sig, err
    assert out["ok"] is False and out["exit_code"] == 128 + sig
    assert out["error"]["type"] == "Interrupted" and out["error"]["details"]["signal"] == sig.name
    assert "temp artifact removed" in out["error"]["message"]
    _documented(out["error"]["details"])
    assert gone(home, within=2) == []  # make, cmake, the sleeping step: all ended
    assert not list((home / "artifacts").glob(".tmp-*"))
    again = started("build", slow_recipe, "--json", env={"MIOPEN_FIXTURE_NO_SLEEP": "1"})
    code, out, err = again.finish(timeout=180)
    assert code == 0, err
    assert out["cached"] is False and Path(out["artifact"]).is_dir()  # built in the same tree, now free


def test_sigkill_of_rocmbuild_during_build_kills_the_build_tree(started, slow_recipe):
    home = cache_home()
    run = started("build", slow_recipe)
    _wait_slow_step(home)
    os.kill(run.proc.pid, signal.SIGKILL)  # no handler, no cleanup: only the parent-death signals
    assert run.proc.wait(timeout=10) == -signal.SIGKILL
    assert gone(home, within=10) == []


def _hung_remote(tmp_path: Path) -> tuple[dict, str, Path]:
    """An ssh remote that never answers: ``GIT_SSH_COMMAND`` is a script that ignores SIGTERM and
    waits on a child of its own. Returns the environment, a tag every process of it carries in its
    command line, and the file it touches once git has started it."""
    tag = str(700000 + (os.getpid() * 7919 + time.monotonic_ns()) % 100000)  # in every command line
    started = tmp_path / "ssh-started"
    ssh = tmp_path / f"hung{tag}-ssh"
    ssh.write_text(f"#!/bin/sh\ntrap '' TERM\ntouch {started}\nsleep {tag}.5 &\nsleep {tag}.25\n")
    ssh.chmod(0o755)
    return {"GIT_SSH_COMMAND": str(ssh)}, tag, started


def _parent_command(pid: int) -> str:
    """The command line of ``pid``'s parent (a supervisor started ahead shows no program in its own)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    ppid = int(stat[stat.rindex(")") + 2:].split()[1])
    return Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def _tagged(tag: str, within: float) -> list[runner.Process]:
    deadline = time.monotonic() + within
    while (left := [p for p in runner.processes() if tag in p.command]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_stop_during_a_slow_git_fetch_leaves_no_git_process(started, tmp_path, sig):
    env, tag, begun = _hung_remote(tmp_path)
    recipe = write_fixture_recipe(tmp_path / "recipes", "hung", url=f"ssh://rocmbuild.invalid/hung{tag}.git")
    run = started("build", recipe, "--json", env=env)
    deadline = time.monotonic() + 60
    while not begun.exists():
        assert time.monotonic() < deadline and run.proc.poll() is None, "git never started the ssh command"
        time.sleep(0.05)
    while True:  # the ssh command's two children are up
        tagged = [p for p in runner.processes() if tag in p.command]
        running = [p.command for p in tagged]
        if {f"sleep {tag}.5", f"sleep {tag}.25"} <= set(running):
            break
        assert time.monotonic() < deadline, f"the ssh command's children never started: {running}"
        time.sleep(0.05)
    gits = [p for p in tagged if p.command.split()[0].endswith("/git") and " ls-remote " in p.command]
    assert gits, running
    assert all("reaper.py" in _parent_command(p.pid) for p in gits), running  # git runs under the supervisor
    run.proc.send_signal(sig)
    if sig == signal.SIGKILL:
        assert run.proc.wait(timeout=10) == -sig  # only the parent-death signals are left to act
    else:
        code, out, err = run.finish(timeout=30)
        assert code == 128 + sig, err
        assert out["error"]["type"] == "Interrupted"
    # the ssh command ignores SIGTERM: the supervisor's SIGKILL after GRACE ends it
    assert _tagged(tag, within=runner.GRACE + 5) == []


def test_a_build_tree_in_use_is_never_reused(tmp_path):
    r, co = make_recipe(tmp_path), make_checkout(tmp_path)
    home = cache_home()
    inp = cache.inputs(r, commit=co.commit, home=home)
    key = cache.cache_key(inp)
    tree = build_dir(home) / key
    tree.mkdir(parents=True)
    holder = subprocess.Popen(["sleep", "120"], cwd=tree, start_new_session=True)  # an orphan still in it
    try:
        t0 = time.monotonic()
        with pytest.raises(LockedError) as ei:
            pipeline.build(r, co, home=home, key=key, inp=inp)
        assert time.monotonic() - t0 < 5
        assert ei.value.exit_code == 5 and f"pid {holder.pid}" in ei.value.message and "--wait" in ei.value.hint
        assert not list((home / "artifacts").glob(".tmp-*"))
        threading.Timer(1.0, holder.kill).start()
        t0 = time.monotonic()
        art = pipeline.build(r, co, home=home, key=key, inp=inp, wait=True)  # waits for the holder, then builds
        assert time.monotonic() - t0 > 0.9 and art.path.is_dir()
    finally:
        holder.kill()
        holder.wait()


# --------------------------------------------------------------------------------------------
# apply


def _journal_states(prefix: Path) -> list[str]:
    return [json.loads(p.read_text())["state"] for p in sorted((prefix / ".rocmbuild" / "journal").glob("*.json"))]


STEPS = {
    "stage": ({"ROCMBUILD_PAUSEPOINTS": "after-stage"}, "pausepoint after-stage", False),
    "swap": ({"ROCMBUILD_PAUSEPOINTS": "mid-swap"}, "pausepoint mid-swap", True),
    "verify": ({}, None, True),  # the fake torch sleeps while it verifies the new file
}


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("sig", STOPS, ids=lambda s: s.name)
def test_a_signal_during_apply_leaves_the_target_as_it_was(started, txn_home, target_env, tmp_path, sig, step):
    marks = tmp_path / "marks"
    marks.mkdir()
    env = target_env("3.5.0", compile_version="3.5.1", marker_dir=marks, sleep_after_swap=120)
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    extra, line, swapped = STEPS[step]
    run = started("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json", env=extra)
    if line:
        run.wait_for(line)
    else:
        deadline = time.monotonic() + 60
        while not list(marks.glob("sleeping-*")):
            assert time.monotonic() < deadline and run.proc.poll() is None, "the verify probe never started"
            time.sleep(0.05)
    run.proc.send_signal(sig)
    code, out, err = run.finish(timeout=60)
    assert code == 128 + sig, err
    error = out["error"]
    assert error["type"] == "Interrupted" and error["details"]["signal"] == sig.name
    assert error["details"]["rolled_back"] is swapped and error["details"]["restored"]["ok"] is True
    _documented(error["details"])
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
    assert _journal_states(env.prefix) == ["rolled_back"]
    assert gone(env.prefix, within=2) == []  # no probe left
    if step == "verify":
        assert "the old state verifies again" in error["message"]


def test_a_second_signal_does_not_cut_the_rollback_short(started, txn_home, target_env, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    env = target_env("3.5.0", compile_version="3.5.1", marker_dir=marks, sleep_after_swap=120)
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    run = started("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json",
                  env={"ROCMBUILD_PAUSEPOINTS": "mid-rollback", "ROCMBUILD_PAUSE_SECONDS": "2"})
    deadline = time.monotonic() + 60
    while not list(marks.glob("sleeping-*")):
        assert time.monotonic() < deadline, "the verify probe never started"
        time.sleep(0.05)
    run.proc.send_signal(signal.SIGTERM)
    run.wait_for("pausepoint mid-rollback")  # half reverted
    run.proc.send_signal(signal.SIGINT)
    code, out, err = run.finish(timeout=60)
    assert code == 128 + signal.SIGTERM, err
    assert "already stopping after SIGTERM" in err
    assert out["error"]["details"]["restored"]["ok"] is True
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
    assert _journal_states(env.prefix) == ["rolled_back"]


@pytest.mark.parametrize("setsid", [False, True], ids=["fork", "setsid"])
def test_a_forking_probe_is_judged_when_it_exits_and_leaves_no_child(started, txn_home, target_env, tmp_path, setsid):
    marks = tmp_path / "marks"
    marks.mkdir()
    env = target_env("3.5.0", compile_version="3.5.1", marker_dir=marks, fork_child=120, setsid_child=setsid)
    t0 = time.monotonic()
    code, out, err = started("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json",
                             "--probe-timeout", "60").finish(timeout=90)
    assert code == 0, err
    assert time.monotonic() - t0 < 30  # not the probe timeout
    assert out["ok"] and out["verdict"]["ok"] is True
    children = [int(p.name.split("-")[1]) for p in marks.glob("child-*")]
    assert len(children) >= 2  # the discovery probe and the verification probe each forked one
    assert [pid for pid in children if runner.process(pid) is not None] == []


# --------------------------------------------------------------------------------------------
# the runner itself


FORKER = "import os, time\nif os.fork() == 0:\n    {setsid}time.sleep(120)\n    os._exit(0)\nprint('verdict')\n"


@pytest.mark.parametrize("setsid", ["", "os.setsid(); "], ids=["fork", "setsid"])
def test_capture_returns_when_the_command_exits_and_kills_what_it_left(tmp_path, setsid):
    t0 = time.monotonic()
    done = runner.capture([sys.executable, "-c", FORKER.format(setsid=setsid), str(tmp_path)], cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 0 and done.stdout == "verdict\n"
    assert time.monotonic() - t0 < 5
    assert gone(tmp_path, within=2) == []


def test_a_command_killed_by_a_signal_reports_it():
    assert runner.capture(["sh", "-c", "kill -TERM $$"]).returncode == -signal.SIGTERM
