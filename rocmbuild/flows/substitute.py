"""Substitution before building: a recipe's artifact found by its key in a binary cache
(docs/caches.md, "Substitution").

``build`` and ``apply`` of a recipe or a lock file compute the key, look in the local cache
(:func:`rocmbuild.store.cache.lookup`), then ask each binary cache in order: the ``--cache URL``
flags first (in their order), then the config's ``[[caches]]``. For each cache, in this order:

1. ``lookup(key)``: the manifest's exact bytes, the bundle's sha256 and the signature (a miss
   asks the next cache);
2. the signature (:func:`rocmbuild.remote.trust.check`): by a key in ``[trust] public_keys``,
   over the key, those manifest bytes and the bundle's sha256 (``--allow-unsigned`` lets an
   unsigned or untrusted one through, per command);
3. the GPU targets the signed manifest records, against this machine's GPUs (as ``apply
   --artifact`` checks them, ``--allow-other-arch`` included);
4. the download (:mod:`rocmbuild.remote.download`: progress, retried with backoff, resumed from
   the partial file an earlier try or run left), its sha256 checked on the way;
5. the import (:func:`rocmbuild.store.bundle.import_bundle`): the bundle's sha256 again, its first
   member exactly the signed manifest, every header and every file's size and sha256 against it;
   placed under ``artifacts/imported/<key>/`` with a provenance of kind ``cache`` (the URL, the
   bundle's digest, the signer), which makes it the recipe's cache hit from then on.

Decisions: a miss, an unreachable cache (after the remote layer's retries) or a refused artifact
prints one line and the next cache is asked, then the recipe is built here;
``--require-cache`` makes that an error (exit 3, with every reason); ``--no-cache`` and
``--offline`` skip the lookup entirely (``--offline``: no request at all). Steps 4-5 hold the
artifact's key lock (the build's: ``wait`` is its policy, ``--wait``), so one home pulls a key
once; a pull that waited finds the artifact imported and downloads nothing. The download lands
in ``downloads/<key>.part/``, removed afterwards; when the download fails or is stopped (SIGTERM:
exit 143) only the partial bundle stays there, for the next pull to resume, and nothing is under
``artifacts/`` (the import starts only after the whole bundle is checked).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmbuild import config, ui
from rocmbuild.store.artifact import Artifact
from rocmbuild.store.cache import key_lock, lookup
from rocmbuild.store.provenance import SUBSTITUTED, Provenance
from rocmbuild.errors import FetchError, LockedError, RocmbuildError
from rocmbuild.home import downloads_dir
from rocmbuild.fs.locks import LockWait
from rocmbuild.fs.root import ConfinementError, Root

if TYPE_CHECKING:  # imported where a cache is opened (requests, cryptography)
    from rocmbuild.remote import Entry


@dataclass(frozen=True)
class CacheOptions:
    """What the command line says about binary caches (``build``, ``apply``, ``plan``)."""

    urls: tuple[str, ...] = ()  # --cache URL (repeatable): asked first, in order
    no_cache: bool = False  # --no-cache: no lookup
    require: bool = False  # --require-cache: a miss or refusal is exit 3, never a build
    offline: bool = False  # --offline: no network at all
    allow_unsigned: bool = False  # --allow-unsigned (never in the config)
    allow_other_arch: bool = False  # apply's --allow-other-arch
    fresh: bool = False  # --fresh: neither the local cache nor a binary cache; build anew, replacing the cached one

    def __post_init__(self) -> None:
        for url in self.urls:  # a --cache URL holding user:password@ is exit 2 at once, used or not
            config.check_cache_url(url)

    @property
    def lookup(self) -> bool:
        return not (self.no_cache or self.offline or self.fresh)


@dataclass(frozen=True)
class Candidate:
    """A cache entry that passed steps 1-3 (what a dry run says it would substitute)."""

    cache: config.CacheConfig
    entry: Entry
    signer: str | None


def caches(opts: CacheOptions) -> list[config.CacheConfig]:
    """The caches to ask, in order: ``--cache`` first, then the config's; each URL once."""
    if not opts.lookup:
        return []
    cfg = config.load().require("caches")
    out: list[config.CacheConfig] = []
    for c in [cfg.cache(u) for u in opts.urls] + list(cfg.caches):
        if all(c.url.rstrip("/") != o.url.rstrip("/") for o in out):
            out.append(c)
    return out


