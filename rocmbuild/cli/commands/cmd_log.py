"""``rocmbuild log``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("log", help="print the newest build log of a recipe (--list: every log; --follow: as it grows)")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--list", action="store_true", help="list its logs, oldest first, instead")
    g.add_argument("-f", "--follow", action="store_true", help="print the newest log as it is written, until its build ends")
    a.common(p)
    a.recipe_dirs(p)


def run(args) -> VerbResult:
    from rocmbuild.flows import logview

    return logview.log(args.recipe, args.recipes_dir, list_only=args.list, follow=args.follow and not args.json)
