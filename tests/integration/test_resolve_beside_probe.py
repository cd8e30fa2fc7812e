"""The recipe's ref is resolved beside the probe (issue 28): an apply's ``git ls-remote`` runs
while the target's Python imports torch (neither waits on the other), and a probe that fails
stops it: the probe's error is the one reported, at once, and no git outlives the apply.

Real processes: ``git`` is a PATH shim that logs when its ``ls-remote`` starts and ends around
the real git (after a sleep, so an ls-remote that waited for the probe could not overlap it); the
env's ``bin/python`` is a wrapper that logs each start and end around the venv's interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocmbuild.proc import runner, stopper as stopping
from tests.support import leaks
from tests.support.cli import rb

pytestmark = pytest.mark.slow

#: a sleep no other process of the session runs: found in /proc if the shim's sleep outlived the apply
_MARK = "7.0421"


def _git_shim(shims: Path, log: Path, sleep: str) -> dict[str, str]:
    real = shutil.which("git")
    assert real is not None
    shims.mkdir()
    (shims / "git").write_text(
        "#!/bin/sh\n"
        'case " $* " in *" ls-remote "*)\n'
        f'  echo "git-start $(date +%s.%N)" >> "{log}"\n'
        f"  sleep {sleep}\n"
        f'  "{real}" "$@"; rc=$?\n'
        f'  echo "git-end $(date +%s.%N)" >> "{log}"\n'
        "  exit $rc;;\n"
        "esac\n"
        f'exec "{real}" "$@"\n')
    (shims / "git").chmod(0o755)
    return {"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}


def _python_wrapper(env, log: Path, *, fail: bool = False) -> None:
    py = Path(env.python)
    real = py.with_name("python-wrapped")
    os.rename(py, real)  # the venv's link to the interpreter, still under the venv's bin/
    body = "exit 3\n" if fail else f'"{real}" "$@"; rc=$?\necho "probe-end $(date +%s.%N)" >> "{log}"\nexit $rc\n'
    py.write_text(f'#!/bin/sh\necho "probe-start $(date +%s.%N)" >> "{log}"\nsleep 1\n' + body)
    py.chmod(0o755)


def _events(log: Path) -> list[tuple[str, float]]:
    return [(name, float(at)) for name, at in (line.split() for line in log.read_text().splitlines())]


def test_the_ls_remote_runs_while_the_target_is_probed(txn_home, target_env, tmp_path):
    env = target_env("3.5.0", compile_version="3.5.1")
    log = tmp_path / "events"
    _python_wrapper(env, log)
    path = _git_shim(tmp_path / "shims", log, "1")
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json", env=path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"]["ok"]
    events = _events(log)
    names = [name for name, _ in events]
    assert names.count("git-start") == 1, names  # the recipe's ref is a tag: one ls-remote
    git_start = dict(events)["git-start"]
    first_probe_start = next(at for name, at in events if name == "probe-start")
    first_probe_end = next(at for name, at in events if name == "probe-end")
    assert first_probe_start - 1.0 < git_start < first_probe_end, \
        f"the ls-remote started at {git_start}, the probe ran {first_probe_start}..{first_probe_end}: not beside it"


def test_a_probe_that_fails_stops_the_ls_remote_and_is_the_error(txn_home, target_env, tmp_path):
    """The remote takes its time (a 7 s ls-remote), the probe fails after 1 s: the apply reports the
    probe's error (the one it reports without a slow remote), well before the ls-remote would
    have ended, and neither the shim nor its sleep is left."""
    env = target_env("3.5.0", compile_version="3.5.1")
    log = tmp_path / "events"
    _python_wrapper(env, log, fail=True)
    baseline = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert baseline.returncode == 2, baseline.stderr  # a target whose Python fails: a TargetError
    shims = tmp_path / "shims"
    path = _git_shim(shims, log, _MARK)
    start = time.monotonic()
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json", env=path)
    took = time.monotonic() - start
    assert r.returncode == baseline.returncode, r.stderr
    assert json.loads(r.stdout)["error"]["type"] == json.loads(baseline.stdout)["error"]["type"]
    assert json.loads(r.stdout)["error"]["message"] == json.loads(baseline.stdout)["error"]["message"]
    names = [name for name, _ in _events(log)]
    assert "git-start" in names, names  # the ls-remote had started beside the probe
    assert "git-end" not in names, names  # and was stopped, not waited for
    assert took < float(_MARK), f"the apply took {took:.1f}s: it waited for the ls-remote"
    assert not leaks.matching(str(shims)) and not leaks.matching(f"sleep {_MARK}")


def test_in_process_the_apply_returns_with_its_ls_remote_ended(txn_home, target_env, tmp_path, monkeypatch):
    """A library caller (no process exit to end the thread's command): when ``apply`` raises the
    probe's error, the ls-remote started beside it has already been ended."""
    from rocmbuild.errors import TargetError
    from rocmbuild.flows import apply as apply_flow

    env = target_env("3.5.0", compile_version="3.5.1")
    log = tmp_path / "events"
    _python_wrapper(env, log, fail=True)
    shims = tmp_path / "shims"
    for name, value in _git_shim(shims, log, _MARK).items():
        monkeypatch.setenv(name, value)
    start = time.monotonic()
    with pytest.raises(TargetError):
        apply_flow.apply(apply_flow.RecipeSource(txn_home.recipe("mini")), apply_flow.TargetSpec(env=str(env.prefix)))
    assert time.monotonic() - start < float(_MARK)
    assert "git-start" in [name for name, _ in _events(log)]
    assert not leaks.matching(str(shims)) and not leaks.matching(f"sleep {_MARK}"), "the ls-remote outlived the apply"


def test_an_unreachable_remote_is_still_reported_after_a_good_probe(txn_home, target_env, tmp_path):
    """The probe succeeds, the ls-remote fails: the fetch error (exit 3), as before."""
    env = target_env("3.5.0", compile_version="3.5.1")
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--source", str(tmp_path / "no-such-repo"),
           "--json")
    assert r.returncode == 3, r.stderr
    assert json.loads(r.stdout)["error"]["type"] == "FetchError"
    assert "no-such-repo" in json.loads(r.stdout)["error"]["message"]


