"""Build once, apply everywhere: bundles and lock files.

* ``export RECIPE|KEY -o FILE`` -- the artifact of a recipe (built or taken from the cache) or of
  a cache key (full, or a unique prefix of at least 8 hex digits), as a bundle with a sha256.
* ``lock`` / ``--from-lock`` -- a recipe's ref pinned to a commit, with every override
  (:mod:`rocmbuild.recipe.lockfile`). Applying a bundle is :mod:`rocmbuild.flows.apply`'s story.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from rocmbuild import ui
from rocmbuild.store import cache
from rocmbuild.store import bundle
from rocmbuild.store.artifact import Artifact
from rocmbuild.fs.disk import read_json
from rocmbuild.errors import ArtifactError, InputError
from rocmbuild.flows import build
from rocmbuild.home import cache_home
from rocmbuild.fs.locks import LockWait
from rocmbuild.recipe import lockfile
from rocmbuild.recipe import Overrides
from rocmbuild.results import ExportResult, LockResult

_HEX = re.compile(r"^[0-9a-f]{8,64}$")


def find_cached(key_prefix: str) -> Artifact | None:
    """The cached artifact whose key starts with ``key_prefix`` (None if not a key): a built one,
    else an imported one (exporting an imported key is allowed: the bundle carries the same
    manifest, and whoever imports it checks every file again)."""
    if not _HEX.match(key_prefix):
        return None
    home = cache_home()
    dirs = [d for d in cache.entries(home) if d.name.startswith(key_prefix)]
    keys = sorted({d.name for d in dirs})
    if len(keys) > 1:
        raise InputError(f"artifact key prefix {key_prefix} is ambiguous: {', '.join(m[:16] for m in keys)}",
                         "give more digits of the key")
    if not keys:
        return None
    art = cache.lookup(keys[0], home) or cache.lookup_imported(keys[0], home)
    if art is None:
        raise ArtifactError(f"cached artifact {keys[0]} is damaged (its manifest, identity or files do not hold) "
                            "and was set aside", "build it again (or import its bundle again)")
    return art


def export(what: str, out: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides(), *,
           wait: bool | LockWait = False) -> ExportResult:
    art = find_cached(what) or build.build(what, recipes_dirs, overrides, wait=wait)
    info = bundle.export(art, out)  # a string: a trailing slash means a directory
    return ExportResult(info)


def lock(name: str, out: str | None, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides()) -> LockResult:
    r = build.load_recipe(name, recipes_dirs, overrides, resolve_auto=False)
    commit = build.resolve_commit(r)
    data = lockfile.create(name, recipes_dirs, overrides, commit)
    path = Path(out) if out else Path.cwd() / f"{data.recipe}.lock.json"
    old = _old_lock(path)
    if old is not None and replace(old, created="") == replace(data, created=""):
        return LockResult(str(path), old, rewritten=False)  # the same pins: the file is left as it is
    lockfile.write(data, path)
    return LockResult(str(path), data)


def _old_lock(path: Path) -> lockfile.Lock | None:
    """The lock file already at ``path`` (None: none, or one its schema refuses: it is written anew)."""
    try:
        return lockfile.Lock.from_json(read_json(path), path)
    except (OSError, ValueError, RecursionError):
        return None


def from_lock(path: str, recipes_dirs: Sequence[str] = ()) -> tuple[str, Overrides]:
    """(recipe name, overrides) a lock file pins."""
    name, ov, data = lockfile.load(path, recipes_dirs)
    ui.info(f"using lock {path}: {data.recipe} at {data.commit or 'tarball'}")
    return name, ov
