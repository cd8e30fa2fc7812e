"""The only place rocmbuild starts commands (``subprocess.Popen``, nothing else; ahead.py starts
the supervisors that wait for them).

Commands are argv lists, never shell strings. Two entry points:

* :func:`run` for long commands (configure, compile, install, git): output is streamed line by
  line into a log file and, optionally, into a progress callback; on failure the last lines, the
  log path and the command are put into the raised error.
* :func:`capture` for short commands whose output we parse (``cmake --version``, the probe). The
  result is taken when the command *exits*, not when its pipes close: a forked child that keeps
  stdout open does not make us wait for the timeout.

Every command runs under the supervisor ``reaper.py`` (its own session; a child subreaper with a
parent-death signal; the command in its own process group with ``PR_SET_PDEATHSIG = SIGKILL``),
so no process of the tree outlives the command, a stop (Ctrl-C, SIGTERM, SIGHUP, an exception)
or even a SIGKILL of rocmbuild: :func:`kill_tree` ends it with SIGTERM, :data:`GRACE` seconds,
then SIGKILL. What stays impossible is in reaper.py's docstring and docs/transactions.md. In the
CLI the supervisor is started ahead, while the command before it runs (ahead.py): the same
supervisor, handed its command on stdin, minus 30 ms of interpreter start per command.

Decisions: the child's environment is ``os.environ`` as it is *now* plus the given extras (an
extra whose value is None removes that variable: git's hermetic environment drops the user's
``GIT_DIR`` and friends); programs are found on the live ``PATH`` (:func:`which`). plumbum was
dropped: it only wrapped one ``Popen`` call here, and its ``local.env``/``local.which`` are
snapshots taken at import time that this module had to work around;
stdin is always ``/dev/null`` so no child can ever wait for input in an unattended run; the
supervisor must be started from the thread that waits for it (the parent-death signal follows
the thread that forked it): :func:`run` and :func:`capture` are synchronous. Another thread may
still *end* them (:mod:`rocmbuild.proc.stopper`: :func:`kill_tree`, and a ``Stopper`` for the
commands of another thread: ``apply`` resolves the recipe's ref in a thread while it probes the
target, and stops that ``git ls-remote`` when the probe fails).
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import shutil
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Mapping, Sequence

from rocmbuild import progress, ui
from rocmbuild.proc import ahead, stopper
from rocmbuild.proc.ahead import GRACE, MAX_ARG_STRLEN, REAPER
from rocmbuild.proc.stopper import kill_tree
from rocmbuild.errors import BuildError, RequirementError, RocmbuildError, SystemLimitError, from_os_error

if TYPE_CHECKING:
    from rocmbuild.proc.runas import Identity

TAIL_LINES = 30
logger = logging.getLogger(__name__)  # -vv: every start and exit, with the extra environment


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


#: extra environment for a command: a value sets the variable, None removes it
Env = Mapping[str, "str | None"] | None


def _start(argv: Sequence[str | os.PathLike[str]], cwd: str | os.PathLike[str] | None, env: Env, stderr: int,
           user: "Identity | None" = None) -> subprocess.Popen[bytes]:
    """Start argv under the supervisor, in its own session, stdin /dev/null, stdout piped;
    ``user``: the program runs as that user (the supervisor drops it before exec, :mod:`rocmbuild.proc.runas`)."""
    program, args = _command(argv)
    if user is not None:
        env = {**user.environment(), **(env or {})}
        ui.detail(f"as {user.describe()}: the target's owner")
    ui.detail(f"running: {display(argv)}" + (f" (in {cwd})" if cwd is not None else ""))
    logger.debug("start %s (cwd %s; extra env %s)", display(argv), cwd or os.getcwd(),
              " ".join(f"{k}={v if v is not None else '(unset)'}" for k, v in (env or {}).items()) or "none")
    proc = ahead.hand_over(program, args, cwd, environment(env), stderr == subprocess.STDOUT) if user is None else None
    if proc is None:
        proc = _popen(program, args, cwd, env, stderr, user, argv)
    ahead.warm()  # the next command's supervisor starts while this one runs
    stopper.watch(proc)  # a Stopper of this thread's (stopper.stoppable) may end it from another thread
    return proc


def _popen(program: str, args: list[str], cwd: str | os.PathLike[str] | None, env: Env, stderr: int,
           user: "Identity | None", argv: Sequence[str | os.PathLike[str]]) -> subprocess.Popen[bytes]:
    """Start the supervisor with the program on its command line."""
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", str(REAPER), str(os.getpid()), str(GRACE),
             *(user.reaper_args() if user is not None else ()), "--", program, *args],
            cwd=str(cwd) if cwd is not None else None,
            env=environment(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
    except OSError as exc:
        if exc.errno == errno.E2BIG:
            raise too_long(argv, env) from exc
        err = from_os_error(exc, "build") if exc.errno == errno.ENAMETOOLONG else None
        if err is not None:
            raise err from exc
        raise




def too_long(argv: Sequence[str | os.PathLike[str]], env: Env) -> SystemLimitError:
    """E2BIG from execve: name the longest argument (or environment entry) and the limits."""
    strings = [str(a) for a in argv] + [f"{k}={v}" for k, v in (env or {}).items() if v is not None]
    longest = max(strings, key=len)
    total = sum(len(os.fsencode(a)) + 1 for a in strings)
    what = "argument" if longest in map(str, argv) else "environment entry"
    return SystemLimitError(
        f"cannot start {Path(str(argv[0])).name}: its argument list is too long (the longest {what} has "
        f"{len(os.fsencode(longest))} bytes: {longest[:60]!r}...; Linux allows {MAX_ARG_STRLEN} bytes per "
        f"argument and {os.sysconf('SC_ARG_MAX')} in all, about {total} here)",
        "shorten the value that made it long (a [build.defines] or [build.env] entry, -D NAME=VALUE); "
        "a long value belongs in a file (e.g. a CMake cache script); nothing was changed",
        details={"errno": "E2BIG", "program": str(argv[0]), "longest": len(os.fsencode(longest)), "total": total},
    )


def _command(argv: Sequence[str | os.PathLike[str]]) -> tuple[str, list[str]]:
    if not argv:
        raise ValueError("empty argv")
    prog = str(argv[0])
    resolved = which(prog)
    if resolved is None:
        raise RequirementError(
            f"program not found: {prog}",
            f"install {prog} or put it on PATH (PATH={os.environ.get('PATH', '')})",
        )
    return resolved, [str(a) for a in argv[1:]]


def environment(env: Env) -> dict[str, str]:
    """The live ``os.environ`` with ``env`` applied: a value sets, None removes (what a command
    started with ``env`` sees)."""
    merged = dict(os.environ)
    for k, v in (env or {}).items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = str(v)
    return merged


def display(argv: Sequence[str | os.PathLike[str]]) -> str:
    """A copy-pasteable rendering of argv for messages (never executed)."""
    import shlex

    return shlex.join(str(a) for a in argv)


def _open_log(log: Path | None, argv: Sequence[str | os.PathLike[str]]) -> IO[str] | None:
    if log is None:
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    logf = open(log, "a", encoding="utf-8", errors="replace", buffering=1)  # line by line: `tail -f` follows
    logf.write(f"$ {display(argv)}\n")
    logf.flush()
    return logf


def _failed(argv: Sequence[str | os.PathLike[str]], rc: int, tail: deque[str], log: Path | None, *,
            error: type[RocmbuildError], what: str | None, hint: str) -> RocmbuildError:
    label = what or f"{Path(str(argv[0])).name} failed"
    where = f"\nfull log: {log}" if log is not None else ""
    output = "\n".join(tail)
    return error(
        f"{label} (exit code {rc})\ncommand: {display(argv)}\n--- last {len(tail)} lines ---\n{output}{where}",
        hint or "read the log above; fix the cause and run the same command again",
        details={"command": [str(a) for a in argv], "returncode": rc, "log": str(log) if log else None},
    )


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Env = None,
    log: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    error: type[RocmbuildError] = BuildError,
    what: str | None = None,
    hint: str = "",
    timeout: float | None = None,
    on_start: Callable[[int], None] | None = None,
) -> Completed:
    """Run argv to completion, streaming its merged stdout/stderr to ``log`` and ``on_line``.

    Raises ``error`` (default :class:`BuildError`) when the command fails, with the last
    :data:`TAIL_LINES` lines, the log path and the command in the message. ``on_start(sid)`` is
    told the session id of the command's tree once it started (the builder records it).
    """
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    start = time.monotonic()
    logf = _open_log(log, argv)
    try:
        proc = _start(argv, cwd, env, subprocess.STDOUT)
    except BaseException:
        if logf is not None:
            logf.close()
        raise
    try:
        if on_start is not None:
            on_start(proc.pid)
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            tail.append(line)
            if logf is not None:
                logf.write(line + "\n")
            if on_line is not None:
                on_line(line)
            if ui.streaming():  # -v: the command's own words, live (still logged above)
                progress.echo(line)
            if timeout is not None and time.monotonic() - start > timeout:
                raise subprocess.TimeoutExpired(list(map(str, argv)), timeout)
        rc = proc.wait()
    except BaseException:
        kill_tree(proc)
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
        if logf is not None:
            logf.close()
    seconds = time.monotonic() - start
    logger.debug("exit %d after %.2fs: %s", rc, seconds, display(argv))
    output = "\n".join(tail)
    if rc != 0:
        raise _failed(argv, rc, tail, log, error=error, what=what, hint=hint)
    return Completed(tuple(str(a) for a in argv), rc, output, "", seconds)


def capture(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Env = None,
    timeout: float | None = 60,
    user: "Identity | None" = None,
) -> Completed:
    """Run a short command and capture stdout and stderr; never raises for a non-zero exit.
    ``user``: run it as that user (a root run's target owner, :mod:`rocmbuild.proc.runas`).

    Raises :class:`RequirementError` when the program does not exist and
    ``subprocess.TimeoutExpired`` when it runs longer than ``timeout`` (the process group is
    killed first).
    """
    start = time.monotonic()
    proc = _start(argv, cwd, env, subprocess.PIPE, user)
    try:
        out, err = _communicate(proc, argv, timeout)
    except BaseException:
        kill_tree(proc)
        raise
    finally:
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
    logger.debug("exit %s after %.2fs: %s", proc.returncode, time.monotonic() - start, display(argv))
    return Completed(
        tuple(str(a) for a in argv),
        proc.returncode,
        out.decode("utf-8", errors="replace"),
        err.decode("utf-8", errors="replace"),
        time.monotonic() - start,
    )


def _communicate(proc: subprocess.Popen[bytes], argv: Sequence[str | os.PathLike[str]],
                 timeout: float | None) -> tuple[bytes, bytes]:
    """Read stdout and stderr until the process exits (then what is already in the pipes), not
    until every holder of the pipes has closed them; raise TimeoutExpired after ``timeout``."""
    assert proc.stdout is not None and proc.stderr is not None  # both piped by _start
    deadline = None if timeout is None else time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as sel:
        for f, buf in ((proc.stdout, out), (proc.stderr, err)):
            sel.register(f, selectors.EVENT_READ, buf)  # the key's data: where its bytes go
        exited_at = None
        while sel.get_map():
            if exited_at is None and proc.poll() is not None:
                exited_at = time.monotonic()
            now = time.monotonic()
            if exited_at is not None and now - exited_at > 0.5:
                break  # exited: a holder of the pipes is not the command (the group is killed below)
            if exited_at is None and timeout is not None and deadline is not None and now > deadline:
                raise subprocess.TimeoutExpired([str(a) for a in argv], timeout)
            for key, _ in sel.select(0.05):
                data = os.read(key.fd, 65536)
                if data:
                    into: bytearray = key.data
                    into.extend(data)
                else:
                    sel.unregister(key.fileobj)
    proc.wait()
    return bytes(out), bytes(err)


def which(program: str) -> str | None:
    """Resolve a program name (or absolute path) to an executable path, or None."""
    # the live PATH, so a PATH changed by the caller (or a test) is honoured
    if "/" in program:
        p = Path(program)
        return str(p.absolute()) if p.is_file() and os.access(p, os.X_OK) else None
    return shutil.which(program, path=os.environ.get("PATH", os.defpath))


# --------------------------------------------------------------------------------------------
# who is running (for a build dir that must not be used by two trees at once)


@dataclass(frozen=True)
class Process:
    pid: int
    sid: int
    start: int  # clock ticks after boot (tells a reused pid apart)
    cwd: str | None
    command: str


def process(pid: int) -> Process | None:
    """What /proc says about ``pid`` (None: gone, a zombie, or not ours to read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z":
            return None
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, ValueError, IndexError):
        return None
    try:
        cwd: str | None = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = None
    return Process(pid, int(fields[3]), int(fields[19]), cwd, cmd)


def processes() -> list[Process]:
    """Every live process this user may inspect."""
    found = (process(int(d)) for d in os.listdir("/proc") if d.isdigit())
    return [p for p in found if p is not None]
