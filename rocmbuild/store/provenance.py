"""Where an imported artifact came from: ``artifacts/imported/<key>/provenance.json``.

``kind`` is ``file`` (a bundle given by path), ``url`` (a bundle given by URL) or ``cache`` (a
*substituted* artifact: found by its key in a binary cache, its signature checked, then
imported; ``cache`` names the cache's URL and ``signer`` the trusted key that signed it, or None
when ``--allow-unsigned`` let an unsigned one in). Only a ``cache`` entry may be served as a
recipe's cache hit (:func:`rocmbuild.store.cache.lookup`). A URL's ``user:password@`` is shown as
``***@``, in what is written and in what an older file held (:func:`rocmbuild.config.redact_url`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rocmbuild import schema as s
from rocmbuild.store import manifest as _manifest
from rocmbuild.config import redact_url
from rocmbuild.fs.disk import read_json
from rocmbuild.errors import ArtifactError

PROVENANCE = "provenance.json"
SUBSTITUTED = "cache"


@dataclass(frozen=True)
class Provenance:
    """Where an imported artifact came from (``provenance.json``)."""

    source: str  # the bundle's absolute path, or its URL (kind "cache": the cache's URL)
    kind: str  # file | url | cache
    bundle_sha256: str
    sha256_checked: bool  # checked against a given sha256 (--sha256, the .sha256 file, the cache's digest)
    imported: str  # when (ISO 8601, UTC)
    cache: str | None = None  # kind "cache": the binary cache it was substituted from
    signer: str | None = None  # kind "cache": the trusted key that signed it (None: --allow-unsigned)

    def __post_init__(self) -> None:
        # a URL's user:password@ never reaches the file, nor leaves an older file that holds it
        object.__setattr__(self, "source", redact_url(self.source))
        if self.cache is not None:
            object.__setattr__(self, "cache", redact_url(self.cache))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def substituted(self) -> bool:
        return self.kind == SUBSTITUTED


PROVENANCE_SPEC = s.record(Provenance, kind=s.one_of("file", "url", SUBSTITUTED), bundle_sha256=s.check(
    s.string, lambda v: bool(re.fullmatch(r"[0-9a-f]{64}", v)), "a sha256 (64 lowercase hexadecimal digits)"))


def parse_provenance(data: Any, file: object) -> Provenance:
    """A provenance record; SchemaError naming ``file``, the field and what was expected."""
    return s.load(PROVENANCE_SPEC, data, file)


def read_provenance(artifact_dir: Path) -> Provenance | None:
    """The provenance of an imported artifact (None: it has none); ArtifactError (exit 3) when
    the file is there but is not one."""
    path = Path(artifact_dir) / PROVENANCE
    try:
        data = read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"corrupt artifact provenance {path}: {exc}", _manifest.BAD_ARTIFACT_HINT) from None
    try:
        return parse_provenance(data, path)
    except s.SchemaError as exc:
        raise _manifest.corrupt(exc, "provenance") from None


@dataclass(frozen=True)
class Origin:
    """Where a substituted artifact came from, as ``cache list``, ``status``, ``build`` and
    ``apply`` show it (``to_json()``: docs/json.md, ``substituted``)."""

    url: str | None  # the binary cache's URL (credentials shown as ``***@``)
    bundle_sha256: str
    signer: str | None  # the trusted key that signed it (None: --allow-unsigned)
    imported: str  # when (ISO 8601, UTC)

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "bundle_sha256": self.bundle_sha256, "signer": self.signer, "imported": self.imported}


def origin(artifact_dir: Path) -> Origin | None:
    """What ``cache list``, ``status``, ``build`` and ``apply`` show of an artifact's origin: its
    provenance when it was substituted from a binary cache (None: built here, imported from a
    bundle, or unreadable)."""
    try:
        p = read_provenance(artifact_dir)
    except ArtifactError:
        return None
    if p is None or not p.substituted:
        return None
    return Origin(p.cache, p.bundle_sha256, p.signer, p.imported)
