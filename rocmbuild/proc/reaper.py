"""The supervisor every child of rocmbuild runs under (stdlib only; run as a script by runner.py).

``python -I -S reaper.py PARENT_PID GRACE [--user UID GID GROUPS] -- [PROGRAM ARGS...]``

Decisions:
* it is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): every descendant that is orphaned --
  a forked child that keeps the pipes open, a grandchild that calls ``setsid()`` -- is re-parented
  to it rather than to init, so it can find them (``/proc/self/task/*/children``) and kill them;
* it carries ``PR_SET_PDEATHSIG = SIGTERM`` and checks ``getppid()`` afterwards (the race of a
  parent dying before the prctl): a SIGKILL of rocmbuild stops the supervisor, which ends the
  tree. The program runs in its own process group with ``PR_SET_PDEATHSIG = SIGKILL``, so even a
  SIGKILL of the supervisor kills the program itself;
* the program's exit is the result: when it exits, the rest of its group and every orphan left
  are killed at once (SIGKILL), and the supervisor exits with the program's status (a program
  killed by signal N: the supervisor kills itself with N, so the caller sees ``-N``);
* SIGTERM, SIGINT or SIGHUP to the supervisor: SIGTERM to the program's group, ``GRACE`` seconds,
  then SIGKILL to the group and every orphan; exit 128+n.
* ``--user UID GID G1,G2``: the program (not the supervisor, which stays able to end the tree)
  runs as that user: the forked child sets its groups, gid and uid (all three ids) before exec,
  then its parent-death signal (a change of credentials clears it); a run as root of another
  user's target (``rocmbuild/proc/runas.py``).
* no PROGRAM after ``--``: a supervisor *started ahead* (``ahead.py``): it arms all of
  the above, then reads its program from stdin -- NUL-terminated fields ``cwd``, ``merge`` (``1``:
  the program's stderr is its stdout), the argument count, the arguments, then ``NAME=VALUE``
  environment entries to EOF -- and runs it as if it had been given on the command line: stdin
  ``/dev/null``, in that cwd, with exactly that environment. EOF before a whole request: it exits
  0 and starts nothing (rocmbuild ended without needing it).
What stays impossible: a descendant that makes itself a subreaper or enters a new PID namespace
escapes; a SIGKILL of the supervisor leaves the program's grandchildren (its group) to run on.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from types import FrameType

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# what Python sets (or ignores) that an exec'd program must get back at their defaults
_RESTORE = (signal.SIGPIPE, signal.SIGXFSZ, *STOP_SIGNALS)


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, _frame: FrameType | None) -> None:  # raises: typing is not imported here
    raise _Stop(signum)


def _prctl(libc: ctypes.CDLL, option: int, value: int) -> None:
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _become(user: tuple[int, int, list[int]] | None) -> None:
    """Drop to ``(uid, gid, groups)`` for good (groups first, then gid, then uid); a cwd the user
    cannot enter becomes ``/``."""
    if user is None:
        return
    uid, gid, groups = user
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise PermissionError(f"could not become uid {uid}")
    if not os.access(".", os.X_OK):
        os.chdir("/")


def _exec_child(libc: ctypes.CDLL, me: int, argv: list[str], user: tuple[int, int, list[int]] | None = None,
                env: dict[str, str] | None = None) -> None:
    """In the forked child: own process group, default signals, the target owner's identity when
    asked (before the parent-death signal: a change of credentials clears it), parent-death
    SIGKILL, exec."""
    try:
        os.setpgid(0, 0)
        for s in _RESTORE:
            signal.signal(s, signal.SIG_DFL)
        _become(user)
        _prctl(libc, PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != me:
            os._exit(137)
        if env is None:
            os.execv(argv[0], argv)
        os.execve(argv[0], argv, env)
    except BaseException as exc:  # noqa: BLE001 - a child must never return into the supervisor
        try:
            os.write(2, f"rocmbuild: cannot run {argv[0]}: {exc}\n".encode())
        finally:
            os._exit(127)


def _children() -> list[int]:
    pids: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return pids


def _kill(pid: int, sig: int, *, group: bool) -> None:
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap_all() -> None:
    """SIGKILL every remaining descendant (orphans come to us: we are their subreaper) until none
    is left, reaping each; a killed orphan's own children are re-parented here and killed next."""
    while True:
        for pid in _children():
            _kill(pid, signal.SIGKILL, group=False)
            try:
                if os.getpgid(pid) == pid:
                    _kill(pid, signal.SIGKILL, group=True)
            except ProcessLookupError:
                pass
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                time.sleep(0.01)  # none has died yet: list and kill again (new orphans may have come)
        except ChildProcessError:
            return
        except _Stop:
            continue


