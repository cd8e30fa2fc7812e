"""``build --check``: rebuild a cached artifact's inputs from zero, beside the cache, and say which
files differ.

Decisions: the rebuild runs in ``build/.check-<key>-<pid>/`` (the same depth as ``build/<key>``:
a launcher's ``CCACHE_BASEDIR`` turns paths relative to the build tree, so the same depth names
the sources alike), its install staged inside it, and the whole directory is removed afterwards,
whatever happened (a killed check's directory is removed by the next check of that key, or by
``cache gc``). The launcher is the one a build would use, with its cache bypassed
(``CCACHE_RECACHE``, ``SCCACHE_RECACHE``: every object is compiled again, so a compiler cache
cannot hide a difference). The cached artifact is only read: its manifest is what the rebuild
is compared with (after ``cache.check_untampered``: a cached file changed on disk is
quarantined, exit 3, as before any use). Compared per path: the kind (file or link), a file's
sha256 and size, a link's text; modes and times are not compared (the bundle normalizes them).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmbuild import ui
from rocmbuild.builder import pipeline
from rocmbuild.store.artifact import scan_tree
from rocmbuild.store.cache import Inputs
from rocmbuild.store.manifest import FileEntry
from rocmbuild.errors import BuildError
from rocmbuild.home import build_dir as build_root
from rocmbuild.recipe.model import Recipe

if TYPE_CHECKING:
    from rocmbuild.sources.source import Checkout

#: what bypasses each launcher's cache for the rebuild (compile again, store the result)
RECACHE = (("CCACHE_RECACHE", "1"), ("SCCACHE_RECACHE", "1"))
PREFIX = ".check-"


class NotReproducible(BuildError):
    """The rebuild differs from the cached artifact (exit 3, like a failed build; the report is
    kept beside it: ``results.CheckResult``)."""


@dataclass(frozen=True)
class Difference:
    """One path whose cached and rebuilt forms differ (None: absent on that side)."""

    path: str
    cached: FileEntry | None
    rebuilt: FileEntry | None

    @staticmethod
    def _side(e: FileEntry | None) -> dict[str, Any] | None:
        if e is None:
            return None
        if e.type == "link":
            return {"type": "link", "target": e.target, "sha256": None, "size": None}
        return {"type": e.type, "target": None, "sha256": e.sha256, "size": e.size}

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "cached": self._side(self.cached), "rebuilt": self._side(self.rebuilt)}


def _same(a: FileEntry, b: FileEntry) -> bool:
    if a.type != b.type:
        return False
    if a.type == "link":
        return a.target == b.target
    return a.sha256 == b.sha256 and a.size == b.size


def compare(cached: tuple[FileEntry, ...], rebuilt: tuple[FileEntry, ...]) -> tuple[Difference, ...]:
    """Every path whose entry differs, or that only one side has, sorted by path."""
    a = {e.path: e for e in cached}
    b = {e.path: e for e in rebuilt}
    out = []
    for path in sorted(a.keys() | b.keys()):
        x, y = a.get(path), b.get(path)
        if x is None or y is None or not _same(x, y):
            out.append(Difference(path, x, y))
    return tuple(out)


def check_dir(home: Path, key: str) -> Path:
    """This process's rebuild directory for ``key`` (nothing is created)."""
    return build_root(home) / f"{PREFIX}{key}-{os.getpid()}"


def remove_stale(home: Path, key: str) -> None:
    """Remove the rebuild directories of earlier checks of ``key`` (call under the key lock)."""
    root = build_root(home)
    for stale in root.glob(f"{PREFIX}{key}-*") if root.is_dir() else ():
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


def rebuild(recipe: Recipe, checkout: Checkout, *, home: Path, key: str, inp: Inputs,
            log: Path) -> tuple[FileEntry, ...]:
    """Build ``checkout`` from zero in :func:`check_dir` and return every file of its install
    tree (as :func:`scan_tree` lists them); the directory is removed before this returns or raises."""
    work = check_dir(home, key)
    use = pipeline.launcher(recipe, home)
    if use.path is not None:
        use = replace(use, env=use.env + RECACHE)
    try:
        tree = pipeline.rebuild_into(recipe, checkout, work, home=home, inp=inp, log=log, use=use)
        return scan_tree(tree)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if work.exists():
            ui.warn(f"could not remove the rebuild directory {work}; `rocmbuild cache gc` removes it")