def _capture_in_thread(stopper: stopping.Stopper, argv: list[str], out: list) -> threading.Thread:
    def run() -> None:
        with stopping.stoppable(stopper):
            out.append(runner.capture(argv, timeout=60))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_stopper_ends_a_command_another_thread_waits_for(tmp_path):
    stopper, out = stopping.Stopper(), []
    thread = _capture_in_thread(stopper, ["sleep", _MARK], out)
    deadline = time.monotonic() + 10
    while not leaks.matching(f"sleep {_MARK}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert leaks.matching(f"sleep {_MARK}"), "the command never started"
    start = time.monotonic()
    stopper.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert time.monotonic() - start < 5
    assert out and out[0].returncode != 0  # ended by a signal, as the waiting thread sees it
    assert not leaks.matching(f"sleep {_MARK}")


def test_a_command_started_after_the_stop_is_ended_at_once(tmp_path):
    stopper, out = stopping.Stopper(), []
    stopper.stop()
    start = time.monotonic()
    thread = _capture_in_thread(stopper, ["sleep", _MARK], out)
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - start < 5
    assert out and out[0].returncode != 0
    assert not leaks.matching(f"sleep {_MARK}")


def test_outside_stoppable_a_stopper_ends_nothing(tmp_path):
    """Only the commands started within :func:`stopping.stoppable` are the stopper's."""
    stopper = stopping.Stopper()
    stopper.stop()
    done = runner.capture([sys.executable, "-c", "print('ran')"], timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ran"
    assert subprocess.run(["true"], check=False).returncode == 0
