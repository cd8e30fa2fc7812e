"""``rocmbuild doctor``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
from rocmbuild.errors import InputError
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("doctor", help="preflight checks: tools, ROCm, GPU, disk, target, a recipe's requirements")
    p.add_argument("recipe", nargs="?", help="also check this recipe's [requires]")
    a.common(p)
    a.recipe_dirs(p)
    a.target(p)
    a.overrides(p)  # -D turns a requirement's `when` define on or off, as for build
    p.add_argument("--require-cache", action="store_true",
                   help="judge a host that never compiles (it only takes built artifacts from a cache, as "
                        "`apply --require-cache`): compilers, cmake and ROCm are not needed there")


def run(args) -> VerbResult:
    from rocmbuild import doctor
    from rocmbuild import recipe
    from rocmbuild.results import DoctorResult

    ov = a.overrides_from(args)
    if not args.recipe and ov.as_dict():
        raise InputError(f"{', '.join(ov.as_dict())}: build overrides need a recipe",
                         "name the recipe: rocmbuild doctor RECIPE -D NAME=VALUE")
    r = recipe.apply_overrides(recipe.load(args.recipe, args.recipes_dir), ov) if args.recipe else None
    return DoctorResult(tuple(doctor.run(r, args.env, args.python, timeout=args.probe_timeout,
                                         cache_only=args.require_cache)))


# --------------------------------------------------------------------------------------------
# export / lock
