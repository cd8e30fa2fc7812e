"""The verdict of a verification: named checks, each with what was expected and what was found.

:meth:`Verdict.relaxed` turns named failed checks into warnings (an earlier state put back may
fail a check it failed before rocmbuild changed anything); the checks themselves are kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from rocmbuild.names import safe_text

if TYPE_CHECKING:
    from rocmbuild.environment.probe import ProbeReport


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

    @property
    def shown_name(self) -> str:
        """The name in text: the smoke suite's BatchNorm2d check keeps the name ``smoke`` in JSON
        (what recipes and scripts have read first) but reads ``smoke: batchnorm`` like its siblings."""
        return "smoke: batchnorm" if self.name == "smoke" else self.name

    def render(self, *, with_message: bool = True) -> str:
        mark = "skip" if self.skipped else ("ok" if self.ok else "FAIL")
        line = f"[{mark:>4}] {self.shown_name}: expected {self.expected}; found {self.found}"
        # what the target's Python reported is shown, never acted on: one line each
        return safe_text(line) + (f"\n       {safe_text(self.message)}" if self.message and with_message else "")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    checks: tuple[Check, ...]
    report: ProbeReport
    warnings: tuple[Check, ...] = ()  # failed checks that do not count (see relaxed)
    relaxed_for: tuple[str, ...] | None = field(default=None, repr=False)  # the names relaxed() was given

    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok and c not in self.warnings)

    def relaxed(self, warn_only: tuple[str, ...]) -> Verdict:
        """This verdict with the failed checks named in ``warn_only`` as warnings, not failures."""
        names = tuple(dict.fromkeys((*(self.relaxed_for or ()), *warn_only)))
        warnings = tuple(c for c in self.checks if not c.ok and c.name in names)
        ok = all(c.ok for c in self.checks if c.name not in names)
        return Verdict(ok, self.checks, self.report, warnings, names)

    def to_json(self) -> dict:
        out = {
            "ok": self.ok,
            "checks": [c.to_json() for c in self.checks],
            "failures": [c.name for c in self.failures()],
            "report": self.report.summary(),
        }
        if self.relaxed_for is not None:
            out["warnings"] = [c.to_json() for c in self.warnings]
        return out

    def render(self) -> str:
        """One line per check; a message several checks share (the smoke suite's) under the first only."""
        said: set[str] = set()
        out = []
        for c in self.checks:
            out.append(c.render(with_message=c.message not in said))
            said.add(c.message)
        return "\n".join(out)


def verdict_json(verdict: Verdict | None) -> dict[str, Any] | None:
    return verdict.to_json() if verdict is not None else None


def as_check(c: Check | Mapping[str, Any]) -> Check:
    """A failed check as a value (a verify callback may give its failures as JSON objects
    ``{name, expected, found, message}``: read here, once)."""
    if isinstance(c, Check):
        return c
    return Check(str(c.get("name")), False, str(c.get("expected", "")), str(c.get("found", "")),
                 str(c.get("message") or ""))


def failure_json(c: Check) -> dict[str, Any]:
    """A failed check as the JSON object ``{name, expected, found, message}``."""
    return {"name": c.name, "expected": c.expected, "found": c.found, "message": c.message}


def failures_json(verdict: Verdict | None) -> list[dict[str, Any]]:
    """The failed checks of ``verdict`` as JSON objects ``{name, expected, found, message}`` (the
    ``failures`` of a VerifyError's details)."""
    return [] if verdict is None else [failure_json(as_check(c)) for c in verdict.failures()]
