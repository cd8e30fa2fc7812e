"""Supervisors started ahead: the next command's supervisor starts while the current one runs.

A supervisor (``reaper.py``) is a fresh ``python -I -S``: about 30 ms here, most of it the
interpreter and ctypes, paid by every command rocmbuild starts (five in an apply: two probes,
two git, the activation's bash). Within :func:`started` (the CLI, around its verb), :func:`warm`
starts one while the verb's modules import, and another after each command runner.py
starts (:data:`DEPTH`). Such a supervisor arms everything at once (its own session,
child subreaper, parent-death signal) and then waits for its program on stdin (reaper.py's
docstring); :func:`hand_over` gives it argv, cwd and environment, so the command runs exactly as
one given on the supervisor's command line, under a supervisor of its own.

Decisions:
* only the main thread uses one, and only the main thread starts one: the parent-death signal
  follows the thread that started the supervisor. Another thread's command starts the classic
  way (the spare stays for the main thread);
* never for a command run as another user (runas.py: the classic start, ``--user`` on its
  command line), nor for one whose argument or environment strings come near the kernel's limits
  (the classic start is the one that reports E2BIG, runner.too_long), nor with a cwd that is not a
  directory (the classic start raises what ``Popen`` raises);
* a spare that died (killed by someone, the OOM killer) is reaped and the command starts the
  classic way; a stop that arrives while a command is handed over kills the spare (it never runs
  half a command) and is raised;
* the spare's own cwd is ``/``: it pins no directory (a mount can still be unmounted); the command
  runs in the cwd it is handed, rocmbuild's own when none is given;
* the ones left unused are killed (SIGKILL: they run nothing yet) and reaped when :func:`started`
  ends. If rocmbuild is SIGKILLed first, its parent-death signal ends it, and the closed pipe
  would too (EOF before a request: it exits 0 and starts nothing).
What it costs: a process of about 9 MiB waits beside rocmbuild; a verb that starts no command
pays its start (under 1 ms in rocmbuild, 30 ms on another core) and its kill (about 1 ms).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

GRACE = 3.0  # seconds between SIGTERM and SIGKILL when a tree is stopped
REAPER = Path(__file__).with_name("reaper.py")
# Linux's limit on one argument or environment string (MAX_ARG_STRLEN: 32 pages)
MAX_ARG_STRLEN = 32 * 4096


#: supervisors kept waiting. One: two (so that a command that follows a short one, the probe 7-20 ms
#: after the activation's bash started, finds one whose start is over) made the apply no faster
#: here, since on 2 cores the extra start competes with rocmbuild's own imports (start-up
#: 0.23 -> 0.28 s; whole tiny apply 0.61 vs 0.64 s, medians of 20).
DEPTH = 1


class _State:
    on = False
    spares: "list[subprocess.Popen[bytes]]" = []  # oldest first


_state = _State()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def started() -> Iterator[None]:
    """Within it, commands started by the main thread get a supervisor started ahead; at its end
    those left unused are killed and reaped (no process outlives it)."""
    _state.on = True
    try:
        yield
    finally:
        _state.on = False
        discard()


def warm() -> None:
    """Start supervisors ahead until :data:`DEPTH` wait (within :func:`started`, in the main
    thread): the CLI calls it once its verb is known, runner.py after each command it starts."""
    while _state.on and len(_state.spares) < DEPTH and _main_thread():
        spare = _spawn()
        if spare is None:
            return
        _state.spares.append(spare)


def discard() -> None:
    """Kill and reap the supervisors waiting ahead."""
    while _state.spares:
        _end(_state.spares.pop())


def waiting() -> "tuple[subprocess.Popen[bytes], ...]":
    """The supervisors waiting ahead, oldest (the next one used) first."""
    return tuple(_state.spares)


def _spawn() -> "subprocess.Popen[bytes] | None":
    try:
        return subprocess.Popen([sys.executable, "-I", "-S", str(REAPER), str(os.getpid()), str(GRACE), "--"],
                                cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError:
        return None  # the classic start will say what is wrong


def _end(spare: "subprocess.Popen[bytes]") -> None:
    try:
        os.killpg(spare.pid, signal.SIGKILL)  # no program yet: nothing of it to stop gracefully
    except (ProcessLookupError, PermissionError):
        pass
    spare.wait()
    for f in (spare.stdin, spare.stdout, spare.stderr):
        if f is not None:
            try:
                f.close()
            except OSError:  # a request half in the buffer of a pipe nobody reads
                pass


def _fits(strings: list[str]) -> bool:
    """Far enough from the kernel's limits (and free of NUL) that only the classic start need
    report them."""
    sizes = [len(os.fsencode(x)) for x in strings]
    return (all(n < MAX_ARG_STRLEN // 2 for n in sizes) and not any("\0" in x for x in strings)
            and sum(sizes) + len(sizes) < os.sysconf("SC_ARG_MAX") // 4)


def hand_over(program: str, args: list[str], cwd: str | os.PathLike[str] | None, env: dict[str, str],
              merge: bool) -> "subprocess.Popen[bytes] | None":
    """The command (``merge``: its stderr into stdout) handed to the supervisor waiting ahead, as
    its ``Popen``; None when the command must start the classic way (the module's decisions)."""
    if not _state.spares or not _main_thread():
        return None
    spare = _state.spares.pop(0)
    where = os.fspath(cwd) if cwd is not None else os.getcwd()
    entries = [f"{k}={v}" for k, v in env.items()]
    if not (_fits([program, *args, *entries, where]) and os.path.isdir(where)) or spare.poll() is not None:
        _end(spare)
        return None
    request = b"\0".join(os.fsencode(x) for x in [where, "1" if merge else "0", str(1 + len(args)), program, *args,
                                                   *entries]) + b"\0"
    assert spare.stdin is not None
    try:
        spare.stdin.write(request)
        spare.stdin.close()
    except BrokenPipeError:  # it died: start the classic way
        _end(spare)
        return None
    except BaseException:  # a stop while handing it over: it must not run half a command
        _end(spare)
        raise
    spare.stdin = None
    if merge and spare.stderr is not None:  # the supervisor made its stderr its stdout
        spare.stderr.close()
        spare.stderr = None
    return spare
