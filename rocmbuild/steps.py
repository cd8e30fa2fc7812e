"""A build tool's progress lines, read: ninja's ``[12/300] Building ...`` (a count) and make's
``[ 44%] Building ...`` (a percent only: no count is invented). Used by :mod:`rocmbuild.progress`."""

from __future__ import annotations

import re
from dataclasses import dataclass

_NINJA = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)$")
_MAKE = re.compile(r"^\[\s*(\d+)%\]\s*(.*)$")


@dataclass(frozen=True)
class Step:
    """One progress line of a build tool: ``done``/``total`` from ninja, only ``percent`` from make."""

    percent: float
    done: int | None
    total: int | None
    target: str


def parse_step(line: str) -> Step | None:
    """The step a ninja (``[12/300] Building ...``) or make (``[ 44%] Building ...``) line reports."""
    m = _NINJA.match(line)
    if m:
        done, total = int(m.group(1)), int(m.group(2))
        return Step(100.0 * done / total if total else 0.0, done, total, m.group(3).strip())
    m = _MAKE.match(line)
    if m:
        return Step(float(m.group(1)), None, None, m.group(2).strip())
    return None
