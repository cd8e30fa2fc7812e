"""A fork server for ``rb()``: each command a real process, without paying the imports each time.

Every ``rb()`` used to start a fresh interpreter that imports rocmbuild's whole tree before it
does anything (1.4-2.0 s of a 2-core machine under load, several hundred times per suite). The
server is one ``python -c`` (this checkout on ``PYTHONPATH``, cwd the checkout, started on the
first ``rb()``) that imports every ``rocmbuild`` module once, then forks one child per command.
The child is what ``python -m rocmbuild ARGS`` is, minus the start-up:

* its own process and session (``setsid``), so the exit code, a failpoint's ``os._exit(137)``,
  the supervisor and the probe are as real as before, and a timeout kills its process group;
* the command's environment (``os.environ`` replaced), cwd, ``sys.argv`` and ``sys.path[0]`` as
  ``-m`` sets them, stdin ``/dev/null``, and stdout and stderr pipes made by ``rb()`` (passed to
  the server with the request over a ``SOCK_SEQPACKET`` socket), read to EOF and decoded as
  ``communicate`` does: a process the command leaves holding them keeps ``rb()`` waiting, as before;
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
import locale
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

PLAIN = "ROCMBUILD_TEST_PLAIN_RB"
ROOM = 16384  # bytes of padding in the server's argv: the longest command line a child can show
START_UP = ("PYTHON", "LC_", "LANG", "LANGUAGE")  # what the interpreter reads before any import

SERVER = r"""
import ctypes, json, os, pkgutil, runpy, socket, sys
import rocmbuild
for m in pkgutil.walk_packages(rocmbuild.__path__, "rocmbuild."):
    if not m.name.endswith("__main__") and ".demo.data" not in m.name:
        __import__(m.name)
sock = socket.socket(fileno=0)  # SOCK_SEQPACKET: one request (and its two pipes) per message
while True:
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
    if not msg:
        sys.exit(0)
    req = json.loads(msg)
    pid = os.fork()
    if pid == 0:
        break
    for fd in fds:
        os.close(fd)
    sock.sendall(json.dumps({"pid": pid}).encode())
    _, status = os.waitpid(pid, 0)
    sock.sendall(json.dumps({"rc": os.waitstatus_to_exitcode(status)}).encode())
os.setsid()
null = os.open(os.devnull, os.O_RDONLY)
for fd, src in ((0, null), (1, fds[0]), (2, fds[1])):
    os.dup2(src, fd)
for fd in (null, *fds):
    os.close(fd)
sock.detach()
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


def _text(data: bytes) -> str:
    """Bytes read from a pipe as ``Popen(text=True).communicate`` returns them."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


class Server:
    """One fork server (see the module's docstring); ``run`` is used by one thread at a time."""

    def __init__(self, repo: Path, env: dict[str, str]) -> None:
        self.repo, self.start_up = repo, _start_up(env)
        self.busy = threading.Lock()
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=theirs, stdout=subprocess.DEVNULL,
                                         env=env, cwd=str(repo), start_new_session=True)
        finally:
            theirs.close()

    def fits(self, argv: list[str], env: dict[str, str]) -> bool:
        return (self.proc.poll() is None and _start_up(env) == self.start_up
                and len(b"\0".join(os.fsencode(a) for a in argv)) < ROOM)

    def _reply(self, deadline: float) -> dict | None:
        """The server's next message, None at the deadline."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock, selectors.EVENT_READ)
            if not sel.select(max(0.0, deadline - time.monotonic())):
                return None
        msg = self.sock.recv(1 << 16)
        if not msg:
            raise RuntimeError("the rb() fork server died")
        return json.loads(msg)

    def _drain(self, pipes: dict[int, bytearray], deadline: float) -> bool:
        """Read the pipes to EOF (True) or to the deadline (False)."""
        with selectors.DefaultSelector() as sel:
            for fd in pipes:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                ready = sel.select(max(0.0, deadline - time.monotonic()))
                if not ready:
                    return False
                for key, _ in ready:
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        pipes[key.fd] += chunk
                    else:
                        sel.unregister(key.fd)
        return True

    def run(self, argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        """``argv`` (``[python, -m, MODULE, ARGS...]``, MODULE rocmbuild or one with this
        checkout on the path) as a child of the server, its stdout and stderr pipes of ours (read
        to EOF, as ``communicate`` reads them); raises ``subprocess.TimeoutExpired`` after killing
        its group, as ``rb()`` does."""
        req = {"module": argv[2], "args": argv[3:], "cmdline": argv, "env": env, "cwd": str(self.repo)}
        (r_out, w_out), (r_err, w_err) = os.pipe(), os.pipe()
        pipes = {r_out: bytearray(), r_err: bytearray()}
        pid = None
        try:
            try:
                socket.send_fds(self.sock, [json.dumps(req).encode()], [w_out, w_err])
            finally:
                os.close(w_out)
                os.close(w_err)
            pid = (self._reply(time.monotonic() + 30) or {}).get("pid")
            if pid is None:
                raise RuntimeError("the rb() fork server did not fork")
            deadline = time.monotonic() + timeout
            done = self._reply(deadline) if self._drain(pipes, deadline) else None
            if done is None:
                _killpg(pid)
                self._drain(pipes, time.monotonic() + 30)
                self._reply(time.monotonic() + 30)
                raise subprocess.TimeoutExpired(argv, timeout, output=_text(pipes[r_out]), stderr=_text(pipes[r_err]))
        except BaseException:
            if pid is not None:
                _killpg(pid)  # Ctrl-C on pytest too: end the command and whatever it started in its group
            raise
        finally:
            os.close(r_out)
            os.close(r_err)
        return subprocess.CompletedProcess(argv, done["rc"], _text(pipes[r_out]), _text(pipes[r_err]))

    def close(self) -> None:
        self.sock.close()  # the server reads an empty message and exits
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _killpg(self.proc.pid)
            self.proc.wait()


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
    """``python -m tests.support.forkserver [sleep S] [thread] [atexit] [linger] [exit N]``: what a
    process sees, as JSON on stdout, for the fork server's own tests; ``thread``: a non-daemon
    thread writes ``thread done`` to stderr after the main thread ended; ``atexit``: an atexit
    handler writes ``atexit ran``; ``linger``: a process in a session of its own prints
    ``lingered`` a second after this one ended."""
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
    if "linger" in args:  # a process of another session that holds stdout after this one ended
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1); print('lingered')"], start_new_session=True)
    return int(args[args.index("exit") + 1]) if "exit" in args else 0


if __name__ == "__main__":
    sys.exit(_echo(sys.argv[1:]))
