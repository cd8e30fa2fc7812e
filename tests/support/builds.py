"""Artifacts of the fixture project without git: a plain copy as the checkout, the real build.

For tests of the build, the artifact and the bundle that do not need a fetch: the "checkout"
is a copy of ``tests/fixtures/miopen`` with the fields ``pipeline.build`` reads, and the recipe
is the fixture recipe with no ``subdir`` (the copy is the project itself).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

from rocmbuild.builder import pipeline
from rocmbuild.store import cache
from rocmbuild.home import cache_home
from rocmbuild import recipe
from tests.support.project import MIOPEN_SRC, set_version
from tests.support.recipes import fixture_recipe


def make_recipe(tmp_path: Path, generator: str = "Unix Makefiles", defines: dict | None = None) -> recipe.Recipe:
    """The fixture recipe (``jobs = 2``, no subdir) written to ``tmp_path/mini.toml`` and loaded."""
    p = tmp_path / "mini.toml"
    p.write_text(fixture_recipe(subdir=None, generator=generator, jobs=2, defines=defines))
    return recipe.load(str(p))


def make_checkout(tmp_path: Path, version: str = "3.5.1") -> SimpleNamespace:
    src = tmp_path / "checkout"
    shutil.copytree(MIOPEN_SRC, src)
    set_version(src, version)
    return SimpleNamespace(root=src, source_dir=src, url="file:///unused", ref="develop",
                           commit="a" * 40, version=version, patches=(), cherry_picks=(), tarball_sha256=None, fixes=())


def do_build(r, co):
    """``pipeline.build`` of ``co`` in the current ``ROCMBUILD_HOME``: (artifact, home, key)."""
    home = cache_home()
    inp = cache.inputs(r, commit=co.commit, home=home)
    key = cache.cache_key(inp)
    return pipeline.build(r, co, home=home, key=key, inp=inp), home, key
