"""A fork server for ``rb()``: each command a real process, without paying the imports each time.

Every ``rb()`` used to start a fresh interpreter that imports rocmbuild's whole tree before it
does anything (1.4-2.0 s of a 2-core machine under load, several hundred times per suite). The
server is one ``python -c`` (this checkout on ``PYTHONPATH``, cwd the checkout, started on the
first ``rb()``) that imports every ``rocmbuild`` module once, then forks one child per command.
The child is what ``python -m rocmbuild ARGS`` is, minus the start-up:

* its own process and session (``setsid``), so the exit code, a failpoint's ``os._exit(137)``,
  the supervisor and the probe are as real as before, and a timeout kills its process group;
* the command's environment (``os.environ`` replaced), cwd, ``sys.argv`` and ``sys.path[0]`` as
  ``-m`` sets them, stdin ``/dev/null``, stdout and stderr to files read back as ``rb()`` read
  its pipes (text, universal newlines);
* its ``/proc/<pid>/cmdline`` rewritten to ``python -m rocmbuild ARGS`` (the server's argument
  area is padded to hold it), so lock records, process listings and tests that look for a
  command by its command line see what they saw; the rest of the area reads as empty arguments
  at the end (shrinking it takes CAP_SYS_RESOURCE), which every reader of ``cmdline`` in
  rocmbuild and the tests skips;
* it runs ``rocmbuild.__main__`` through ``runpy`` and ends as the interpreter does (its exit
  code from ``SystemExit``, a traceback and 1 for an exception, killed by SIGINT for an uncaught
  Ctrl-C; non-daemon threads joined, atexit handlers run, streams flushed), but without tearing
  down the hundreds of modules the server imported (0.4 s a command here), which nothing sees:
  what the command held in locals went with its frames, cycles are collected first.

Decisions: a command whose environment differs from the server's in what the interpreter reads
at start-up (``PYTHON*``, ``LC_*``, ``LANG``, ``LANGUAGE``: e.g. a planted ``sitecustomize`` on
``PYTHONPATH``, a C locale) runs as a fresh ``python -m rocmbuild``, as does a command started
while the server is busy (``rb()`` from several threads at once stays concurrent) or whose
argv does not fit; no rocmbuild module reads the environment, the terminal or argv at import
time (checked when this was written), so an import made earlier is the import a fresh process
would make. ``ROCMBUILD_TEST_PLAIN_RB=1`` turns the server off (every ``rb()`` a fresh process).
The server is ended by the session's leak check, before it looks for survivors.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

PLAIN = "ROCMBUILD_TEST_PLAIN_RB"
ROOM = 16384  # bytes of padding in the server's argv: the longest command line a child can show
START_UP = ("PYTHON", "LC_", "LANG", "LANGUAGE")  # what the interpreter reads before any import

SERVER = r"""
import ctypes, json, os, pkgutil, runpy, sys
import rocmbuild
for m in pkgutil.walk_packages(rocmbuild.__path__, "rocmbuild."):
    if not m.name.endswith("__main__") and ".demo.data" not in m.name:
        __import__(m.name)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        break
    sys.stdout.write(json.dumps({"pid": pid}) + "\n")
    sys.stdout.flush()
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
    sys.stdout.flush()
else:
    sys.exit(0)
os.setsid()
for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["out"], os.O_WRONLY), (2, req["err"], os.O_WRONLY)):
    f = os.open(path, flags)
    os.dup2(f, fd)
    os.close(f)
with open("/proc/self/stat", "rb") as f:
    stat = f.read()
start, end = map(int, stat[stat.rindex(b")") + 2:].split()[45:47])
title = b"\0".join(os.fsencode(a) for a in req["cmdline"]) + b"\0"
ctypes.memmove(start, title[:end - start - 1].ljust(end - start, b"\0"), end - start)
os.environ.clear()
os.environ.update(req["env"])
os.chdir(req["cwd"])
sys.path[0] = req["cwd"]
sys.argv = [req["module"], *req["args"]]
code = 0
try:
    runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
except BaseException as exc:
    sys.excepthook(type(exc), exc, exc.__traceback__)
    code = -2 if isinstance(exc, KeyboardInterrupt) else 1
    del exc
# the interpreter's exit without its module teardown: threads joined, atexit, cycles, streams
import atexit, gc, signal, threading
threading._shutdown()
atexit._run_exitfuncs()
gc.collect()
if code is not None and not isinstance(code, int):
    print(code, file=sys.stderr)
    code = 1
for stream in (sys.stdout, sys.stderr):
    try:
        stream.flush()
    except Exception:
        code = 120
