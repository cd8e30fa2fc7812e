"""Ending commands: :func:`kill_tree` ends one supervisor's tree (``runner.py`` calls it for a
stop, an exception or a timeout); a :class:`Stopper` ends, from any thread, the commands one
thread starts within :func:`stoppable`.

``runner.run`` and ``runner.capture`` are synchronous: the thread that starts a command waits for
it (the supervisor's parent-death signal follows the thread that forked it). Another thread may
still end it: ``apply`` resolves the recipe's ref in a thread while it probes the target
(``flows.build.Resolving``) and, when the probe fails or a stop arrives, ends that thread's
``git ls-remote`` rather than wait for the remote. The waiting thread sees its command end as a
signal would end it.

Decisions: a command started after :meth:`Stopper.stop` is ended at once (a stop never races a
start); a command already reaped is not signalled (its pid may have been reused).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import contextmanager
from typing import Iterator

from rocmbuild.proc.ahead import GRACE


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """End the supervisor's tree: SIGTERM (it stops the command's group, waits :data:`GRACE`,
    then kills it and every orphan), then SIGKILL to whatever is left of both groups; reap."""
    groups = {proc.pid, *_children(proc.pid)}  # the supervisor's session and the command's group
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=GRACE + 2)
            break
        except subprocess.TimeoutExpired:
            continue
    for pgid in groups:  # a member that outlived its leader (compilers spawned by make)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


class Stopper:
    """Ends, from any thread, the commands one thread starts within :func:`stoppable`: those
    running when :meth:`stop` is called, and any started after it (at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[bytes]] = []
        self.stopped = False

    def started(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.append(proc)
            stopped = self.stopped
        if stopped:
            kill_tree(proc)

    def stop(self) -> None:
        """End every command still running (:func:`kill_tree`); the thread that waits for one
        sees it end as a signal would end it."""
        with self._lock:
            self.stopped = True
            running = [p for p in self._procs if p.returncode is None]
        for proc in running:
            kill_tree(proc)


_local = threading.local()


@contextmanager
def stoppable(stopper: Stopper) -> Iterator[None]:
    """Within it, the commands this thread starts can be ended by ``stopper`` from another thread."""
    _local.stopper = stopper
    try:
        yield
    finally:
        _local.stopper = None


def watch(proc: subprocess.Popen[bytes]) -> None:
    """runner.py, for each command it starts: the thread's :class:`Stopper`, if any, takes it."""
    current = getattr(_local, "stopper", None)
    if current is not None:
        current.started(proc)
