"""Verification results: one :class:`Check` per question asked of a target, and the
:class:`Verdict` that collects them with the probe report they were judged on."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    expected: str
    found: str
    message: str = ""
    skipped: bool = False  # a check asked for but not possible here (smoke test without a GPU)

    def to_json(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        mark = "skip" if self.skipped else ("ok" if self.ok else "FAIL")
        line = f"[{mark:>4}] {self.name}: expected {self.expected}; found {self.found}"
        return line + (f"\n       {self.message}" if self.message else "")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    checks: tuple[Check, ...]
    report: Any  # a rocmbuild.target.probe.ProbeReport

    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "checks": [c.to_json() for c in self.checks],
            "failures": [c.name for c in self.failures()],
            "report": self.report.summary(),
        }

    def render(self) -> str:
        return "\n".join(c.render() for c in self.checks)
