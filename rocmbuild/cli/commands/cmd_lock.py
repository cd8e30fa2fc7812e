"""``rocmbuild lock``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("lock", help="pin a recipe's ref to a commit (with every override) in a lock file")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    p.add_argument("-o", "--output", metavar="FILE", help="the lock file (default: ./<recipe>.lock.json)")
    a.recipe_options(p)


def run(args) -> VerbResult:
    from rocmbuild.flows import export

    return export.lock(args.recipe, args.output, args.recipes_dir, a.overrides_from(args))


# --------------------------------------------------------------------------------------------
# apply / rollback / history / recover (transactions on a target)
