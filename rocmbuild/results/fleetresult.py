"""The results of the fleet verbs: ``config list``, ``key generate``, ``push`` and
``cache list --remote`` (their keys: docs/json.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rocmbuild.results.base import Record, VerbResult


@dataclass(frozen=True)
class Setting(Record):
    """One effective setting: its name (``jobs``, ``caches``, ``trust.public_keys``...), its value
    and the file that set it (None: the built-in default)."""

    name: str
    value: Any
    source: str | None
    default: str = ""  # in words: what is in effect when no file sets it


@dataclass(frozen=True)
class ConfigListResult(VerbResult):
    files: tuple[str, ...]  # the config files read, in order
    searched: tuple[str, ...]  # every place looked at, in order
    settings: tuple[Setting, ...]

    def to_json(self) -> dict[str, Any]:
        return {"files": list(self.files), "searched": list(self.searched),
                "settings": [s.to_json() for s in self.settings]}


@dataclass(frozen=True)
class KeyResult(Record, VerbResult):
    name: str
    public_key: str  # NAME:BASE64, for [trust] public_keys
    secret_file: str

    @property
    def changed(self) -> bool:
        return True  # a new key file (an existing one is never overwritten: an error instead)


@dataclass(frozen=True)
class PushResult(Record, VerbResult):
    url: str
    key: str
    recipe: str
    version: str | None
    uploaded: bool  # False: the cache already held the key; nothing was sent
    bundle_sha256: str | None  # None when nothing was exported
    size: int | None
    signer: str | None
    held_by: str | None = None  # not uploaded: the signer of the entry the cache holds (None: unsigned)

    @property
    def changed(self) -> bool:
        return self.uploaded


@dataclass(frozen=True)
class RemoteArtifact(Record):
    key: str
    recipe: str | None
    version: str | None
    gpu_targets: list[str] | None
    size: int | None
    bundle_sha256: str
    signer: str | None  # the name the signature file gives (None: unsigned)
    trusted: bool  # the signer is in [trust] public_keys and the signature covers the manifest and bundle digest


@dataclass(frozen=True)
class RemoteListResult(VerbResult):
    url: str
    artifacts: tuple[RemoteArtifact, ...]

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "artifacts": [a.to_json() for a in self.artifacts]}
