"""Build once, serve the fleet: ``config list``, ``key generate``, ``push`` and
``cache list --remote`` (docs/caches.md).

Decisions:
* ``push RECIPE`` never builds: it finds the recipe's artifact in the local cache by its key
  (resolving the ref, as ``build`` would) and refuses (exit 2, with the ``build`` command) when
  it is not there; ``push KEY`` takes a built or imported artifact by key (or a unique prefix);
* the cache is ``--to URL``, else the first ``[[caches]]`` entry with ``push = true``; its
  credentials, CA and ``insecure`` come from the config entry with that URL, if any;
* every push is signed, with ``--sign-key FILE`` or ``[sign] key``; without a key the push is
  refused (exit 2): an unsigned artifact is refused by every machine that does not pass
  ``--allow-unsigned``, so uploading one is almost always a mistake;
* a key the cache already holds is not exported or uploaded again (``uploaded: false``,
  ``held_by`` naming who signed what is there, and ``push --force`` in the hint when that is not
  this builder's good signature); ``--force`` replaces the entry (a stuck one: a bundle and a
  signature that do not go together, or a signer the fleet does not trust);
* of two pushes of one key at once one entry wins whole, the bundle and signature of one pusher
  (the backends say how); after its upload a push reads the entry back and compares its
  signature and bundle digest with its own: another's there means it lost (``uploaded: false``,
  exit 0, "got another push's ..., signed by NAME"), never a claim of an upload that is not the
  entry;
* the bundle is exported with rocmbuild.store.bundle's ``export`` into a private temp dir,
  removed afterwards.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Sequence

from rocmbuild import config, ui
from rocmbuild.store import bundle, cache
from rocmbuild.store.artifact import Artifact
from rocmbuild.names import recipe_version
from rocmbuild.errors import InputError
from rocmbuild.flows import build, export
from rocmbuild.home import cache_home
from rocmbuild.recipe import Overrides
from rocmbuild.remote import bundle_manifest, open_cache, trust
from rocmbuild.results import (ConfigListResult, KeyResult, PushResult, RemoteArtifact, RemoteListResult,
                               Setting)


def config_list() -> ConfigListResult:
    cfg = config.load().require(*(name for name, _ in config.SETTINGS))
    settings = []
    for name, attr in config.SETTINGS:
        value = getattr(cfg, attr)
        if name == "caches":
            value = [c.to_json() for c in value]
        elif isinstance(value, tuple):
            value = list(value)
        settings.append(Setting(name, value, cfg.sources.get(name), config.DEFAULTS.get(name, "")))
    return ConfigListResult(cfg.files, tuple(str(p) for p, _ in config.candidates()), tuple(settings))


def key_generate(name: str, out: str) -> KeyResult:
    secret = trust.SecretKey.generate(name)
    path = trust.write_secret(secret, out)
    return KeyResult(secret.name, secret.public().text(), str(path.absolute()))


def _built(what: str, recipes_dirs: Sequence[str], overrides: Overrides) -> Artifact:
    """The artifact ``what`` names, from the local cache only (never built here)."""
    art = export.find_cached(what)
    if art is not None:
        return art
    r = build.load_recipe(what, recipes_dirs, overrides)
    home = cache_home()
    key = cache.cache_key(cache.inputs(r, commit=build.resolve_commit(r), home=home, remember=False))
    art = cache.lookup(key, home)
    if art is None:
        raise InputError(f"{r.name} is not built here (artifact {key[:16]} is not in the local cache)",
                         f"build it first: `rocmbuild build {what}` (with the same options), then push")
    return art


def push_target(to: str | None, cfg: config.Config) -> config.CacheConfig:
    if to:
        return cfg.cache(to)
    for c in cfg.caches:
        if c.push:
            return c
    raise InputError("no cache to push to", "give --to URL, or mark a [[caches]] entry `push = true` in the config")


def push(what: str, to: str | None, sign_key: str | None, recipes_dirs: Sequence[str] = (),
         overrides: Overrides = Overrides(), force: bool = False) -> PushResult:
    cfg = config.load().require("caches", "sign.key")
    target = push_target(to, cfg)
    key_file = sign_key or cfg.sign_key
    if key_file is None:
        raise InputError("no signing key: every pushed artifact is signed",
                         "give --sign-key FILE or set [sign] key in the config (make one with "
                         "`rocmbuild key generate NAME --out FILE`)")
    secret = trust.SecretKey.read(key_file)
    art = _built(what, recipes_dirs, overrides)
    remote = open_cache(target)
    m = art.manifest
    held = None if force else remote.lookup(art.key)
    if held is not None:
        return _already(target.url, art, held, secret, "holds")
    with tempfile.TemporaryDirectory(prefix="rocmbuild-push-") as tmp:
        info = bundle.export(art, Path(tmp) / f"{art.key}.tar.gz")
        path = Path(info.file)
        signature = trust.sign(secret, art.key, bundle_manifest(path), info.sha256)
        uploaded = remote.push(art.key, path, info.sha256, signature, force=force)
    placed = remote.lookup(art.key)  # read back: the entry is this push's, bundle and signature, or another's
    if placed is None or (uploaded and (placed.signature, placed.bundle_sha256) != (signature, info.sha256)):
        uploaded = False
    if not uploaded:
        return _already(target.url, art, placed, secret, "got another push's", meanwhile=True)
    if force:  # the result's text says "pushed"; that it replaced an entry is said here, once
        ui.info(f"replaced the entry for {recipe_version(m.recipe, m.version)} ({art.key[:16]}) in {target.url}")
    return PushResult(target.url, art.key, m.recipe, m.version, True, info.sha256, info.size, secret.name, None)


def _already(url: str, art: Artifact, held, secret: trust.SecretKey, how: str, *, meanwhile: bool = False) -> PushResult:
    """The cache holds the key (before this push, or placed by another push meanwhile): nothing of
    this push is the entry. Says who signed what is there, and how to replace it."""
    m = art.manifest
    signer = trust.signer_of(held.signature) if held is not None else None
    by = f"signed by {signer}" if signer else "unsigned, or its signature unreadable"
    fix = "" if signer == secret.name and _verifies(held, secret) else \
        f" (`rocmbuild push --force` replaces it, signed by {secret.name})"
    when = " meanwhile" if meanwhile else ""
    say = ui.warn if fix or meanwhile else ui.info  # not this builder's good entry: said even with --json
    say(f"{url} {how} {recipe_version(m.recipe, m.version)} ({art.key[:16]}){when}, {by}: nothing uploaded{fix}")
    return PushResult(url, art.key, m.recipe, m.version, False, None, None, None, signer or None)


def _verifies(entry, secret: trust.SecretKey) -> bool:
    """Whether ``entry``'s signature is good under ``secret``'s own public key (an entry of
    this builder that needs no replacing)."""
    try:
        trust.check("", entry.key, entry.manifest, entry.bundle_sha256, entry.signature,
                    {secret.name: secret.public()})
        return True
    except trust.UntrustedError:
        return False


def remote_list(url: str) -> RemoteListResult:
    cfg = config.load().require("caches", "trust.public_keys")
    trusted = trust.trusted_keys(cfg.public_keys)
    rows = []
    for e in open_cache(cfg.cache(url)).list():
        try:
            signer = trust.check(url, e.key, e.manifest, e.bundle_sha256, e.signature, trusted)
        except trust.UntrustedError:
            signer = None
        i = e.info()
        rows.append(RemoteArtifact(e.key, i["recipe"], i["version"], i["gpu_targets"], e.size, e.bundle_sha256,
                                   trust.signer_of(e.signature), signer is not None))
    return RemoteListResult(url, tuple(rows))
