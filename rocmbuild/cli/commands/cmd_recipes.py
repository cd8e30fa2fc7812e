"""``rocmbuild recipes``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
from rocmbuild.errors import RocmbuildError
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("recipes", help="list the recipes found and where")
    a.common(p)
    a.recipe_dirs(p)


def run(args) -> VerbResult:
    from rocmbuild import recipe
    from rocmbuild.results import RecipeEntry, RecipesResult

    rows = []
    for name, path in recipe.available(args.recipes_dir):
        try:
            desc, error = recipe.load(str(path)).description, None
        except RocmbuildError as exc:
            desc, error = "", exc.message
        rows.append(RecipeEntry(name, str(path), desc, error))
    return RecipesResult(tuple(rows), tuple(str(d) for d in recipe.search_path(args.recipes_dir)))
