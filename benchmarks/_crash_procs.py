"""The crash campaign's processes: ``rocmbuild`` started and killed, the per-lane fork server, and
the processes a run leaves behind (read from ``/proc``). Used by ``benchmarks/crashes.py`` only.

Decisions: the killed commands and the timed runs are real ``python -m rocmbuild`` processes
(:class:`Started`); the checks and preparations may go through a lane's :class:`ForkServer`, which
has imported the CLI once (see its comment). Every process is started in its own session and only
those are killed (``os.killpg`` of a group it made).
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

from benchmarks._common import ROOT

RUN_MARKER = "ROCMBUILD_CRASH_RUN"


class Broken(Exception):
    """The invariant does not hold; the message says how."""


# --------------------------------------------------------------------------------------------
# rocmbuild as a real process


class Started:
    """``python -m rocmbuild ARGS`` started in its own session; its output read as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.argv = [sys.executable, "-m", "rocmbuild", *map(str, args)]
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd=str(ROOT), start_new_session=True)
        self.out, self.err = b"", b""
        self.lines: list[tuple[float, str]] = []  # (seconds since start, stderr line)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.sel.register(self.proc.stderr, selectors.EVENT_READ)
        self.killed = False

    def pump(self, until: float, marker: str | None = None) -> float | None:
        """Read until the monotonic time ``until``, or the stderr line holding ``marker`` (returns
        when it came, monotonic), or both pipes closed (None)."""
        while True:
            if marker is not None:
                for t, line in self.lines:
                    if marker in line:
                        return self.t0 + t
            now = time.monotonic()
            if now >= until or not self.sel.get_map():
                return None
            for key, _ in self.sel.select(until - now):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    self.sel.unregister(key.fileobj)
                elif key.fileobj is self.proc.stdout:
                    self.out += chunk
                else:
                    self._stderr(chunk)

    def _stderr(self, chunk: bytes) -> None:
        at = time.monotonic() - self.t0
        done = self.err.count(b"\n")
        self.err += chunk
        for line in self.err.split(b"\n")[done:-1]:
            self.lines.append((at, line.decode(errors="replace")))

    def kill(self) -> bool:
        """SIGKILL the rocmbuild process (not its group). False when it had already exited."""
        if self.proc.poll() is not None:
            return False
        os.kill(self.proc.pid, signal.SIGKILL)
        self.killed = True
        return True

    def finish(self, timeout: float = 120) -> int:
        """Read to the end, wait; on a timeout kill the group and raise."""
        self.pump(time.monotonic() + timeout)
        try:
            return self.proc.wait(timeout=max(1.0, timeout / 4))
        except subprocess.TimeoutExpired:
            kill_group(self.proc.pid)
            self.proc.wait()
            raise Broken(f"`rocmbuild {' '.join(self.argv[3:5])}` did not end within {timeout:.0f} s") from None
        finally:
            self.sel.close()

    def seconds(self) -> float:
        return time.monotonic() - self.t0

    def tail(self, n: int = 6) -> str:
        return _tail(self.err.decode(errors="replace"), n)


# The checks and preparations (not the killed commands, not the timed runs) go through a fork
# server per lane: a `python -c` with this checkout on PYTHONPATH that has imported rocmbuild's CLI
# once and forks one child per command -- its own session, its own stdout/stderr files, the
# command's environment and argv, then `rocmbuild.cli.app.main` as `python -m rocmbuild` calls it.
# The child is a real process doing the command's whole work; only the interpreter start-up and
# the imports (about 0.75 s of CPU of a 1-2 s command here) are not repeated. `--plain` turns it off.
FORK_SERVER = r"""
import json, os, sys
import rocmbuild.cli.app
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            for fd, path in ((1, req["out"]), (2, req["err"])):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(f, fd)
                os.close(f)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            os.environ.clear()
            os.environ.update(req["env"])
            os.chdir(req["cwd"])
            sys.argv = ["rocmbuild", *req["args"]]
            code = rocmbuild.cli.app.main(req["args"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    sys.stdout.write(json.dumps({"pid": pid}) + "\n")
    sys.stdout.flush()
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
    sys.stdout.flush()
"""
LOCAL = threading.local()  # .server: this lane's ForkServer


class ForkServer:
    def __init__(self, env: dict[str, str], scratch: Path) -> None:
        self.scratch = scratch
        scratch.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-c", FORK_SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=str(ROOT), start_new_session=True,
                                     text=True)

    def _reply(self, timeout: float, child: int | None) -> dict:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                if child is not None:
                    kill_group(child)
                raise Broken(f"a command run by the fork server did not end within {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            raise Broken("the fork server died")
        return json.loads(line)

    def run(self, args: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of ``rocmbuild ARGS`` forked from the server."""
        out, err = self.scratch / "out", self.scratch / "err"
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"args": list(map(str, args)), "env": env, "cwd": str(ROOT),
                                          "out": str(out), "err": str(err)}) + "\n")
        self.proc.stdin.flush()
        pid = self._reply(30, None)["pid"]
        rc = self._reply(timeout, pid)["rc"]
        return rc, out.read_text(errors="replace"), err.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill_group(self.proc.pid)
            self.proc.wait()


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def rb(args: list[str], env: dict[str, str], timeout: float = 120) -> tuple[int, dict | None, str]:
    """Run to the end (through this lane's fork server, if it has one): (exit code, the --json
    object or None, stderr)."""
    server = getattr(LOCAL, "server", None)
    if server is not None:
        rc, text, err = server.run(args, env, timeout)
    else:
        s = Started(args, env)
        rc = s.finish(timeout)
        text, err = s.out.decode(errors="replace"), s.err.decode(errors="replace")
    try:
        data = json.loads(text) if text.strip() else None
    except ValueError:
        data = None
    return rc, data, err


def _tail(err: str, n: int = 6) -> str:
    return "\n      ".join(err.strip().splitlines()[-n:])


def must(args: list[str], env: dict[str, str], want: int = 0) -> dict:
    rc, data, err = rb([*args, "--json"], env)
    if rc != want:
        raise Broken(f"`rocmbuild {' '.join(map(str, args[:1]))}` exited {rc}, expected {want}:\n      {_tail(err)}")
    return data or {}


# --------------------------------------------------------------------------------------------
# processes left behind (read from /proc)


def _proc_ids(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, session) of a live process, None when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = text[text.rindex(")") + 2:].split()
    return f[0], int(f[2]), int(f[3])


def _carries(pid: int, tag: bytes) -> bool:
    try:
        return tag in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def left_of(pid: int, marker: str) -> list[int]:
    """Live processes in ``pid``'s process group or session, or carrying ``RUN_MARKER=marker``."""
    tag = f"{RUN_MARKER}={marker}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        ids = _proc_ids(int(d.name))
        if ids is None or ids[0] in "ZX":
            continue
        if pid in (ids[1], ids[2]) or _carries(int(d.name), tag):
            found.append(int(d.name))
    return found


def no_process_left(pid: int, marker: str, grace: float = 10.0) -> None:
    """The run's processes end within ``grace`` seconds (rocmbuild's supervisor needs its own grace
    to end a command: TERM, 3 s, KILL); those still there are named, then killed."""
    deadline = time.monotonic() + grace
    while (left := left_of(pid, marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        names = []
        for p in left:
            try:
                names.append(f"{p}: " + Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
            except OSError:
                names.append(str(p))
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        raise Broken(f"{len(left)} process(es) of the run still there {grace:.0f} s after the kill: "
                     + "; ".join(names))