def _wait(pid: int) -> int:
    """The raw wait status of ``pid``, once it exited."""
    while True:
        done, status = os.waitpid(pid, 0)
        if done == pid:
            return status


def _wait_until(pid: int, deadline: float) -> int | None:
    """The raw wait status of ``pid``, or None when ``deadline`` passed first."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _stop(pid: int, grace: float, signum: int) -> int:
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)  # the stop runs to its end
    _kill(pid, signal.SIGTERM, group=True)
    if _wait_until(pid, time.monotonic() + grace) is None:
        _kill(pid, signal.SIGKILL, group=True)
        _wait(pid)
    _kill(pid, signal.SIGKILL, group=True)
    _reap_all()
    return 128 + signum


def _finish(status: int) -> int:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL, SIGSTOP: always default
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.waitstatus_to_exitcode(status)


def _request() -> tuple[list[str], dict[str, str]] | None:
    """Read the program a supervisor started ahead is to run (stdin, to EOF; the module doc) and
    set up its stdio and cwd; None when rocmbuild closed stdin without one."""
    data = bytearray()
    while chunk := os.read(0, 65536):
        data += chunk
    fields = bytes(data).split(b"\0")
    if len(fields) < 4 or fields.pop() != b"":
        return None
    cwd, merge, count = fields[0], fields[1], int(fields[2])
    argv = [os.fsdecode(f) for f in fields[3:3 + count]]
    env = {name: value for name, _, value in (os.fsdecode(e).partition("=") for e in fields[3 + count:])}
    if len(argv) != count or not argv:
        return None
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if merge == b"1":
        os.dup2(1, 2)
    os.chdir(cwd)
    return argv, env


def main(args: list[str]) -> int:
    parent, grace, *rest = args
    user = None
    if rest[:1] == ["--user"]:  # --user UID GID GROUPS: the program runs as that user (runas.py)
        uid, gid, groups = rest[1:4]
        user = (int(uid), int(gid), [int(g) for g in groups.split(",") if g])
        rest = rest[4:]
    sep, *argv = rest
    assert sep == "--", "usage: reaper.py PARENT_PID GRACE [--user UID GID G1,G2] -- [PROGRAM ARGS...]"
    libc = ctypes.CDLL(None, use_errno=True)
    for s in STOP_SIGNALS:
        signal.signal(s, _on_signal)
    try:
        _prctl(libc, PR_SET_CHILD_SUBREAPER, 1)
        _prctl(libc, PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != int(parent):
            return 128 + signal.SIGTERM  # rocmbuild died before the prctl: start nothing
        env = None
        if not argv:  # started ahead: the program comes on stdin
            try:
                asked = _request()
            except (OSError, ValueError) as exc:  # its cwd went away, a garbled request
                os.write(2, f"rocmbuild: cannot start the program: {exc}\n".encode())
                return 127
            if asked is None:
                return 0
            argv, env = asked
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            _exec_child(libc, me, argv, user, env)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child did it first (or already exec'd)
    except _Stop as stop:
        _reap_all()
        return 128 + stop.signum
    try:
        status = _wait(pid)
    except _Stop as stop:
        return _stop(pid, float(grace), stop.signum)
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    _kill(pid, signal.SIGKILL, group=True)
    _reap_all()
    return _finish(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
