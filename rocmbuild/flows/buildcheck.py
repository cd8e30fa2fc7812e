"""``rocmbuild build --check RECIPE``: is the cached artifact what its inputs build?

recipe.load -> overrides -> (ls-remote) key -> the cached artifact (built here, or substituted
from a binary cache; none: exit 2, nothing fetched or built) -> requirements -> under the source
lock, fetch -> under the artifact's key lock, rebuild from zero beside the cache
(builder/rebuild.py) -> compare every path -> ``CheckResult`` (identical: exit 0; different: exit 3,
the differing paths with both sha256 and sizes).

Decisions: only the local cache is asked (no binary cache is looked up: the check is of what
this machine would serve; substitute first with ``rocmbuild build``); the key lock is held for
the rebuild, so ``cache gc`` cannot remove the artifact meanwhile, while ``build`` and ``apply``
of the key (a cache hit, no lock) go on; a ref that moved during the fetch checks the artifact
of the commit really fetched (none cached: exit 2). The rebuild writes a log of its own
(``logs/<key>-<time>.log``, which becomes the key's newest log).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from rocmbuild import progress, ui
from rocmbuild.store import cache
from rocmbuild.builder import rebuild, logs
from rocmbuild.sources import source
from rocmbuild.store.artifact import Artifact
from rocmbuild.store.provenance import origin
from rocmbuild.errors import InputError
from rocmbuild.flows import build
from rocmbuild.home import cache_home
from rocmbuild.fs.locks import LockWait
from rocmbuild.recipe import Overrides, Recipe
from rocmbuild.results import CheckResult


def _cached(r: Recipe, key: str, home: Path) -> Artifact:
    art = cache.lookup(key, home)
    if art is None:
        raise InputError(
            f"{r.name}: no cached artifact to check against (key {key[:16]}): `build --check` compares a "
            "rebuild with the artifact this machine has",
            f"run `rocmbuild build {r.name}` first (it builds the artifact, or substitutes it from a binary "
            f"cache), then `rocmbuild build --check {r.name}`",
            details={"recipe": r.name, "key": key})
    return art


def check_recipe(r: Recipe, *, wait: bool | LockWait = False) -> CheckResult:
    """Rebuild the cached artifact of ``r`` from zero and compare (see the module notes)."""
    start = time.monotonic()
    home = cache_home()
    commit = build.resolve_commit(r)
    inp = cache.inputs(r, commit=commit, home=home)
    key = cache.cache_key(inp)
    art = _cached(r, key, home)
    build.require(r)
    with source.source_lock(r, home=home, wait=wait):
        log = logs.start(home, key, f"# rocmbuild build --check of {r.name} ({key})", r.name)
        with progress.phase("fetch", f"fetching {r.name}"):
            checkout = source.fetch(r, home=home, log=log, locked=True)
        if checkout.commit != commit:  # the ref moved: check what was really fetched
            inp = cache.inputs(r, commit=checkout.commit, home=home)
            key = cache.cache_key(inp)
            art = _cached(r, key, home)
        with cache.key_lock(home, key, wait=wait):
            cache.check_untampered(art)  # a cached file changed on disk: quarantined, exit 3
            rebuild.remove_stale(home, key)
            ui.info(f"rebuilding {r.name} from zero to compare with the cached artifact {key[:16]} "
                    "(the cache is not touched)")
            rebuilt = rebuild.rebuild(r, checkout, home=home, key=key, inp=inp, log=log)
    paths = {f.path for f in art.manifest.files} | {f.path for f in rebuilt}
    differences = rebuild.compare(art.manifest.files, rebuilt)
    return CheckResult(recipe=r.name, key=key, artifact=str(art.path), substituted=origin(art.path),
                       compared=len(paths), differences=differences, duration_s=time.monotonic() - start,
                       log=str(log))


def check_result(name: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides(), *,
                 wait: bool | LockWait = False) -> CheckResult:
    """``rocmbuild build --check``."""
    return check_recipe(build.load_recipe(name, recipes_dirs, overrides), wait=wait)
