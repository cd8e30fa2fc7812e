"""The session's leak check (tests/conftest.py) itself: a nested pytest session, with the suite's
conftest loaded as a plugin, that leaks a child and an orphan fails, names both, and kills them; a
session that waits for its processes passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.support.cli import REPO
from tests.support.leaks import running

LEAKY = textwrap.dedent("""
    import os, subprocess, sys

    def test_leaks():
        quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        child = subprocess.Popen(["sleep", "301"], start_new_session=True, **quiet)  # never waited, never killed
        # an orphan: its parent exits at once, it is reparented away from pytest's tree
        orphan = subprocess.run([sys.executable, "-c",
                                 "import subprocess as s; print(s.Popen(['sleep', '302'], start_new_session=True, "
                                 "stdout=s.DEVNULL, stderr=s.DEVNULL).pid)"],
                                capture_output=True, text=True, check=True).stdout.strip()
        with open(os.environ["LEAK_PIDS"], "w") as f:
            f.write(f"{child.pid} {orphan}")
""")

CLEAN = textwrap.dedent("""
    import subprocess

    def test_waits():
        p = subprocess.Popen(["sleep", "0.2"], start_new_session=True)
        assert p.wait(timeout=30) == 0
""")


def _nested(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_nested.py").write_text(body)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["LEAK_PIDS"] = str(tmp_path / "pids")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "base"), str(tmp_path / "test_nested.py")],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)


def test_a_session_that_leaks_fails_and_its_leftovers_are_killed(tmp_path):
    r = _nested(tmp_path, LEAKY)
    assert (tmp_path / "pids").exists(), r.stdout + r.stderr
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    try:
        assert r.returncode != 0, r.stdout
        assert "2 process(es) started by the test session outlived it" in r.stdout, r.stdout
        for pid in pids:
            assert f"pid {pid} " in r.stdout
        assert "sleep 301" in r.stdout and "sleep 302" in r.stdout
        deadline = time.monotonic() + 10
        while any(running(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(running(p) for p in pids)  # the check killed them
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_session_that_waits_for_its_processes_passes(tmp_path):
    r = _nested(tmp_path, CLEAN)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "outlived" not in r.stdout