def _gpu_refusal(cache_url: str, key: str, manifest: bytes, opts: CacheOptions) -> str | None:
    from rocmbuild.flows import guards
    from rocmbuild.store.artifact import Manifest

    try:
        m = Manifest.from_json(json.loads(manifest), f"{cache_url} {key[:16]}")
    except (ValueError, RecursionError, RocmbuildError) as exc:
        return f"its manifest is unreadable ({getattr(exc, 'message', exc)})"
    match = guards.gpu_arch(m.gpu_targets, m.encoding, allow_other_arch=opts.allow_other_arch)
    return match.detail if match.refused else None


def candidate(c: config.CacheConfig, key: str, opts: CacheOptions) -> Candidate | None:
    """Steps 1-3 for one cache: None on a miss; FetchError (one line) when unreachable or refused."""
    from rocmbuild.remote import open_cache, trust

    entry = open_cache(c).lookup(key)
    if entry is None:
        return None
    signer = trust.check(c.url, key, entry.manifest, entry.bundle_sha256, entry.signature,
                         trust.trusted_keys(config.load().require("trust.public_keys").public_keys),
                         allow_unsigned=opts.allow_unsigned)
    if signer is None:
        ui.warn(f"{c.url}: artifact {key[:16]} is not signed by a trusted key: used anyway (--allow-unsigned)")
    why = _gpu_refusal(c.url, key, entry.manifest, opts)
    if why:
        raise FetchError(f"{c.url}: artifact {key[:16]} is refused: {why}", "build it here, or pass --allow-other-arch")
    return Candidate(c, entry, signer)


