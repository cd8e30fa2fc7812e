"""What every result shares: the error slot, records serialized as their fields, JSON helpers."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Mapping

from rocmbuild.errors import RocmbuildError

if TYPE_CHECKING:
    from rocmbuild.swap.plan import Plan

Json = Mapping[str, Any]  # a JSON object made by a lower layer, carried through as it is
BACKUP_BYTES_NOTE = "bytes only the backups keep alive (backup files with no other link)"


def records_json(items) -> list[dict[str, Any]]:
    return [x.to_json() for x in items]


def seconds_json(seconds: float | None) -> float | None:
    """A duration in the JSON: seconds, to the millisecond (None stays null)."""
    return round(seconds, 3) if seconds is not None else None


class VerbResult:
    """The part every result shares: an error that still carries the data (usually none), and
    ``changed`` (docs/json.md, "changed"): a verb that can change something says whether this run
    did (the CLI puts it in the JSON object); None, the default, for a verb that never changes
    anything (no ``changed`` key)."""

    @property
    def error(self) -> RocmbuildError | None:
        return None

    @property
    def changed(self) -> bool | None:
        return None


class Record:
    """A result whose JSON object is its fields, as they are."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]  # a mixin: every Record is a dataclass


def plan_target(plan: "Plan") -> dict[str, Any]:
    return {"prefix": plan.prefix, "python": plan.python, "layout": plan.layout, "libdir": plan.libdir,
            "state_dir": plan.state_dir}


