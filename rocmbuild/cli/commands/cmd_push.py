"""``rocmbuild push``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("push", help="upload a built artifact, signed, to a binary cache (oci://, file://)")
    p.add_argument("what", metavar="RECIPE|KEY", help="a recipe already built here, or an artifact key")
    p.add_argument("--to", metavar="URL", help="the cache (default: the [[caches]] entry with push = true)")
    p.add_argument("--sign-key", metavar="FILE", help="the secret key to sign with (default: [sign] key)")
    p.add_argument("--force", action="store_true",
                   help="replace the entry the cache holds for the key (one another key signed, or a stuck one)")
    a.recipe_options(p)


def run(args) -> VerbResult:
    from rocmbuild.flows import fleet

    return fleet.push(args.what, args.to, args.sign_key, args.recipes_dir, a.overrides_from(args), force=args.force)
