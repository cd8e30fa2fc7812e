"""The session's build world: a ``ROCMBUILD_HOME`` holding real artifacts of the fixture project.

Built once per session by the real ``workflow.build`` from recipes that point at the fixture
monorepo (``file://``), so that every later ``build`` or ``apply`` of those recipes is a cache
hit instead of a cmake run per test. Targets get their own copies of the artifact files (never
the cache's inode), so a test may write a target file in place; a test that tampers with the
cache itself works on a private copy of it (``own_home`` in test_cache_immutable.py). The pytest fixtures over it (``txn_world``, ``txn_home``) are
in tests/conftest.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tests.support.recipes import write_fixture_recipe

# recipe name -> ref of the fixture monorepo: 3.5.1 (tag), 3.5.1 with marker "fixed", 3.6.0
# (develop: incompatible with a torch compiled against 3.5)
RECIPES = {"mini": "rocm-7.1.0", "mini-fix": "feature/fix", "mini-develop": "develop"}


@dataclass(frozen=True)
class World:
    home: Path
    recipes: Path
    artifacts: dict

    def recipe(self, name: str) -> str:
        return str(self.recipes / f"{name}.toml")


def build_world(home: Path, recipes: Path, url: str) -> World:
    """Write the :data:`RECIPES` for the monorepo at ``url`` into ``recipes`` and build each into
    ``home`` (``ROCMBUILD_HOME`` is set for the builds and restored after)."""
    from rocmbuild.flows import build as workflow

    old = os.environ.get("ROCMBUILD_HOME")
    os.environ["ROCMBUILD_HOME"] = str(home)
    arts = {}
    try:
        for name, ref in RECIPES.items():
            arts[name] = workflow.build(str(write_fixture_recipe(recipes, name, url=url, ref=ref, jobs=2)))
    finally:
        if old is None:
            os.environ.pop("ROCMBUILD_HOME", None)
        else:
            os.environ["ROCMBUILD_HOME"] = old
    return World(home, recipes, arts)
