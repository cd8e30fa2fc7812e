"""Helpers for the transaction tests: a session-wide artifact cache, CLI runs, target snapshots.

* ``txn_world`` (session): a ROCMBUILD_HOME with real artifacts built ONCE per session by the real
  ``workflow.build`` from recipes pointing at the fixture monorepo (``file://``):
  ``mini`` (tag rocm-7.1.0: 3.5.1), ``mini-fix`` (feature/fix: 3.5.1, marker "fixed"),
  ``mini-develop`` (develop: 3.6.0, incompatible with a torch compiled against 3.5).
  Later ``rocmbuild apply <recipe>`` runs in these tests are cache hits.
* ``txn_home`` (per test): points ``ROCMBUILD_HOME`` at that session home (the autouse fixture in
  conftest gives every test its own empty home; building there would cost a cmake run per test).
  The artifact files are hardlinked into the targets by apply: tests must never write a target
  file in place (they simulate a clobbering update with a rename, as package managers do).
* :func:`snapshot`: every path under ``prefix/lib`` and ``prefix/share`` (``__pycache__`` and the
  python stdlib links skipped) -> (type, sha256, mode, link target), and :func:`inodes` for the
  identity of regular files.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

RECIPE = """
name = "{name}"
[source]
git = "{url}"
ref = "{ref}"
subdir = "projects/miopen"
version = {{ file = "CMakeLists.txt", regex = 'rocm_setup_version\\(VERSION ([0-9.]+)' }}
[build]
jobs = 2
[install]
libraries = ["libMIOpen"]
data = ["share/miopen/db"]
[verify]
version = "source"
"""

RECIPES = {"mini": "rocm-7.1.0", "mini-fix": "feature/fix", "mini-develop": "develop"}


class World:
    def __init__(self, home: Path, recipes: Path, artifacts: dict) -> None:
        self.home = home
        self.recipes = recipes
        self.artifacts = artifacts

    def recipe(self, name: str) -> str:
        return str(self.recipes / f"{name}.toml")


@pytest.fixture(scope="session")
def txn_world(_monorepo_template, tmp_path_factory) -> World:
    from rocmbuild.flows import build as workflow

    home = tmp_path_factory.mktemp("txn-home")
    rdir = tmp_path_factory.mktemp("txn-recipes")
    old = os.environ.get("ROCMBUILD_HOME")
    os.environ["ROCMBUILD_HOME"] = str(home)
    arts = {}
    try:
        for name, ref in RECIPES.items():
            p = rdir / f"{name}.toml"
            p.write_text(RECIPE.format(name=name, url=_monorepo_template.url, ref=ref))
            arts[name] = workflow.build(str(p))
    finally:
        if old is None:
            os.environ.pop("ROCMBUILD_HOME", None)
        else:
            os.environ["ROCMBUILD_HOME"] = old
    return World(home, rdir, arts)


@pytest.fixture
def txn_home(txn_world, monkeypatch) -> World:
    monkeypatch.setenv("ROCMBUILD_HOME", str(txn_world.home))
    return txn_world


def rb(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -m rocmbuild ARGS`` as a real process (the live environment + ``env``)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "rocmbuild", *map(str, args)], capture_output=True, text=True,
                          env=e, cwd=str(REPO), timeout=timeout)


def _walk(prefix: Path):
    for top in (prefix / "lib", prefix / "share"):
        if not top.exists():
            continue
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
                yield Path(root) / name
            for d in dirs:
                yield Path(root) / d


def snapshot(prefix: Path) -> dict[str, tuple]:
    """path (relative to prefix) -> (type, sha256, mode, link target)."""
    out = {}
    for p in _walk(Path(prefix)):
        st = os.lstat(p)
        rel = str(p.relative_to(prefix))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", None, None, os.readlink(p))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(st.st_mode), None)
        else:
            out[rel] = ("dir", None, stat.S_IMODE(st.st_mode), None)
    return out


def inodes(prefix: Path) -> dict[str, tuple[int, int]]:
    """regular file (relative) -> (device, inode)."""
    out = {}
    for p in _walk(Path(prefix)):
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            out[str(p.relative_to(prefix))] = (st.st_dev, st.st_ino)
    return out


def full_listing(prefix: Path) -> dict[str, tuple]:
    """Every path under the prefix (incl. .rocmbuild) -> (inode, mtime_ns, size): "touched nothing"."""
    out = {}
    for root, dirs, files in os.walk(prefix):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files + dirs:
            p = os.path.join(root, name)
            st = os.lstat(p)
            out[os.path.relpath(p, prefix)] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out
