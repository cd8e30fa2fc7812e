"""``rocmbuild cache verify``: re-hash every cached artifact, built and imported, against its
manifest; quarantine what does not match. ``cache list`` and ``cache gc``: the cache
(:mod:`rocmbuild.store.housekeeping`) beside what the known targets use (:mod:`rocmbuild.swap.knowntargets`).

Decisions:
* Every byte is read (``Artifact.bytes_problems``): this is the slow, thorough check that the
  hot path skips (an apply hashes only files whose recorded identity moved).
* A bad entry (a file that differs, a missing file, a link that moved, a manifest or a provenance
  that its schema refuses: docs/state-files.md) is renamed to ``artifacts/.quarantine/`` (``cache.quarantine``), never deleted: it is never
  served again, and is there to be looked at. A later build of its recipe builds it anew.
* An entry found intact is sealed again (``artifact.seal``: read-only, identities re-recorded),
  so an identity that moved harmlessly (a backup tool restoring the cache, a chmod) costs a hash
  on every apply only until the next ``cache verify``.
* Exit 0 when all is well, 3 (``FetchError``) when anything was quarantined; the report of every
  entry is kept beside the error.
* ``cache gc`` never removes an artifact a known target uses (in effect, restorable by a rollback,
  or needed by a recovery), nor any artifact at all while a known target's journal cannot be read;
  one gc at a time (``home/.gc.lock``, exit 5 for a second one); each entry is taken under its key
  lock, so nothing a running build holds is touched. ``--dry-run`` writes nothing at all (no lock
  either), so what a build locks at that moment may be listed as removable. A target's rollback restores its own backups
  (never the cache), so even an unknown target loses nothing but a cache hit.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from collections import defaultdict
from pathlib import Path

from rocmbuild.store import bundle, cache, housekeeping
from rocmbuild.store.housekeeping import Candidate
from rocmbuild.store.artifact import MANIFEST, Artifact, read_manifest, seal
from rocmbuild.fs.root import Root
from rocmbuild.fs.disk import FileLock
from rocmbuild.errors import ArtifactError, InputError
from rocmbuild.home import artifacts_dir, cache_home, state_home
from rocmbuild.results.cacheresult import CacheEntry
from rocmbuild.results import CacheDirResult, CacheGcResult, CacheListResult, CacheRmResult, CacheVerifyResult
from rocmbuild.results.cacheresult import Kept, ListedArtifact, ListedTarget
from rocmbuild.swap import knowntargets
from rocmbuild.swap.knowntargets import Use

PROVENANCE = bundle.PROVENANCE


def _provenance(path: Path, problems: list[str]) -> dict | None:
    """The provenance of an imported artifact as JSON (None: it has none); one that cannot be read
    is a problem of the entry (it is quarantined with it: where it came from is unknown)."""
    try:
        prov = bundle.read_provenance(path)
    except ArtifactError as exc:
        problems.append(f"{PROVENANCE}: {exc.message}")
        return None
    return prov.to_json() if prov is not None else None


def check(path: Path) -> CacheEntry:
    """Re-hash one artifact directory; quarantine it when it does not match its manifest."""
    kind = "imported" if path.parent.name == "imported" else "built"
    art = None
    try:
        art = Artifact(path, read_manifest(path / MANIFEST), cached=True)
        problems = art.bytes_problems()
    except (OSError, ArtifactError) as exc:
        problems = [f"{MANIFEST}: unreadable ({getattr(exc, 'message', exc)})"]
    recipe = art.manifest.recipe if art else None
    version = art.manifest.version if art else None
    prov = _provenance(path, problems) if kind == "imported" else None
    if problems:
        return CacheEntry(path.name, kind, recipe, version, str(path), "quarantined", tuple(problems),
                          str(cache.quarantine(path)), prov)
    assert art is not None  # no problems: its manifest was read
    seal(path, art.manifest.files)
    return CacheEntry(path.name, kind, recipe, version, str(path), "ok", (), None, prov)


def verify(home: Path | None = None) -> CacheVerifyResult:
    """``rocmbuild cache verify``."""
    home = Path(home) if home is not None else cache_home()
    return CacheVerifyResult(str(artifacts_dir(home)), tuple(check(p) for p in cache.entries(home)))


# --------------------------------------------------------------------------------------------
# cache list / cache gc: the cache composed with what the known targets use (swap.known)


def _uses(state: Path) -> tuple[list[ListedTarget], dict[str, list[Use]]]:
    targets, by_key = [], defaultdict(list)
    for t in knowntargets.known(state):
        used, bad = knowntargets.uses(t)
        targets.append(ListedTarget(t, tuple(bad)))
        for u in used:
            by_key[u.key].append(u)
    return targets, by_key


def listing(home: Path | None = None) -> CacheListResult:
    """``rocmbuild cache list``: every artifact, and which known targets use it."""
    home = Path(home) if home is not None else cache_home()
    targets, by_key = _uses(state_home())
    arts = tuple(ListedArtifact(a, tuple(by_key.get(a.key, ()))) for a in housekeeping.artifacts(home))
    return CacheListResult(str(home), arts, tuple(targets))


def _users_text(users: list[Use]) -> str:
    first = users[0]
    more = f" and {len(users) - 1} more" if len(users) > 1 else ""
    return f"used by {first.prefix or first.state_dir} ({first.role}, txn {first.txn}){more}"


def _gc_artifacts(home: Path, cutoff: float, by_key, blocked: str | None, dry_run: bool, out: dict) -> None:
    for a in housekeeping.artifacts(home):
        path = Path(a.path)
        if by_key.get(a.key):
            out["kept"].append(Kept("artifact", a.path, a.key, _users_text(by_key[a.key])))
            continue
        if (a.last_used_ts or 0) > cutoff:
            continue
        if blocked:
            out["kept"].append(Kept("artifact", a.path, a.key, blocked))
            continue

        def still(path=path) -> str | None:
            return "used since it was listed" if (housekeeping.last_use(home, path) or 0) > cutoff else None

        c = Candidate("artifact", a.path, f"not used since {a.last_used}", a.size, a.last_used, a.key)
        _take(home, c, dry_run, out, still)


def _take(home: Path, c: Candidate, dry_run: bool, out: dict, still=None) -> None:
    why = housekeeping.take(home, c, dry_run=dry_run, still=still)
    if why is None:
        out["removed"].append(c)
    else:
        out["kept"].append(Kept(c.kind, c.path, c.key, why))


def _gc_sources_and_logs(home: Path, cutoff: float, dry_run: bool, out: dict) -> None:
    """Source clones not fetched in ``keep_days``, and logs past the newest few (store/housekeeping.py)."""
    for c in housekeeping.sources(home, cutoff):
        why = housekeeping.take_source(c, home, dry_run=dry_run)
        if why is None:
            out["removed"].append(c)
        else:
            out["kept"].append(Kept(c.kind, c.path, None, why))
    for c in housekeeping.old_logs(home, cutoff):
        if not dry_run:
            housekeeping.remove(Path(c.path), home)
        out["removed"].append(c)
    if not dry_run:
        for link in housekeeping.dangling_links(home):
            housekeeping.remove(link, home)


def gc(keep_days: float = housekeeping.DEFAULT_KEEP_DAYS, *, dry_run: bool = False,
       home: Path | None = None) -> CacheGcResult:
    """``rocmbuild cache gc``: remove what nothing needs (docs/cache.md, "Housekeeping")."""
    if keep_days < 0:
        raise InputError(f"--keep-days must be 0 or more (got {keep_days:g})", "give a number of days, e.g. --keep-days 30")
    home = Path(home) if home is not None else cache_home()
    cutoff = time.time() - keep_days * 86400
    out: dict = {"removed": [], "kept": [], "notes": []}
    if not dry_run:
        Root.open(home, "the cache", create=True).close()
    with nullcontext() if dry_run else FileLock(home / ".gc.lock", wait=False, what="the cache's garbage collection"):
        targets, by_key = _uses(state_home())
        bad = [p for t in targets for p in t.unreadable]
        records = knowntargets.unreadable_records(state_home())
        blocked = None
        if bad:
            blocked = f"a known target's journal cannot be read ({bad[0]}): what it uses is unknown"
        elif records:
            blocked = f"a known-targets record cannot be read ({records[0]}): which target it names is unknown"
        if blocked:
            out["notes"].append(f"no artifact was removed: {blocked}; fix or move that file aside, then run gc again")
        gone = [t.target for t in targets if not t.target.exists]
        if gone:
            out["notes"].append(f"{len(gone)} known target(s) no longer exist (e.g. {gone[0].prefix or gone[0].state_dir}): "
                                "they protect nothing")
        _gc_artifacts(home, cutoff, by_key, blocked, dry_run, out)
        gone_keys = {c.key for c in out["removed"] if c.kind == "artifact"}
        for c in housekeeping.build_dirs(home, cutoff, gone_keys) + housekeeping.temps(home):
            _take(home, c, dry_run, out)
        for c in housekeeping.downloads(home, cutoff) + housekeeping.quarantined(home, cutoff):
            _take(home, c, dry_run, out)
        _gc_sources_and_logs(home, cutoff, dry_run, out)
    return CacheGcResult(str(home), keep_days, dry_run, tuple(out["removed"]), tuple(out["kept"]), tuple(out["notes"]))


# --------------------------------------------------------------------------------------------
# cache dir / cache rm


def where() -> CacheDirResult:
    """``rocmbuild cache dir``: the cache (safe to remove) and the state (not)."""
    return CacheDirResult(str(cache_home()), str(state_home()))


#: the uses that keep an artifact from ``cache rm`` (without --force): what a target has applied now,
#: what a redo would place again, what a recovery may read; an earlier apply ("rollback") comes
#: back from the target's own backups, never from the cache
BLOCKING = ("in-effect", "redo", "recovery")


#: role -> (what it is to that target, what frees it): a rolled-back target is not told to roll back
_HELD = {
    "in-effect": ("is in effect in {} (txn {})", "roll that target back first (`rocmbuild rollback --env {}`: it "
                  "needs only its backups)"),
    "redo": ("was rolled back in {}, and `rocmbuild redo` would place it again (txn {})",
             "that target no longer uses it, but its redo would: apply something there (which ends the redo)"),
    "recovery": ("is needed by the interrupted txn {1} in {0}", "run `rocmbuild recover --env {}` first"),
}


def _matching(home: Path, what: str) -> list[housekeeping.ArtifactInfo]:
    arts = housekeeping.artifacts(home)
    if len(what) >= 8 and all(ch in "0123456789abcdef" for ch in what):
        hits = [a for a in arts if a.key.startswith(what)]
        if len({a.key for a in hits}) > 1:
            raise InputError(f"{what} is the start of {len(hits)} artifact keys",
                             "give more of the key (`rocmbuild cache list` shows them)")
        if hits:
            return hits
    return [a for a in arts if a.recipe == what]


def rm(what: str, *, force: bool = False, home: Path | None = None) -> CacheRmResult:
    """``rocmbuild cache rm KEY|RECIPE``: remove one artifact (a key or the start of one), or each
    of a recipe's, under its key lock; refused (exit 2) for one a known target uses (``BLOCKING``)."""
    home = Path(home) if home is not None else cache_home()
    arts = _matching(home, what)
    if not arts:
        raise InputError(f"no artifact in {home} is {what!r} (a key, the start of one, or a recipe)",
                         "see what there is with `rocmbuild cache list`")
    _, by_key = _uses(state_home())
    held = [(a, u) for a in arts for u in by_key.get(a.key, ()) if u.role in BLOCKING]
    if held and not force:
        a, u = held[0]
        where = u.prefix or u.state_dir
        raise InputError(f"artifact {a.key[:16]} ({a.recipe} {a.version}) {_HELD[u.role][0].format(where, u.txn)}; "
                         "it was not removed", _HELD[u.role][1].format(where) + ", or pass --force (an apply or "
                         "redo of it builds it again)")
    out: dict = {"removed": [], "kept": []}
    for a in arts:
        c = Candidate("artifact", a.path, "asked for", a.size, a.last_used, a.key)
        _take(home, c, False, out)
    return CacheRmResult(str(home), what, tuple(out["removed"]), tuple(out["kept"]))
