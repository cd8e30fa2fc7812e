"""``rocmbuild apply``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("apply", help="build (cached) and swap the library into the target, verified, atomically")
    p.add_argument("recipe", nargs="?", help="recipe name or path to a .toml file")
    src = p.add_argument_group("what to apply instead of a recipe")
    src.add_argument("--artifact", metavar="FILE|URL", help="an artifact bundle from `rocmbuild export`")
    src.add_argument("--sha256", metavar="HEX", help="the bundle's sha256 (default: FILE.sha256 beside it)")
    src.add_argument("--from-lock", metavar="FILE", help="build exactly what a `rocmbuild lock` file pins")
    p.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    a.recipe_options(p)
    a.target(p)
    a.txn_opts(p)
    a.binary_caches(p)
    p.add_argument("--expect", type=a.version, metavar="VERSION", help="the version verification must find (default: the recipe's)")
    p.add_argument("--smoke", action="store_true", help="also run the BatchNorm smoke test on the GPU")
    p.add_argument("--allow-other-arch", action="store_true",
                   help="apply an artifact whose GPU targets do not include this machine's GPU (warns)")
    p.add_argument("--keep", type=a.at_least_one, default=None, metavar="N",
                   help="keep the backups of the newest N transactions (default: the config's keep, else 5); "
                        "older ones are pruned")
    p.add_argument("--allow-outside-prefix", action="store_true",
                   help="allow changing a library the target loads from outside its prefix (e.g. /opt/rocm/lib)")
    p.add_argument("--move-strays", action="store_true",
                   help="move stray libMIOpen.so* files (e.g. a hand-made .backup_system copy) out of the lib dir "
                        "into this transaction's backups instead of refusing; rollback puts them back")


def run(args) -> VerbResult:
    from rocmbuild.flows import apply

    a.check_one_source(args)
    dirs = tuple(args.recipes_dir)
    if args.artifact:
        source: apply.Source = apply.BundleSource(args.artifact, args.sha256)
    elif args.from_lock:
        source = apply.LockSource(args.from_lock, dirs)
    else:
        source = apply.RecipeSource(args.recipe, dirs, a.overrides_from(args))
    options = apply.ApplyOptions(expect=args.expect, smoke=args.smoke, wait=a.lock_wait(args), keep=args.keep,
                                 allow_outside_prefix=args.allow_outside_prefix, probe_timeout=args.probe_timeout,
                                 dry_run=args.dry_run, allow_other_arch=args.allow_other_arch,
                                 caches=a.cache_options(args, allow_other_arch=args.allow_other_arch),
                                 move_strays=args.move_strays)
    return apply.apply(source, apply.TargetSpec(args.env, args.python), options)