if code == -2:  # as CPython ends on an uncaught KeyboardInterrupt: killed by SIGINT
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
os._exit(code or 0)
""" + "#" + " " * ROOM


def _start_up(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(START_UP)}


class Server:
    """One fork server (see the module's docstring); ``run`` is used by one thread at a time."""

    def __init__(self, repo: Path, env: dict[str, str]) -> None:
        self.repo, self.start_up = repo, _start_up(env)
        self.scratch = Path(tempfile.mkdtemp(prefix="rb-forkserver-"))
        self.busy = threading.Lock()
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, cwd=str(repo), text=True, start_new_session=True)

    def fits(self, argv: list[str], env: dict[str, str]) -> bool:
        return (self.proc.poll() is None and _start_up(env) == self.start_up
                and len(b"\0".join(os.fsencode(a) for a in argv)) < ROOM)

    def _reply(self, timeout: float | None) -> dict | None:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                return None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the rb() fork server died")
        return json.loads(line)

    def run(self, argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        """``argv`` (``[python, -m, MODULE, ARGS...]``, MODULE rocmbuild or one with this
        checkout on the path) as a child of the server; raises ``subprocess.TimeoutExpired``
        after killing its group, as ``rb()`` does."""
        out, err = self.scratch / "out", self.scratch / "err"
        out.write_bytes(b"")
        err.write_bytes(b"")
        req = {"module": argv[2], "args": argv[3:], "cmdline": argv, "env": env, "cwd": str(self.repo), "out": str(out), "err": str(err)}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        pid = (self._reply(30) or {}).get("pid")
        if pid is None:
            raise RuntimeError("the rb() fork server did not fork")
        try:
            done = self._reply(timeout)
            if done is None:
                _killpg(pid)
                self._reply(30)
                raise subprocess.TimeoutExpired(argv, timeout, output=out.read_text(), stderr=err.read_text())
        except BaseException:
            _killpg(pid)  # Ctrl-C on pytest too: end the command and whatever it started in its group
            raise
        return subprocess.CompletedProcess(argv, done["rc"], out.read_text(), err.read_text())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _killpg(self.proc.pid)
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        for name in ("out", "err"):
            (self.scratch / name).unlink(missing_ok=True)
        self.scratch.rmdir()


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_SERVER: Server | None = None
_GUARD = threading.Lock()


def acquire(repo: Path, argv: list[str], env: dict[str, str], base: dict[str, str]) -> Server | None:
    """The session's server, locked for the command ``argv`` with the environment ``env``; None:
    run it as a fresh process. A server is started with ``base`` (what ``rb()`` gives a command
    that asks for nothing more) when there is none."""
    global _SERVER
    if os.environ.get(PLAIN) == "1":
        return None
    with _GUARD:
        if _SERVER is not None and _SERVER.proc.poll() is not None:
            close()
        if _SERVER is None:
            _SERVER = Server(repo, base)
        server = _SERVER
    if not server.busy.acquire(blocking=False):
        return None
    if not server.fits(argv, env):
        server.busy.release()
        return None
    return server


def release(server: Server, *, broken: bool) -> None:
    """After a command: a server whose protocol state is unknown (an exception) is ended."""
    server.busy.release()
    if broken:
        with _GUARD:
            if _SERVER is server:
                close()


def close() -> None:
    """End the session's server (the leak check calls this before it looks for survivors)."""
    global _SERVER
    if _SERVER is not None:
        server, _SERVER = _SERVER, None
        server.close()


def _echo(args: list[str]) -> int:
    """``python -m tests.support.forkserver [sleep S] [thread] [exit N]``: what a process sees, as
    JSON on stdout, for the fork server's own tests; ``thread``: a non-daemon thread writes
    ``thread done`` to stderr after the main thread ended; ``atexit``: an atexit handler writes
    ``atexit ran``."""
    import atexit
    import time
    me = os.getpid()
    print(json.dumps({"pid": me, "sid": os.getsid(0), "pgid": os.getpgid(0), "argv": sys.argv,
                      "path0": sys.path[0], "cwd": os.getcwd(), "env": dict(os.environ),
                      "cmdline": Path(f"/proc/{me}/cmdline").read_bytes().decode().split("\0"),
                      "stdin": os.readlink("/proc/self/fd/0"), "main": sys.modules["__main__"].__file__}), flush=True)
    if "atexit" in args:
        atexit.register(lambda: print("atexit ran", file=sys.stderr))
    if "thread" in args:
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", file=sys.stderr))).start()
    if "sleep" in args:
        time.sleep(float(args[args.index("sleep") + 1]))
    return int(args[args.index("exit") + 1]) if "exit" in args else 0


if __name__ == "__main__":
    sys.exit(_echo(sys.argv[1:]))
