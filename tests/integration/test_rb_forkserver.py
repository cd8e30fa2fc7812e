"""``rb()``'s fork server (tests/support/forkserver.py) stands in for a fresh ``python -m``.

Each test holds one thing a fresh process gives and a forked child must give too: the same
output and exit code, its own session, the command line, environment, cwd, argv and stdin of a
fresh process, the interpreter's exit (threads joined, atexit run), a timeout that kills it, and
a fresh process whenever the start-up environment differs or the server is busy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from tests.support import forkserver
from tests.support.cli import REPO, rb
from tests.support.leaks import running

ECHO = "tests.support.forkserver"


@pytest.fixture(scope="module")
def server():
    """One server for the module (each test leaves it ready for the next)."""
    base = dict(os.environ, PYTHONPATH=str(REPO))
    s = forkserver.Server(REPO, base)
    try:
        yield s, base
    finally:
        s.close()


def echo(s: forkserver.Server, env: dict, *args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, dict]:
    done = s.run([sys.executable, "-m", ECHO, *args], env, timeout)
    return done, json.loads(done.stdout.splitlines()[0])


def test_a_child_is_what_a_fresh_process_is(server, tmp_path):
    s, base = server
    env = dict(base, ROCMBUILD_HOME=str(tmp_path / "home"), ONLY_HERE="1")
    done, seen = echo(s, env, "exit", "3", "x y")
    fresh = subprocess.run([sys.executable, "-m", ECHO, "exit", "3", "x y"], env=env, cwd=str(REPO),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
    want = json.loads(fresh.stdout)
    assert done.returncode == fresh.returncode == 3
    assert seen["pid"] == seen["sid"] == seen["pgid"] != s.proc.pid  # its own session, not the server
    for key in ("argv", "path0", "cwd", "stdin", "main"):
        assert seen[key] == want[key], key
    # the command line a fresh process shows, then the NULs that pad the server's (see forkserver)
    assert [a for a in seen["cmdline"] if a] == [a for a in want["cmdline"] if a] == [sys.executable, "-m", ECHO, "exit", "3", "x y"]
    assert not any(seen["cmdline"][6:])
    assert seen["env"] == env != dict(os.environ)


def test_the_interpreters_exit_is_kept(server):
    s, base = server
    done, _ = echo(s, base, "thread", "atexit")
    assert done.returncode == 0
    assert done.stderr.splitlines() == ["thread done", "atexit ran"], done.stderr


def test_output_is_read_to_its_end_as_communicate_reads_it(server):
    s, base = server
    done, _ = echo(s, base, "linger")  # a process left holding stdout keeps rb() waiting, as before
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "lingered"


def test_a_timeout_kills_the_child_and_the_server_goes_on(server):
    s, base = server
    with pytest.raises(subprocess.TimeoutExpired) as ei:
        echo(s, base, "sleep", "60", timeout=1.5)
    pid = json.loads(ei.value.output.splitlines()[0])["pid"]
    assert not running(pid)
    done, _ = echo(s, base, "exit", "0")
    assert done.returncode == 0


def test_rb_through_the_server_says_what_a_fresh_process_says(tmp_path, monkeypatch):
    cases = [("--version",), ("status", "--json", "--env", str(tmp_path / "absent")), ("no-such-verb",)]
    served = [rb(*c) for c in cases]
    monkeypatch.setenv(forkserver.PLAIN, "1")
    fresh = [rb(*c) for c in cases]
    for a, b in zip(served, fresh, strict=True):
        assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr), a.args
    assert [a.returncode for a in served] == [0, 2, 2]


def test_a_different_start_up_environment_gets_a_fresh_process(tmp_path):
    plant = tmp_path / "plant"
    plant.mkdir()
    mark = tmp_path / "sitecustomize-ran"
    (plant / "sitecustomize.py").write_text(f"open({str(mark)!r}, 'a').write('x')\n")
    assert rb("--version").returncode == 0 and not mark.exists()
    done = rb("--version", env={"PYTHONPATH": os.pathsep.join((str(REPO), str(plant)))})
    assert done.returncode == 0 and mark.read_text() == "x"


def test_concurrent_rb_calls_stay_concurrent(tmp_path):
    rb("--version")  # the server is up
    got: list[subprocess.CompletedProcess] = []
    threads = [threading.Thread(target=lambda: got.append(rb("--version"))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [d.returncode for d in got] == [0, 0, 0] and len({d.stdout for d in got}) == 1