def _import(cand: Candidate, key: str, home: Path) -> Artifact:
    """Steps 4-5, under the key lock: download into ``downloads/<key>.part/``, import, remove the
    directory. A download that fails or is stopped leaves only its partial file there (the next
    pull of the key resumes it); anything else in it is removed."""
    from rocmbuild.remote import open_cache
    from rocmbuild.store import bundle  # a download's import only: a cached apply never loads it

    entry = cand.entry
    tmp = downloads_dir(home) / f"{key}.part"
    ok = False
    try:
        with Root.under(home, tmp, "the cache", create=True) as root:  # no link in the cache home followed
            fetched = open_cache(cand.cache).fetch(key, root)
        origin = Provenance(source=cand.cache.url, kind=SUBSTITUTED, bundle_sha256=entry.bundle_sha256,
                            sha256_checked=True, cache=cand.cache.url, signer=cand.signer,
                            imported=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        art = bundle.import_bundle(fetched.bundle, home=home, sha256=entry.bundle_sha256,
                                   signed=(key, entry.manifest), origin=origin)
        ok = True
        return art
    finally:
        _tidy(home, tmp, keep_partial=not ok)


def _tidy(home: Path, tmp: Path, *, keep_partial: bool) -> None:
    """Remove the download directory, or all of it but a partial download (``.part``), through
    the cache home's fd: a link in its place is removed as a link, never followed."""
    rel = os.path.relpath(tmp, home)
    try:
        with Root.under(home, tmp.parent, "the cache") as downloads:
            name = os.path.basename(rel)
            if not keep_partial:
                downloads.rmtree(name)
                return
            with downloads.sub(name) as root:
                for entry in root.listdir():
                    if not entry.endswith(".part"):
                        root.rmtree(entry)
                empty = not root.listdir()
            if empty:
                downloads.rmdir(name)
    except (OSError, RocmbuildError):
        pass


def _pull(cand: Candidate, name: str, key: str, home: Path, wait: bool | LockWait) -> Artifact:
    """``_import`` under the artifact's key lock (one pull of a key per home at a time, and its
    partial file is that pull's alone); a pull that waited finds the artifact already here."""
    with key_lock(home, key, wait=wait):
        art = lookup(key, home)
        if art is not None:
            ui.info(f"{name}: {key[:16]} is here already (another rocmbuild pulled or built it meanwhile; no download)")
            return art
        return _import(cand, key, home)


def substitute(name: str, key: str, home: Path, opts: CacheOptions, *, wait: bool | LockWait = False) -> Artifact | None:
    """The artifact ``key`` of recipe ``name`` from the first cache that holds it and passes every
    check (imported), or None: then it is built here, unless ``--require-cache`` (exit 3)."""
    reasons, fixes = [], []
    for c in caches(opts):
        try:
            cand = candidate(c, key, opts)
            if cand is None:
                reasons.append(f"{c.url}: not there")
                fixes.append(MISSING)
                continue
            art = _pull(cand, name, key, home, wait)
        except (LockedError, ConfinementError):
            raise  # another rocmbuild pulls (or builds) this key here: exit 5, naming it; a link in the home: exit 2
        except RocmbuildError as exc:
            ui.warn(f"{exc.message}; {'not building (--require-cache)' if opts.require else 'trying the next cache or building here'}")
            reasons.append(exc.message)
            fixes.append(_fix_for(c.url, exc))
            continue
        signed = f"signed by {cand.signer}" if cand.signer else "unsigned"
        ui.info(f"{name}: substituted {key[:16]} from {c.url} ({signed}; no configure, no compile)")
        return art
    if opts.require:
        fixes = fixes or ["add a binary cache with --cache URL or [[caches]] in the config"]
        raise FetchError(f"{name}: artifact {key[:16]} is not in the local cache and no binary cache supplied it"
                         + (": " + "; ".join(reasons) if reasons else " (no cache is configured)"),
                         "; ".join(dict.fromkeys(fixes)) + "; or drop --require-cache to build it here",
                         details={"key": key, "reasons": reasons})
    return None


MISSING = "push it from a builder (`rocmbuild push RECIPE --to URL`)"


def _fix_for(url: str, exc: RocmbuildError) -> str:
    """What fixes one cache's failure, by its kind: unreachable, refused (its own hint: trust,
    GPU targets), or anything else."""
    if _unreachable(exc):
        return f"{url} could not be reached: check the URL and the network (or the registry), then run again"
    return exc.hint or MISSING


@dataclass(frozen=True)
class WouldSubstitute:
    """A dry run's answer for one key (``plan``, ``apply --dry-run``): the first cache that would
    serve it (``url``, ``signer``: None when unsigned and let in by ``--allow-unsigned``), the
    caches that could not be reached (``unreachable``), and a note for every cache that would not
    serve it."""

    url: str | None = None
    signer: str | None = None
    unreachable: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _unreachable(exc: RocmbuildError) -> bool:
    """A network failure after the retries (or a server error), not a refusal or a miss."""
    details = exc.details or {}
    return "tries" in details or int(details.get("status") or 0) >= 500


def would_substitute(key: str, opts: CacheOptions) -> WouldSubstitute:
    """Steps 1-3 for each cache in order, nothing downloaded: the registry's manifest (or the
    directory's ``.manifest.json``), the signature and the GPU targets; never the bundle. No
    request at all with ``--offline`` or ``--no-cache``."""
    notes: list[str] = []
    unreachable: list[str] = []
    for c in caches(opts):
        try:
            cand = candidate(c, key, opts)
            if cand is not None:
                return WouldSubstitute(c.url, cand.signer, tuple(unreachable), tuple(notes))
            notes.append(f"{c.url}: artifact {key[:16]} is not there")
        except RocmbuildError as exc:
            if _unreachable(exc):
                unreachable.append(c.url)
            notes.append(exc.message)
    return WouldSubstitute(None, None, tuple(unreachable), tuple(notes))
