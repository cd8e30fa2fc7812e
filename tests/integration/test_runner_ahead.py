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
            before = ahead.waiting()
            assert len(before) == ahead.DEPTH
            done = runner.capture(argv, cwd=tmp_path, env=env)
            after = ahead.waiting()
            assert len(after) == ahead.DEPTH and before[0] not in after  # used, and replaced
        assert all(_gone(p.pid) for p in before + after)
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
        first = ahead.waiting()[0]
        _ready(first)
        done = runner.capture(["sh", "-c", "echo $PPID"])
        assert int(done.stdout) == first.pid  # its supervisor is the one started ahead (the oldest)
        second = ahead.waiting()[0]
        assert second is not first and len(ahead.waiting()) == ahead.DEPTH  # the next, started meanwhile
        done = runner.capture(["sh", "-c", "echo $PPID"])
        assert int(done.stdout) == second.pid
        left = ahead.waiting()
        assert len(left) == ahead.DEPTH and not {first.pid, second.pid} & {p.pid for p in left}
    assert all(_gone(p.pid) and p.returncode == -signal.SIGKILL for p in left)  # killed and reaped
    assert ahead.waiting() == ()


def test_outside_ahead_nothing_is_started_ahead():
    ahead.warm()
    assert ahead.waiting() == ()
    runner.capture(["true"])
    assert ahead.waiting() == ()


def test_a_spare_that_died_is_replaced_by_a_classic_start():
    with ahead.started():
        ahead.warm()
        spare = ahead.waiting()[0]
        os.killpg(spare.pid, signal.SIGKILL)
        spare.wait()
        done = runner.capture(["sh", "-c", "echo ok"])
        assert done.stdout == "ok\n" and done.returncode == 0


def test_another_threads_command_takes_the_classic_start_and_leaves_the_spare():
    seen: dict = {}
    with ahead.started():
        ahead.warm()
        spares = ahead.waiting()
        t = threading.Thread(target=lambda: seen.update(done=runner.capture(["sh", "-c", "echo $PPID"])))
        t.start()
        t.join()
        assert ahead.waiting() == spares  # still waiting for commands of the main thread
    assert int(seen["done"].stdout) not in {p.pid for p in spares} and seen["done"].returncode == 0


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
        spare = ahead.waiting()[0]
        mocker.patch.object(spare, "stdin", mocker.Mock(write=mocker.Mock(side_effect=KeyboardInterrupt)))
        with pytest.raises(KeyboardInterrupt):
            runner.capture(["sh", "-c", "echo never"])
        assert spare.returncode == -signal.SIGKILL  # killed and reaped: it never runs half a command
        assert spare not in ahead.waiting()


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
        print(*(p.pid for p in ahead.waiting()), flush=True)
        time.sleep(300)
""")


def test_a_sigkill_of_rocmbuild_ends_the_spare_waiting_ahead():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        spares = [int(p) for p in proc.stdout.readline().split()]
        assert len(spares) == ahead.DEPTH and not any(_gone(p, within=0.3) for p in spares)  # they wait
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert all(_gone(p) for p in spares)  # their parent-death signal (and the closed pipe) end them
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        proc.stdout.close()
