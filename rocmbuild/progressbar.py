"""On a terminal: the one rich display of :mod:`rocmbuild.progress`, a row per running phase
(a spinner, and for a build a bar with N/M, percent, elapsed, ETA and the current target).

Decision: a module of its own, imported by ``progress`` when the first phase is shown on a
terminal, so a run off a terminal (``--json``, a pipe, ``-q``: every scripted apply) never imports
rich's progress machinery (about 25 ms of start-up here).
"""

from __future__ import annotations

import threading

from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn
from rich.table import Column
from rich.text import Text

from rocmbuild.names import safe_text
from rocmbuild.progress import Phase, duration
from rocmbuild.ui import console



class _Count(ProgressColumn):
    """``12/300`` for a counted build (ninja); nothing for make or a phase without steps."""

    def render(self, task) -> Text:
        step = task.fields.get("step")
        return Text(f"{step.done}/{step.total}" if step and step.done is not None else "", style="progress.download")


class _Percent(ProgressColumn):
    def render(self, task) -> Text:
        step = task.fields.get("step")
        return Text(f"{step.percent:3.0f}%" if step else "", style="progress.percentage")


class _Elapsed(ProgressColumn):
    def render(self, task) -> Text:
        phase = task.fields["phase"]
        return Text(duration(phase.elapsed), style="progress.elapsed")


class _Eta(ProgressColumn):
    def render(self, task) -> Text:
        eta = task.fields["phase"].eta()
        return Text(f"ETA {duration(eta)}" if eta is not None else "", style="progress.remaining")


def _widths(columns: int) -> tuple[int, int, int]:
    """(label, bar, target) widths for a terminal ``columns`` wide. The counts, percent, elapsed
    and ETA (about 45 columns with the gaps) always show; the bar and the target get what is left,
    so a long target name is cut (its start, keeping the file name) and never squeezes them out."""
    label = 16 if columns < 120 else 28
    bar = max(0, min(30, (columns - 70) // 2))
    target = columns - label - bar - 45
    return label, bar, target if target >= 12 else 0


def _cut(text: str, width: int, *, keep_end: bool = False) -> str:
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return "\u2026" + text[-(width - 1):] if keep_end else text[:width - 1] + "\u2026"


def middle(text: str, width: int) -> str:
    """``text`` in ``width`` columns, cut in the middle: its start and (the larger part) its end
    stay, so ``probing /tmp/.../env/bin/python (importing torch)`` keeps what it probes."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    head = (width - 1) // 3
    return text[:head] + "\u2026" + text[len(text) - (width - 1 - head):]


class _Label(ProgressColumn):
    """The phase's label, cut in the middle. A phase without steps (no bar, count or target) gives
    its label the room those would take; the elapsed time and the ETA always show."""

    def render(self, task) -> Text:
        room = _widths(console.width)[0] if task.fields.get("step") else max(16, console.width - 30)
        return Text(middle(safe_text(task.description), room), style="progress.description")


class _Target(ProgressColumn):
    def render(self, task) -> Text:
        return Text(_cut(safe_text(task.fields.get("target") or ""), _widths(console.width)[2], keep_end=True))


class _Bar(BarColumn):
    """The bar, for a phase with steps; a phase without steps has only its spinner."""

    def render(self, task):
        self.bar_width = _widths(console.width)[1]
        return super().render(task) if task.fields.get("step") and self.bar_width else Text("")


class Display:
    """The one rich Progress of a terminal, started with the first phase and stopped (it is
    transient) with the last; phase lines are printed above it and stay."""

    def __init__(self, lock: threading.RLock) -> None:
        self.progress: Progress | None = None
        self._lock = lock  # progress's: the display and the lines printed above it take turns

    def add(self, p: Phase) -> None:
        with self._lock:
            if self.progress is None:
                self.progress = Progress(
                    SpinnerColumn(), _Label(table_column=Column(no_wrap=True)), _Bar(bar_width=30),
                    _Count(table_column=Column(no_wrap=True)), _Percent(table_column=Column(no_wrap=True)),
                    _Elapsed(table_column=Column(no_wrap=True)), _Eta(table_column=Column(no_wrap=True)),
                    _Target(table_column=Column(no_wrap=True, overflow="ellipsis")),
                    console=console, transient=True, refresh_per_second=4)
                self.progress.start()
            p.task = self.progress.add_task(p.label or p.name, total=100, phase=p, step=None, target="")

    def update(self, p: Phase) -> None:
        with self._lock:
            if self.progress is not None and p.task is not None and p.step is not None:
                self.progress.update(p.task, completed=p.step.percent, step=p.step, target=p.step.target)

    def remove(self, p: Phase) -> None:
        with self._lock:
            if self.progress is None or p.task is None:
                return
            self.progress.remove_task(p.task)
            if not self.progress.tasks:
                self.progress.stop()
                self.progress = None


