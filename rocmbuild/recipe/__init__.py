"""Recipes: the model, parsing and validation, the search path, overrides and lock files.

The package's names for callers: ``recipe.load(name) -> Recipe`` and friends, re-exported here
from the modules that hold them (:mod:`.model`, :mod:`.parsing`, :mod:`.search`, :mod:`.overrides`).
"""

from rocmbuild.recipe.search import available, bundled_dir, find, load, search_path
from rocmbuild.recipe.model import Build, Install, Recipe, Requires, Source, Verify, VersionSpec
from rocmbuild.recipe.overrides import Overrides, apply_overrides, resolve_gpu_targets
from rocmbuild.recipe.parsing import parse, split_requirement

__all__ = [
    "Build", "Install", "Overrides", "Recipe", "Requires", "Source", "Verify", "VersionSpec",
    "apply_overrides", "available", "bundled_dir", "find", "load", "parse", "resolve_gpu_targets",
    "search_path", "split_requirement",
]
