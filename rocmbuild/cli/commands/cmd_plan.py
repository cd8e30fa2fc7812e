"""``rocmbuild plan``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("plan", help="show what build/apply would run, changing nothing")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    a.recipe_options(p)
    p.add_argument("--offline", action="store_true", help="do not contact the remote to resolve the ref, nor any cache")
    p.add_argument("--cache", dest="caches", action="append", default=[], metavar="URL",
                   help="also ask this binary cache whether it would substitute the artifact (repeatable)")
    p.add_argument("--no-cache", action="store_true", help="do not ask any binary cache (it would be built here)")
    p.add_argument("--allow-unsigned", action="store_true", help="count an unsigned artifact as substitutable")


def run(args) -> VerbResult:
    from rocmbuild.flows import build
    from rocmbuild.flows.substitute import CacheOptions

    caches = CacheOptions(urls=tuple(args.caches), offline=args.offline, no_cache=args.no_cache,
                          allow_unsigned=args.allow_unsigned)
    return build.build_plan(args.recipe, args.recipes_dir, a.overrides_from(args), offline=args.offline, caches=caches)
