"""A supervisor started ahead (rocmbuild/proc/ahead.py): a command handed to it runs
exactly as one started the classic way (argv, cwd, environment, stdin, stdout and stderr, exit
code, its supervisor), the next one is started while it runs, nothing is left when ``ahead()``
ends or when rocmbuild is SIGKILLed, and every command it must not run (another thread's, one near
the kernel's limits, a dead spare's) takes the classic start. Real processes throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rocmbuild.errors import SystemLimitError
from rocmbuild.proc import ahead, runner

REPO = Path(__file__).resolve().parents[2]

SHOW = ("import os, sys; print(sys.argv[1:]); print(os.getcwd()); print(os.environ.get('AHEAD_SET'), "
        "os.environ.get('AHEAD_GONE')); print(repr(sys.stdin.read())); print('to-err', file=sys.stderr); "
        "print(open('/proc/%d/cmdline' % os.getppid(), 'rb').read().split(b'\\0')[3].decode()); "
        "sys.exit(7)")


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                return True  # exited; an orphan's zombie waits for init to reap it
        except OSError:
            return True
        time.sleep(0.02)
    return False


def _ready(spare: subprocess.Popen) -> None:
    """Wait until the spare is blocked reading its request (its start-up is over)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if Path(f"/proc/{spare.pid}/wchan").read_text() in ("pipe_read", "pipe_wait", "wait_woken"):
            return
        time.sleep(0.01)


@pytest.fixture
def gone_var(monkeypatch):
    monkeypatch.setenv("AHEAD_GONE", "present in rocmbuild's environment")


@pytest.mark.parametrize("started", ["ahead", "classic"])
def test_a_command_started_ahead_runs_exactly_as_a_classic_one(tmp_path, gone_var, started):
    argv = [sys.executable, "-c", SHOW, "a b", "", "ü"]
    env = {"AHEAD_SET": "yes", "AHEAD_GONE": None}
    if started == "ahead":
        with ahead.started():
            ahead.warm()
            spare = ahead.waiting()
            assert spare is not None
            done = runner.capture(argv, cwd=tmp_path, env=env)
            assert ahead.waiting() is not None and ahead.waiting() is not spare  # the next one
        assert _gone(spare.pid)
    else:
        done = runner.capture(argv, cwd=tmp_path, env=env)
    out = done.stdout.splitlines()
    assert done.returncode == 7
    assert out[0] == repr(["a b", "", "ü"])
    assert out[1] == str(tmp_path)
    assert out[2] == "yes None"  # set, and removed
    assert out[3] == "''"  # stdin is /dev/null
    assert done.stderr == "to-err\n"
    assert out[4].endswith("reaper.py")  # under a supervisor either way


def test_run_merges_stderr_into_the_log_when_started_ahead(tmp_path):
    log = tmp_path / "log"
    with ahead.started():
        ahead.warm()
        done = runner.run(["sh", "-c", "echo one; echo two >&2; echo three"], log=log)
    assert done.stdout.splitlines() == ["one", "two", "three"]
    assert log.read_text().splitlines()[1:] == ["one", "two", "three"]


def test_a_program_killed_by_a_signal_reads_as_killed_when_started_ahead():
    with ahead.started():
        ahead.warm()
        done = runner.capture(["sh", "-c", "kill -KILL $$"])
    assert done.returncode == -signal.SIGKILL


def test_the_command_gets_the_supervisor_waiting_ahead_and_the_next_is_started():
    with ahead.started():
        ahead.warm()
        first = ahead.waiting()
        assert first is not None
        _ready(first)
        done = runner.capture(["sh", "-c", "echo $PPID"])
        assert int(done.stdout) == first.pid  # its supervisor is the one started ahead
        second = ahead.waiting()
        assert second is not None and second.pid != first.pid
        done = runner.capture(["sh", "-c", "echo $PPID"])
        assert int(done.stdout) == second.pid
        last = ahead.waiting()
    assert last is not None and _gone(last.pid) and last.returncode == -signal.SIGKILL  # killed, reaped
    assert ahead.waiting() is None


def test_outside_ahead_nothing_is_started_ahead():
    ahead.warm()
    assert ahead.waiting() is None
    runner.capture(["true"])
    assert ahead.waiting() is None


def test_a_spare_that_died_is_replaced_by_a_classic_start():
    with ahead.started():
        ahead.warm()
        spare = ahead.waiting()
        assert spare is not None
        os.killpg(spare.pid, signal.SIGKILL)
        spare.wait()
        done = runner.capture(["sh", "-c", "echo ok"])
        assert done.stdout == "ok\n" and done.returncode == 0


def test_another_threads_command_takes_the_classic_start_and_leaves_the_spare():
    seen: dict = {}
    with ahead.started():
        ahead.warm()
        spare = ahead.waiting()
        t = threading.Thread(target=lambda: seen.update(done=runner.capture(["sh", "-c", "echo $PPID"])))
        t.start()
        t.join()
        assert ahead.waiting() is spare  # still waiting for a command of the main thread
    assert int(seen["done"].stdout) != spare.pid and seen["done"].returncode == 0


def test_a_command_near_the_kernels_limit_takes_the_classic_start_and_reports_e2big():
    with ahead.started():
        ahead.warm()
        with pytest.raises(SystemLimitError) as ei:
            runner.capture(["true", "x" * (runner.MAX_ARG_STRLEN + 10)])
        assert "argument list is too long" in ei.value.message
        done = runner.capture(["true", "x" * 1000])  # the next command still runs
        assert done.returncode == 0


def test_a_stop_while_handing_the_command_over_kills_the_spare(mocker):
    with ahead.started():
        ahead.warm()
        spare = ahead.waiting()
        assert spare is not None
        mocker.patch.object(spare, "stdin", mocker.Mock(write=mocker.Mock(side_effect=KeyboardInterrupt)))
        with pytest.raises(KeyboardInterrupt):
            runner.capture(["sh", "-c", "echo never"])
        assert spare.returncode == -signal.SIGKILL  # killed and reaped: it never runs half a command
        assert ahead.waiting() is None


def test_a_cwd_that_is_gone_gives_the_classic_error(tmp_path):
    with ahead.started():
        ahead.warm()
        with pytest.raises(FileNotFoundError):
            runner.capture(["true"], cwd=tmp_path / "missing")


CHILD = textwrap.dedent("""
    import sys, time
    from rocmbuild.proc import ahead, runner
    with ahead.started():
        ahead.warm()
        print(ahead.waiting().pid, flush=True)
        time.sleep(300)
""")


def test_a_sigkill_of_rocmbuild_ends_the_spare_waiting_ahead():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        spare = int(proc.stdout.readline())
        assert not _gone(spare, within=0.3)  # it waits
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _gone(spare)  # its parent-death signal (and the closed pipe) end it, no program started
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        proc.stdout.close()
