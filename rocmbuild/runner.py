"""The only place rocmbuild starts processes (through plumbum).

Commands are argv lists, never shell strings. Two entry points:

* :func:`run` for long commands (configure, compile, install, git): output is streamed line by
  line into a log file and, optionally, into a progress callback; on failure the last lines, the
  log path and the command are put into the raised error. The child runs in its own session
  (process group), so Ctrl-C or an exception kills the whole tree (make, ninja and every
  compiler they started) before the error propagates: no orphaned compilers.
* :func:`capture` for short commands whose output we parse (``cmake --version``, the probe).

Decisions: the child's environment is ``os.environ`` as it is *now* plus the given extras
(plumbum's own ``local.env`` is a snapshot taken at import time, so we pass the live one);
stdin is always ``/dev/null`` so no child can ever wait for input in an unattended run.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from plumbum import local

from rocmbuild.errors import BuildError, RequirementError, RocmbuildError, SystemLimitError, from_os_error

TAIL_LINES = 30


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def _start(argv: Sequence[str | os.PathLike], cwd, env: Mapping[str, str] | None, stderr) -> subprocess.Popen:
    """Start argv in its own session (process group), stdin /dev/null, stdout piped."""
    cmd, args = _command(argv)
    try:
        return cmd.popen(
            args,
            cwd=str(cwd) if cwd is not None else None,
            env=_environment(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            new_session=True,
        )
    except OSError as exc:
        if exc.errno == errno.E2BIG:
            raise too_long(argv, env) from exc
        if exc.errno == errno.ENAMETOOLONG:
            raise from_os_error(exc, "build") from exc  # type: ignore[misc]
        raise


# Linux's limit on one argument or environment string (MAX_ARG_STRLEN: 32 pages)
MAX_ARG_STRLEN = 32 * 4096


def too_long(argv: Sequence[str | os.PathLike], env: Mapping[str, str] | None) -> SystemLimitError:
    """E2BIG from execve: name the longest argument (or environment entry) and the limits."""
    strings = [str(a) for a in argv] + [f"{k}={v}" for k, v in (env or {}).items()]
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


def _command(argv: Sequence[str | os.PathLike]):
    if not argv:
        raise ValueError("empty argv")
    prog = str(argv[0])
    resolved = which(prog)
    if resolved is None:
        raise RequirementError(
            f"program not found: {prog}",
            f"install {prog} or put it on PATH (PATH={os.environ.get('PATH', '')})",
        )
    return local[resolved], [str(a) for a in argv[1:]]


def _environment(env: Mapping[str, str] | None) -> dict[str, str]:
    merged = dict(os.environ)
    if env:
        merged.update({k: str(v) for k, v in env.items()})
    return merged


def _kill_tree(proc: subprocess.Popen) -> None:
    """Terminate the child's whole process group, then reap it."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = None
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if pgid is not None:
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=5)
            break
        except subprocess.TimeoutExpired:
            continue
    # Make sure no member of the group outlives us (compilers spawned by make).
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def display(argv: Sequence[str | os.PathLike]) -> str:
    """A copy-pasteable rendering of argv for messages (never executed)."""
    import shlex

    return shlex.join(str(a) for a in argv)


def _open_log(log: Path | None, argv: Sequence[str | os.PathLike]):
    if log is None:
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    logf = open(log, "a", encoding="utf-8", errors="replace")
    logf.write(f"$ {display(argv)}\n")
    logf.flush()
    return logf


def _failed(argv, rc: int, tail: deque[str], log: Path | None, *, error: type[RocmbuildError], what: str | None,
            hint: str) -> RocmbuildError:
    label = what or f"{Path(str(argv[0])).name} failed"
    where = f"\nfull log: {log}" if log is not None else ""
    output = "\n".join(tail)
    return error(
        f"{label} (exit code {rc})\ncommand: {display(argv)}\n--- last {len(tail)} lines ---\n{output}{where}",
        hint or "read the log above; fix the cause and run the same command again",
        details={"command": [str(a) for a in argv], "returncode": rc, "log": str(log) if log else None},
    )


def run(    argv: Sequence[str | os.PathLike],
    *,
    cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    error: type[RocmbuildError] = BuildError,
    what: str | None = None,
    hint: str = "",
    timeout: float | None = None,
) -> Completed:
    """Run argv to completion, streaming its merged stdout/stderr to ``log`` and ``on_line``.

    Raises ``error`` (default :class:`BuildError`) when the command fails, with the last
    :data:`TAIL_LINES` lines, the log path and the command in the message.
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
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            tail.append(line)
            if logf is not None:
                logf.write(line + "\n")
            if on_line is not None:
                on_line(line)
            if timeout is not None and time.monotonic() - start > timeout:
                raise subprocess.TimeoutExpired(list(map(str, argv)), timeout)
        rc = proc.wait()
    except BaseException:
        _kill_tree(proc)
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
        if logf is not None:
            logf.close()
    seconds = time.monotonic() - start
    output = "\n".join(tail)
    if rc != 0:
        raise _failed(argv, rc, tail, log, error=error, what=what, hint=hint)
    return Completed(tuple(str(a) for a in argv), rc, output, "", seconds)


def capture(
    argv: Sequence[str | os.PathLike],
    *,
    cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = 60,
) -> Completed:
    """Run a short command and capture stdout and stderr; never raises for a non-zero exit.

    Raises :class:`RequirementError` when the program does not exist and
    ``subprocess.TimeoutExpired`` when it runs longer than ``timeout`` (the process group is
    killed first).
    """
    start = time.monotonic()
    proc = _start(argv, cwd, env, subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        _kill_tree(proc)
        raise
    return Completed(
        tuple(str(a) for a in argv),
        proc.returncode,
        out.decode("utf-8", errors="replace"),
        err.decode("utf-8", errors="replace"),
        time.monotonic() - start,
    )


def which(program: str) -> str | None:
    """Resolve a program name (or absolute path) to an executable path, or None."""
    # plumbum's local.which() searches a PATH snapshot taken at import time; we search the
    # live one, so a PATH changed by the caller (or a test) is honoured.
    if "/" in program:
        p = Path(program)
        return str(p.absolute()) if p.is_file() and os.access(p, os.X_OK) else None
    return shutil.which(program, path=os.environ.get("PATH", os.defpath))
