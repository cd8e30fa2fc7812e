"""Find the processes a test session started that are still running (the leak check of conftest).

A process belongs to the session if it descends from the pytest process, or if its environment
carries the session's marker (``ROCMBUILD_TEST_SESSION=<uuid>``, set in ``os.environ`` at the
start, so every child inherits it): the second catches what was orphaned (reparented to init,
e.g. a ``setsid`` build tree whose parent died) and so left the tree. Zombies are dead and not
counted. Everything is read from ``/proc``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

MARKER = "ROCMBUILD_TEST_SESSION"


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of a process (None: gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2])


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has closed its files and holds nothing)."""
    st = _stat(pid)
    return st is not None and st[0] not in "ZX"


def _pids() -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a) or "?"


def matching(text: str) -> list[str]:
    """``PID: CMDLINE`` of each live (non-zombie) process but this one whose command line holds ``text``."""
    return [f"{pid}: {line}" for pid in _pids()
            if pid != os.getpid() and running(pid) and text in (line := cmdline(pid))]


def session_processes(root: int, marker: str) -> set[int]:
    """Live (non-zombie) processes descending from ``root`` or carrying ``MARKER=marker``."""
    parent: dict[int, int] = {}
    live: set[int] = set()
    for pid in _pids():
        st = _stat(pid)
        if st is None or st[0] in "ZX":
            continue
        live.add(pid)
        parent[pid] = st[1]
    tagged = f"{MARKER}={marker}".encode()
    out = set()
    for pid in live:
        p = pid
        while p in parent and p != root:
            p = parent[p]
        if p == root and pid != root:
            out.add(pid)
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if tagged in env:
            out.add(pid)
    out.discard(root)
    return out


def survivors(root: int, marker: str, before: set[int], grace: float = 3.0) -> set[int]:
    """What is still running after ``grace`` seconds (processes being killed need a moment)."""
    deadline = time.monotonic() + grace
    while True:
        left = session_processes(root, marker) - before
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def describe(pids: set[int]) -> str:
    lines = []
    for pid in sorted(pids):
        st = _stat(pid)
        ppid = st[1] if st else "?"
        lines.append(f"  pid {pid} (parent {ppid}): {cmdline(pid)}")
    return "\n".join(lines)


def kill(pids: set[int]) -> None:
    """SIGKILL each survivor, and its process group when it leads one that is not ours."""
    mine = os.getpgid(0)
    for pid in sorted(pids):
        st = _stat(pid)
        try:
            if st is not None and st[2] == pid and pid != mine:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
