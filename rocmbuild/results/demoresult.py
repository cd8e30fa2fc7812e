"""The result of ``rocmbuild demo``: the steps it ran (each a real rocmbuild command), their exit
codes and what was checked after each.

Decision: a failed check keeps the steps run so far beside the error (like ``doctor``), so
``--json`` still lists them; the error's exit code is the failed step's own when it exited
otherwise than expected with one of rocmbuild's codes 2..5 (the machine lacks something, the
step says what), else 1 (rocmbuild did not do what it promises: a bug).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rocmbuild.errors import EXIT_INTERNAL, RocmbuildError
from rocmbuild.results.base import Record, VerbResult


@dataclass(frozen=True)
class DemoCheck(Record):
    what: str  # what must hold after the step
    ok: bool
    detail: str  # what was found


@dataclass(frozen=True)
class DemoStep:
    name: str  # doctor, plan, apply, status, crash, recover, rollback
    command: tuple[str, ...]  # as a user types it (``rocmbuild ...``), run from the scratch dir
    exit_code: int
    expected_exit_code: int
    seconds: float
    checks: tuple[DemoCheck, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # the variables set for this step only (the failpoint)

    @property
    def ok(self) -> bool:
        return self.exit_code == self.expected_exit_code and all(c.ok for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "command": list(self.command), "exit_code": self.exit_code,
                "expected_exit_code": self.expected_exit_code, "env": dict(self.env), "ok": self.ok, "seconds": round(self.seconds, 2),
                "checks": [c.to_json() for c in self.checks]}


class DemoFailed(RocmbuildError):
    """A demo step did not do what it must (its exit code: see the module docstring)."""

    def __init__(self, step: DemoStep, scratch: str) -> None:
        bad = [c for c in step.checks if not c.ok]
        if step.exit_code != step.expected_exit_code:
            what = f"exited {step.exit_code}, expected {step.expected_exit_code}"
        else:
            what = "; ".join(f"{c.what}: {c.detail}" for c in bad)
        super().__init__(f"demo step {step.name!r} failed: {what}",
                         f"the demo's files are kept in {scratch} (its logs are under home/logs); the step's "
                         "output is above. If rocmbuild itself misbehaved, report it with that output",
                         details={"step": step.name, "exit_code": step.exit_code,
                                  "expected_exit_code": step.expected_exit_code, "scratch": scratch})
        unexpected = step.exit_code != step.expected_exit_code
        self.exit_code = step.exit_code if unexpected and 2 <= step.exit_code <= 5 else EXIT_INTERNAL


@dataclass(frozen=True)
class DemoResult(VerbResult):
    steps: tuple[DemoStep, ...]
    scratch: str  # the scratch dir (removed unless kept)
    kept: bool
    seconds: float

    @property
    def failed(self) -> DemoStep | None:
        return next((s for s in self.steps if not s.ok), None)

    @property
    def error(self) -> RocmbuildError | None:
        bad = self.failed
        return DemoFailed(bad, self.scratch) if bad is not None else None

    def to_json(self) -> dict[str, Any]:
        bad = self.failed
        return {"steps": [s.to_json() for s in self.steps], "failed_step": bad.name if bad else None,
                "scratch": self.scratch, "kept": self.kept, "seconds": round(self.seconds, 2)}
