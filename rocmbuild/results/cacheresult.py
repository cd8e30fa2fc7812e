"""The results of ``cache list``, ``cache gc`` and ``cache verify`` (their keys: docs/json.md, "cache list",
"cache gc", "cache")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rocmbuild.errors import FetchError
from rocmbuild.store.housekeeping import ArtifactInfo, Candidate
from rocmbuild.results.base import VerbResult

if TYPE_CHECKING:
    from rocmbuild.swap.knowntargets import KnownTarget, Use


@dataclass(frozen=True)
class ListedArtifact:
    info: ArtifactInfo
    used_by: tuple[Use, ...]

    def to_json(self) -> dict[str, Any]:
        i = self.info
        return {"key": i.key, "kind": i.kind, "recipe": i.recipe, "version": i.version, "commit": i.commit,
                "path": i.path, "size": i.size, "created": i.created, "last_used": i.last_used,
                "substituted": i.substituted.to_json() if i.substituted else None, "targets": [u.to_json() for u in self.used_by], "build": dict(i.build)}


@dataclass(frozen=True)
class ListedTarget:
    target: KnownTarget
    unreadable: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        t = self.target
        return {"prefix": t.prefix, "state_dir": t.state_dir, "exists": t.exists, "unreadable": list(self.unreadable)}


@dataclass(frozen=True)
class CacheListResult(VerbResult):
    cache: str
    artifacts: tuple[ListedArtifact, ...]
    targets: tuple[ListedTarget, ...]

    @property
    def total_bytes(self) -> int:
        return sum(a.info.size for a in self.artifacts)  # each inode once: sizes share one seen-set

    def to_json(self) -> dict[str, Any]:
        return {"cache": self.cache, "artifacts": [a.to_json() for a in self.artifacts],
                "total_bytes": self.total_bytes, "targets": [t.to_json() for t in self.targets]}


@dataclass(frozen=True)
class Kept:
    """Something ``cache gc`` looked at and left, and why."""

    kind: str
    path: str
    key: str | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "key": self.key, "reason": self.reason}


@dataclass(frozen=True)
class CacheGcResult(VerbResult):
    cache: str
    keep_days: float
    dry_run: bool
    removed: tuple[Candidate, ...]
    kept: tuple[Kept, ...]
    notes: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.removed) and not self.dry_run

    @property
    def freed_bytes(self) -> int:
        return sum(c.bytes for c in self.removed)

    def to_json(self) -> dict[str, Any]:
        return {"cache": self.cache, "keep_days": self.keep_days, "dry_run": self.dry_run,
                "removed": [c.to_json() for c in self.removed], "freed_bytes": self.freed_bytes,
                "kept": [k.to_json() for k in self.kept], "notes": list(self.notes)}


@dataclass(frozen=True)
class CacheDirResult(VerbResult):
    """``cache dir``: where the cache is (what may be removed), and where the state is (what may not)."""

    cache: str
    state: str

    def to_json(self) -> dict[str, Any]:
        return {"cache": self.cache, "state": self.state}


@dataclass(frozen=True)
class CacheRmResult(VerbResult):
    """``cache rm KEY|RECIPE``: the artifacts removed (a recipe: each of its artifacts)."""

    cache: str
    what: str
    removed: tuple[Candidate, ...]
    kept: tuple[Kept, ...]

    @property
    def changed(self) -> bool:
        return bool(self.removed)

    def to_json(self) -> dict[str, Any]:
        return {"cache": self.cache, "what": self.what, "removed": [c.to_json() for c in self.removed],
                "freed_bytes": sum(c.bytes for c in self.removed), "kept": [k.to_json() for k in self.kept]}


@dataclass(frozen=True)
class LogResult(VerbResult):
    """``log RECIPE``: its logs, oldest first, and the newest one's text (``--list``: none;
    ``--follow``: already printed as it came, so empty)."""

    recipe: str
    logs: tuple[str, ...]
    text: str | None = None
    followed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "logs": list(self.logs), "newest": self.logs[-1] if self.logs else None}


@dataclass(frozen=True)
class CacheEntry:
    """One artifact as ``cache verify`` found it (``to_json()``: docs/json.md, "cache")."""

    key: str
    kind: str  # "built" | "imported"
    recipe: str | None
    version: str | None
    path: str
    status: str  # "ok" | "quarantined"
    problems: tuple[str, ...]
    quarantined_to: str | None
    provenance: dict[str, Any] | None  # imported: where the bundle came from (provenance.json)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CacheVerifyResult(VerbResult):
    """``cache verify``'s result: every entry as found; ``error`` is a FetchError (exit 3) when
    anything was quarantined, the report kept beside it."""

    cache: str
    entries: tuple[CacheEntry, ...]

    @property
    def changed(self) -> bool:
        """Something was quarantined (re-sealing an intact entry is not a change)."""
        return any(e.status != "ok" for e in self.entries)

    @property
    def error(self) -> FetchError | None:
        bad = [e for e in self.entries if e.status != "ok"]
        if not bad:
            return None
        return FetchError(f"{len(bad)} cached artifact(s) did not match their manifest and were quarantined: "
                          + ", ".join(f"{e.key[:16]} ({e.recipe or '?'})" for e in bad),
                          "they are never served again: build the recipe again or import its bundle again; "
                          "the quarantined copies under artifacts/.quarantine/ may be removed")

    def to_json(self) -> dict[str, Any]:
        return {"cache": self.cache, "artifacts": [e.to_json() for e in self.entries],
                "checked": len(self.entries), "quarantined": [e.quarantined_to for e in self.entries
                                                              if e.quarantined_to]}
