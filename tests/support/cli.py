"""``rb()``: the real CLI as a real process, with this checkout's ``rocmbuild`` on the path.

Tests that hold the exit codes, the ``--json`` contract and the failpoints must see what a user
sees, so they run ``python -m rocmbuild`` in a subprocess rather than calling ``main``. That
process is forked from a server that has imported rocmbuild once (tests/support/forkserver.py:
the same process, exit code, session and command line, without the 1-2 s of imports), or is a
fresh interpreter when the server cannot stand in for one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support import forkserver

REPO = Path(__file__).resolve().parents[2]


def rb(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -m rocmbuild ARGS`` as a real process (the live environment + ``env``): forked
    from the session's fork server when it can be (tests/support/forkserver.py), else a fresh one."""
    base = dict(os.environ)
    base["PYTHONPATH"] = str(REPO) + os.pathsep + base.get("PYTHONPATH", "")
    e = dict(base, **(env or {}))
    argv = [sys.executable, "-m", "rocmbuild", *map(str, args)]
    server = forkserver.acquire(REPO, argv, e, base)
    if server is not None:
        broken = True
        try:
            done = server.run(argv, e, timeout)
            broken = False
            return done
        finally:
            forkserver.release(server, broken=broken)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e, cwd=str(REPO),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # a timeout, or Ctrl-C on pytest: end the run and whatever it started in its group
        kill_group(proc, wait=False)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen, *, wait: bool = True) -> None:
    """Teardown: SIGKILL ``proc``'s whole process group (it was started with ``start_new_session``)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if wait:
        proc.wait()
