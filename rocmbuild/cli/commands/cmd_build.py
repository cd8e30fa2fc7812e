"""``rocmbuild build``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("build", help="fetch, patch, configure, build and stage an artifact")
    p.add_argument("recipe", nargs="?", help="recipe name or path to a .toml file")
    p.add_argument("--from-lock", metavar="FILE", help="build exactly what a `rocmbuild lock` file pins")
    p.add_argument("--check", action="store_true",
                   help="rebuild from zero beside the cache and say which files differ from the cached artifact "
                   "(exit 0: identical, 3: different, 2: nothing cached to check)")
    a.recipe_options(p)
    a.waiting(p)
    a.binary_caches(p)


def run(args) -> VerbResult:
    from rocmbuild.flows import build, export

    a.check_one_source(args)
    if args.from_lock:
        name, overrides = export.from_lock(args.from_lock, args.recipes_dir)
    else:
        name, overrides = args.recipe, a.overrides_from(args)
    if args.check:
        from rocmbuild.flows import buildcheck

        return buildcheck.check_result(name, args.recipes_dir, overrides, wait=a.lock_wait(args))
    return build.build_result(name, args.recipes_dir, overrides, wait=a.lock_wait(args), caches=a.cache_options(args))


# --------------------------------------------------------------------------------------------
# status / verify / doctor (read-only: they never change the target)
