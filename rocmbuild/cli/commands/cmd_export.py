"""``rocmbuild export``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("export", help="write an artifact bundle (.tar.gz + .sha256) to apply on other machines")
    p.add_argument("what", metavar="RECIPE|KEY", help="a recipe (built or taken from the cache) or an artifact key")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the bundle to write (.tar.gz), or a directory")
    a.recipe_options(p)
    a.waiting(p)


def run(args) -> VerbResult:
    from rocmbuild.flows import export

    return export.export(args.what, args.output, args.recipes_dir, a.overrides_from(args), wait=a.lock_wait(args))
