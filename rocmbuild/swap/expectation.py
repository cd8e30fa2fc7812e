"""What a transaction asks of verification: the :class:`Expectation` a :class:`Verify` callback
judges (returning a :class:`~rocmbuild.results.verdict.Verdict`). The :class:`Outcome` of a
finished transaction is a result: :mod:`rocmbuild.results.txnresult`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rocmbuild.swap.plan import Plan
from rocmbuild.results.verdict import Verdict


@dataclass(frozen=True)
class Expectation:
    """What verification must find: the library loaded from ``library`` at ``version``."""

    library: str
    version: str | None
    encoding: str
    restored: bool = False  # True: checking that an old state is back
    library_name: str = "libMIOpen"  # the stem to look for in the target process
    libraries: tuple[str, ...] = ()  # every library file of the set the plan places (identity for each)
    links: tuple[str, ...] = ()  # the names of the target's chains, each must resolve to one of them

    def expected_files(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p in (self.libraries or (self.library,)))


class Verify(Protocol):
    """Judges the target against an expectation (the flows: the probe in the target's Python)."""

    def __call__(self, expectation: Expectation, /) -> Verdict: ...


def _library_files(plan: Plan) -> tuple[str, ...]:
    """The files of the library set the plan writes (apply: placed; rollback: restored), by name."""
    files = [a.path for a in plan.actions if a.kind in ("replace_file", "add_file")
             and a.role in ("library", "restore") and Path(a.path).name.startswith(plan.library_name)]
    return tuple(dict.fromkeys([plan.library, *files]))


def expectation_after(plan: Plan) -> Expectation:
    # a rollback's "after" is an earlier state: checked like a restored one (identity and version;
    # an incompatibility it always had is a warning, not a reason to undo the rollback)
    return Expectation(plan.library, plan.version_after, plan.encoding, restored=plan.verb == "rollback",
                       library_name=plan.library_name, libraries=_library_files(plan),
                       links=tuple(a.path for a in plan.actions if a.kind == "replace_link" and a.role == "link"))


def expectation_before(plan: Plan) -> Expectation:
    files = _library_files(plan)
    return Expectation(plan.library_before, plan.version_before, plan.encoding, restored=True,
                       library_name=plan.library_name,
                       libraries=tuple(dict.fromkeys([plan.library_before, *files[1:]])) if files else ())
