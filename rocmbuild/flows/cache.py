"""``rocmbuild cache verify``: re-hash every cached artifact, built and imported, against its
manifest; quarantine what does not match.

Decisions:
* Every byte is read (``Artifact.bytes_problems``): this is the slow, thorough check that the
  hot path skips (an apply hashes only files whose recorded identity moved).
* A bad entry (a file that differs, a missing file, a link that moved, an unreadable manifest)
  is renamed to ``artifacts/.quarantine/`` (``cache.quarantine``), never deleted: it is never
  served again, and is there to be looked at. A later build of its recipe builds it anew.
* An entry found intact is sealed again (``artifact.seal``: read-only, identities re-recorded),
  so an identity that moved harmlessly (a backup tool restoring the cache, a chmod) costs a hash
  on every apply only until the next ``cache verify``.
* Exit 0 when all is well, 3 (``FetchError``) when anything was quarantined; the report of every
  entry is kept beside the error.
"""

from __future__ import annotations

from pathlib import Path

from rocmbuild.build import bundle, cache
from rocmbuild.build.artifact import MANIFEST, Artifact, Manifest, seal
from rocmbuild.disk import read_json
from rocmbuild.errors import InputError
from rocmbuild.home import artifacts_dir, cache_home
from rocmbuild.build.cache import CacheEntry
from rocmbuild.results import CacheVerifyResult

PROVENANCE = bundle.PROVENANCE


def _provenance(path: Path) -> dict | None:
    try:
        data = read_json(path / PROVENANCE)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check(path: Path) -> CacheEntry:
    """Re-hash one artifact directory; quarantine it when it does not match its manifest."""
    kind = "imported" if path.parent.name == "imported" else "built"
    art = None
    try:
        art = Artifact(path, Manifest.from_json(read_json(path / MANIFEST)), cached=True)
        problems = art.bytes_problems()
    except (OSError, ValueError, KeyError, TypeError, InputError) as exc:
        problems = [f"{MANIFEST}: unreadable ({exc})"]
    recipe = art.manifest.recipe if art else None
    version = art.manifest.version if art else None
    prov = _provenance(path) if kind == "imported" else None
    if problems:
        return CacheEntry(path.name, kind, recipe, version, str(path), "quarantined", tuple(problems),
                          str(cache.quarantine(path)), prov)
    seal(path, art.manifest.files)  # type: ignore[union-attr]
    return CacheEntry(path.name, kind, recipe, version, str(path), "ok", (), None, prov)


def verify(home: Path | None = None) -> CacheVerifyResult:
    """``rocmbuild cache verify``."""
    home = Path(home) if home is not None else cache_home()
    return CacheVerifyResult(str(artifacts_dir(home)), tuple(check(p) for p in cache.entries(home)))
