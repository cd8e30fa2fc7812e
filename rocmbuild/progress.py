"""What a user sees while rocmbuild works: phases with their durations, the build's steps, heartbeats.

A phase (fetch, configure, build, install, probe, swap, verify) is a ``with phase(name, label):``
block; the build feeds its output lines to :meth:`Phase.line`, which reads ninja's ``[12/300]``
and make's ``[ 44%]`` prefixes. Where it goes depends on the mode (:func:`configure`):

* ``tty`` (stderr a terminal, not ``TERM=dumb``): a rich display on stderr, a spinner per running
  phase and, for the build, a bar with N/M (ninja only: make gives a percent and no count is
  invented), percent, elapsed, ETA and the current target. It vanishes when the phase ends; the
  line "built in 2h13m" that replaces it stays.
* ``plain`` (stderr a pipe, a file, a dumb terminal): the same "configured in 3.2s" lines, plus one
  line at each :data:`STEP_PERCENT` step of a build and a heartbeat at least every
  :data:`HEARTBEAT_S` seconds while any phase runs (a 20-minute link prints something).
* ``json`` (``--json``): the same events, as one JSON object per line on stderr (docs/json.md).
* ``quiet`` (``-q``): nothing.

Decisions: a label, a build tool's line and a phase line are shown through
``names.safe_text`` (one line each, control characters escaped: a compiler's colours or a
recipe's ref cannot move the cursor or fake a line); ``--json`` events keep the exact strings.
Progress is on stderr only, never in the result; ``--json`` events follow the plain
cadence (steps of 10 %, heartbeats), not every compile line; the ETA is what is left at the rate
of the recent past (:meth:`Phase.eta`), the same number in every mode. The two cadences
may be shortened through ``ROCMBUILD_HEARTBEAT_S`` and ``ROCMBUILD_PROGRESS_STEP`` (tests: a
fixture build sees a heartbeat within seconds).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from typing import TYPE_CHECKING

from rocmbuild.names import safe_text
from rocmbuild.steps import Step, parse_step  # noqa: F401 (re-exported: progress.parse_step)
from rocmbuild import ui
from rocmbuild.ui import silence

if TYPE_CHECKING:  # rich is imported where it draws: a terminal's display, a plain line
    from rich.progress import TaskID

    from rocmbuild.progressbar import Display

DONE = {"fetch": "fetched", "download": "downloaded", "configure": "configured", "build": "built", "install": "installed",
        "probe": "probed", "swap": "swapped", "verify": "verified"}


def _env_float(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


HEARTBEAT_S = _env_float("ROCMBUILD_HEARTBEAT_S", 30.0)  # at most this long without a line (plain, json)
STEP_PERCENT = _env_float("ROCMBUILD_PROGRESS_STEP", 10.0)  # one line per this many percent (plain, json)


def size(n: int) -> str:
    """``812 B``, ``3.4 KiB``, ``41.0 MiB``, ``1.2 GiB``: what a download's progress says."""
    return next((f"{n / f:.1f} {u}" for f, u in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")) if n >= f), f"{n} B")


def duration(seconds: float) -> str:
    """``3.2s``, ``2m05s``, ``2h13m``: what a phase line says."""
    s = int(seconds)
    return (f"{seconds:.1f}s" if seconds < 60 else f"{s // 60}m{s % 60:02d}s" if s < 3600
            else f"{s // 3600}h{s % 3600 // 60:02d}m")


# --------------------------------------------------------------------------------------------
# the mode


_mode: str | None = None  # None: chosen from the console each time (tty or plain)


def configure(*, json: bool = False, quiet: bool = False) -> None:
    """Set by the command line: ``--json`` events, ``-q`` nothing, else the terminal decides."""
    global _mode
    _mode = "json" if json else "quiet" if quiet else None


def mode() -> str:
    if _mode is not None:
        return _mode
    return "tty" if ui.console.is_terminal and not ui.console.is_dumb_terminal else "plain"


def _event(obj: dict) -> None:
    with _lock:
        try:
            sys.stderr.write(json.dumps(obj, sort_keys=True) + "\n")
            sys.stderr.flush()
        except (BrokenPipeError, ValueError):  # the reader left (or stderr is closed): our output ends, not our work
            silence(sys.stderr)


def _plain(text: str) -> None:
    from rich.text import Text

    with _lock:
        ui.console.print(Text(safe_text(text)), soft_wrap=True)


def echo(line: str) -> None:
    """A line of a command's output shown as it comes (``-v``): above a terminal's display, which
    stays below it; one line, its control characters escaped."""
    _plain(line)


_lock = threading.RLock()


# --------------------------------------------------------------------------------------------
# a phase


class Phase:
    """A running phase: its clock, its last step, and when it last said something."""

    def __init__(self, name: str, label: str) -> None:
        self.name, self.label = name, label
        self.start = time.monotonic()
        self.step: Step | None = None
        self.seen: collections.deque[tuple[float, float]] = collections.deque(maxlen=4096)  # (when, percent)
        self.said = self.start  # when the last line (plain/json) was written
        self.said_percent = 0.0
        self.task: TaskID | None = None  # the rich task (tty)
        self.failed = False  # set by the caller: the phase ran to its end, but its outcome is a failure

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def eta(self) -> float | None:
        """Seconds left at the rate of the last third of the phase (a minute at least); None before
        the first step. Not from the phase's start: MIOpen's first 113 of 561 steps (generated
        sources) take a minute and its compiles hours, and a rate from the start said "ETA 2m36s"
        for a build of over an hour on the real ROCm 7.2 (docs/miopen.md)."""
        if self.step is None or self.step.percent <= 0:
            return None
        now, p = time.monotonic(), self.step.percent
        since = now - max(60.0, (now - self.start) / 3)
        t0, p0 = self.start, 0.0  # the last step seen at or before the window's start
        for t, q in self.seen:
            if t > since:
                break
            t0, p0 = t, q
        if p <= p0:  # nothing moved in the window: the rate since the phase's start
            t0, p0 = self.start, 0.0
        return max(0.0, (now - t0) * (100.0 - p) / (p - p0))

    def line(self, text: str) -> None:
        """A line of the build tool's output: a step moves the bar (and, off a terminal, says so
        at each :data:`STEP_PERCENT`)."""
        step = parse_step(text)
        if step is not None:
            self.moved(step)

    def bytes(self, done: int, total: int | None) -> None:
        """A download's progress: ``done`` of ``total`` bytes (a percent only when the size is known)."""
        mib = size(done) + (f" of {size(total)}" if total else "")
        if total:
            self.moved(Step(min(100.0, 100.0 * done / total), None, None, mib))

    def moved(self, step: Step) -> None:
        self.step = step
        self.seen.append((time.monotonic(), step.percent))
        m = mode()
        if m == "tty":
            _bar().update(self)
        elif m in ("plain", "json") and step.percent >= self.said_percent + STEP_PERCENT:
            self.said_percent = step.percent - step.percent % STEP_PERCENT
            self.report()

    def report(self) -> None:
        """Say where the phase is (a step line or a heartbeat), off a terminal."""
        self.said = time.monotonic()
        s, eta = self.step, self.eta()
        if mode() == "json":
            _event({"event": "progress", "phase": self.name, "done": s.done if s else None,
                    "total": s.total if s else None, "percent": round(s.percent, 1) if s else None,
                    "elapsed_s": round(self.elapsed, 3), "eta_s": round(eta, 1) if eta is not None else None,
                    "target": s.target if s else None})
        elif mode() == "plain":
            _plain(self.status())

    def status(self) -> str:
        """``build: 12/300 (4%), 1m02s elapsed, ETA 25m10s: Building CXX object src/foo.o``."""
        s, eta = self.step, self.eta()
        if s is None:
            return f"{self.name}: {self.label or 'running'}, {duration(self.elapsed)} elapsed"
        count = f"{s.done}/{s.total} ({s.percent:.0f}%)" if s.done is not None else f"{s.percent:.0f}%"
        left = f", ETA {duration(eta)}" if eta is not None else ""
        return f"{self.name}: {count}, {duration(self.elapsed)} elapsed{left}: {s.target}"


_active: list[Phase] = []


@contextmanager
def phase(name: str, label: str = "") -> Iterator[Phase]:
    """Run a phase: announced (json), shown while it runs (tty: a spinner or a bar), and closed
    with "<done> in <duration>" (or "<name> failed after ..."), which stays."""
    p = Phase(name, label)
    m = mode()
    if m == "json":
        _event({"event": "phase", "phase": name, "state": "start", "elapsed_s": 0.0, "label": label})
    ok = False
    with _lock:
        _active.append(p)
    try:
        if m == "tty":
            _bar().add(p)
        elif m in ("plain", "json"):
            _heartbeat.ensure()
        yield p
        ok = not p.failed
    finally:
        with _lock:
            _active.remove(p)
        _close(p, m, ok)


def _close(p: Phase, m: str, ok: bool) -> None:
    if m == "tty":
        _bar().remove(p)
    done = f"{DONE.get(p.name, p.name)} in {duration(p.elapsed)}" if ok else \
        f"{p.name} failed after {duration(p.elapsed)}"
    if p.step is not None and p.step.done is not None and ok:
        done += f" ({p.step.total} steps)"
    if m == "json":
        _event({"event": "phase", "phase": p.name, "state": "done" if ok else "failed",
                "elapsed_s": round(p.elapsed, 3), "label": p.label})
    elif m in ("tty", "plain"):
        _plain(done)


# --------------------------------------------------------------------------------------------
# off a terminal: the heartbeat


class _Heartbeat:
    """A daemon thread that, while any phase runs, reports each one that said nothing for
    :data:`HEARTBEAT_S` seconds; it ends when no phase is left."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None

    def ensure(self) -> None:
        with _lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="rocmbuild-heartbeat", daemon=True)
                self.thread.start()

    def _run(self) -> None:
        tick = min(1.0, HEARTBEAT_S / 4)
        while True:
            time.sleep(tick)
            with _lock:
                if not _active:
                    self.thread = None
                    return
                due = [p for p in _active if time.monotonic() - p.said >= HEARTBEAT_S]
                for p in due:
                    p.report()


_heartbeat = _Heartbeat()


# --------------------------------------------------------------------------------------------
# on a terminal: one rich display (rocmbuild.progressbar), made on the first phase shown there

_display: Display | None = None


def _bar() -> Display:
    """The terminal's display; rich's progress machinery is imported only here, so a run off a
    terminal (``--json``, a pipe, ``-q``) never imports it."""
    global _display
    if _display is None:
        from rocmbuild.progressbar import Display

        _display = Display(_lock)
    return _display
