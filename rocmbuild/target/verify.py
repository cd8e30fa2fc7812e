"""Verification results: one :class:`Check` per question asked of a target, and the
:class:`Verdict` that collects them with the probe report they were judged on."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
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
    warnings: tuple[Check, ...] = ()  # failed checks that do not count (see relaxed)
    warn_only: tuple[str, ...] = ()  # the check names relaxed() made warnings

    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok and c.name not in self.warn_only)

    def relaxed(self, warn_only: tuple[str, ...]) -> "Verdict":
        """The same checks, where a failed check named in ``warn_only`` is a warning: not a
        failure, not counted in ``ok``. Used for an earlier state put back (a rollback, the restore
        after a failed apply), which may have failed e.g. the compatibility check all along."""
        warn_only = tuple(warn_only)
        warnings = tuple(c for c in self.checks if not c.ok and c.name in warn_only)
        ok = all(c.ok for c in self.checks if c.name not in warn_only)
        return replace(self, ok=ok, warnings=warnings, warn_only=warn_only)

    def to_json(self) -> dict:
        out = {
            "ok": self.ok,
            "checks": [c.to_json() for c in self.checks],
            "failures": [c.name for c in self.failures()],
            "report": self.report.summary(),
        }
        if self.warn_only:
            out["warnings"] = [c.to_json() for c in self.warnings]
        return out

    def render(self) -> str:
        return "\n".join(c.render() for c in self.checks)
