"""The verbs: one ``_add_<verb>`` (its arguments) / ``_cmd_<verb>`` (parsed arguments -> a result
from rocmbuild.results) pair each, listed once in :data:`VERBS` (the order of ``--help``).

A ``_cmd_`` only turns arguments into a flow call; the work is in rocmbuild.flows (or doctor),
the text in render.py, exit codes and the JSON envelope in app.py.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, Callable

from rocmbuild.cli import args as a
from rocmbuild.cli import cacheverbs, fleetverbs
from rocmbuild.errors import InputError, RocmbuildError
if TYPE_CHECKING:  # the results tree is imported by the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def _add_recipes(sub) -> None:
    p = sub.add_parser("recipes", help="list the recipes found and where")
    a.common(p)
    a.recipe_dirs(p)


def _cmd_recipes(args) -> VerbResult:
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


def _add_show(sub) -> None:
    p = sub.add_parser("show", help="show a recipe as rocmbuild understands it")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    a.recipe_options(p)


def _cmd_show(args) -> VerbResult:
    from rocmbuild import recipe
    from rocmbuild.sources.fixes import where_searched
    from rocmbuild.sources.tarball import source_package
    from rocmbuild.home import cache_home
    from rocmbuild.results import ShowResult

    ov = a.overrides_from(args)
    r = recipe.apply_overrides(recipe.load(args.recipe, args.recipes_dir), ov)
    package = source_package(r.source.archive, r.source.sha256, cache_home()) if r.build.prebuilt else None
    return ShowResult(r.name, str(r.path), r.description, r.canonical(), tuple(str(p) for p in r.patch_files),
                      r.path.read_text(), tuple(f.name for f in r.source.contains), where_searched(r),
                      _overridden(r, ov), package)


def _overridden(r, ov) -> tuple[str, ...]:
    """The settings the command line changed, as ``key = value`` with the value now in effect (the
    text shows the file as written, then these; the JSON's recipe has them applied)."""
    out = [f"source.ref = {_toml(r.source.ref)}"] if ov.ref is not None else []
    if ov.source is not None:
        out.append(f"source.{'git' if r.source.git else 'archive'} = {_toml(r.source.url)}")
    names = [d.split("=", 1)[0].strip() for d in ov.defines] + (["GPU_TARGETS"] if ov.gpu_targets else [])
    out += [f"build.defines.{n} = {_toml(r.build.define(n))}" for n in dict.fromkeys(names)]
    out += [f"build.jobs = {r.build.jobs}"] if ov.jobs is not None else []
    return tuple(out + ([f"build.launcher = {_toml(r.build.launcher)}"] if ov.launcher is not None else []))


def _toml(value) -> str:
    return json.dumps(value)  # a string, number, bool or list of strings reads as in TOML


def _add_plan(sub) -> None:
    p = sub.add_parser("plan", help="show what build/apply would run, changing nothing")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    a.recipe_options(p)
    p.add_argument("--offline", action="store_true", help="do not contact the remote to resolve the ref, nor any cache")
    p.add_argument("--cache", dest="caches", action="append", default=[], metavar="URL",
                   help="also ask this binary cache whether it would substitute the artifact (repeatable)")
    p.add_argument("--no-cache", action="store_true", help="do not ask any binary cache (it would be built here)")
    p.add_argument("--allow-unsigned", action="store_true", help="count an unsigned artifact as substitutable")


def _cmd_plan(args) -> VerbResult:
    from rocmbuild.flows import build
    from rocmbuild.flows.substitute import CacheOptions

    caches = CacheOptions(urls=tuple(args.caches), offline=args.offline, no_cache=args.no_cache,
                          allow_unsigned=args.allow_unsigned)
    return build.build_plan(args.recipe, args.recipes_dir, a.overrides_from(args), offline=args.offline, caches=caches)


def _add_build(sub) -> None:
    p = sub.add_parser("build", help="fetch, patch, configure, build and stage an artifact")
    p.add_argument("recipe", nargs="?", help="recipe name or path to a .toml file")
    p.add_argument("--from-lock", metavar="FILE", help="build exactly what a `rocmbuild lock` file pins")
    p.add_argument("--check", action="store_true",
                   help="rebuild from zero beside the cache and say which files differ from the cached artifact "
                   "(exit 0: identical, 3: different, 2: nothing cached to check)")
    a.recipe_options(p)
    a.waiting(p)
    a.binary_caches(p)


def _cmd_build(args) -> VerbResult:
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


def _add_status(sub) -> None:
    p = sub.add_parser("status", help="what the target environment loads now")
    a.common(p)
    a.target(p)
    p.add_argument("--hash", action="store_true", help="also sha256 each loaded library (slow for 1 GiB files)")
    p.add_argument("--check", action="store_true",
                   help="a health check: exit 4 on DRIFT (what the target loads is not what rocmbuild's history "
                        "says is in place) or an unfinished transaction; without it status reports them and exits 0")


def _cmd_status(args) -> VerbResult:
    from rocmbuild.flows import manage

    return manage.status(env=args.env, python=args.python, probe_timeout=args.probe_timeout, want_hash=args.hash,
                         check=args.check)


def _add_verify(sub) -> None:
    p = sub.add_parser("verify", help="check what the target loads: one library, expected version, compatible, "
                                      "what rocmbuild placed (no DRIFT)")
    a.common(p)
    a.target(p)
    p.add_argument("--expect", type=a.version, metavar="VERSION", help="the library version that must be loaded, e.g. 3.5.1")
    p.add_argument("--expect-file", metavar="PATH", action="append",
                   help="the loaded library must be this very file (same device and inode); repeat it for "
                        "every file of a library set")
    p.add_argument("--smoke", action="store_true",
                   help="run the smoke suite on the GPU (skipped without one; ROCMBUILD_SMOKE_DEVICE=cpu: on the CPU)")
    p.add_argument("--hash", action="store_true", help="also sha256 each loaded library")
    p.add_argument("--encoding", choices=["miopen", "cudnn"], default=None,
                   help="how to decode the version integer (default: the library's, else the torch's backend)")
    p.add_argument("--library", default=None, metavar="NAME",
                   help="library file stem, or a set as a glob (default: libMIOpen for a ROCm torch, libcudnn* for CUDA)")


def _cmd_verify(args) -> VerbResult:
    from rocmbuild.flows import manage

    return manage.verify(env=args.env, python=args.python, probe_timeout=args.probe_timeout, want_hash=args.hash,
                         smoke=args.smoke, library=args.library, encoding=args.encoding, expect=args.expect,
                         expect_file=args.expect_file)


def _add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="preflight checks: tools, ROCm, GPU, disk, target, a recipe's requirements")
    p.add_argument("recipe", nargs="?", help="also check this recipe's [requires]")
    a.common(p)
    a.recipe_dirs(p)
    a.target(p)
    a.overrides(p)  # -D turns a requirement's `when` define on or off, as for build
    p.add_argument("--require-cache", action="store_true",
                   help="judge a host that never compiles (it only takes built artifacts from a cache, as "
                        "`apply --require-cache`): compilers, cmake and ROCm are not needed there")


def _cmd_doctor(args) -> VerbResult:
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


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="write an artifact bundle (.tar.gz + .sha256) to apply on other machines")
    p.add_argument("what", metavar="RECIPE|KEY", help="a recipe (built or taken from the cache) or an artifact key")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the bundle to write (.tar.gz), or a directory")
    a.recipe_options(p)
    a.waiting(p)


def _cmd_export(args) -> VerbResult:
    from rocmbuild.flows import export

    return export.export(args.what, args.output, args.recipes_dir, a.overrides_from(args), wait=a.lock_wait(args))


def _add_lock(sub) -> None:
    p = sub.add_parser("lock", help="pin a recipe's ref to a commit (with every override) in a lock file")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    p.add_argument("-o", "--output", metavar="FILE", help="the lock file (default: ./<recipe>.lock.json)")
    a.recipe_options(p)


def _cmd_lock(args) -> VerbResult:
    from rocmbuild.flows import export

    return export.lock(args.recipe, args.output, args.recipes_dir, a.overrides_from(args))


# --------------------------------------------------------------------------------------------
# apply / rollback / history / recover (transactions on a target)


def _add_apply(sub) -> None:
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


def _cmd_apply(args) -> VerbResult:
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


def _add_rollback(sub) -> None:
    p = sub.add_parser("rollback", help="undo the newest apply in effect (or go back to the state after --to N), verified")
    a.common(p)
    a.target(p)
    a.txn_opts(p)
    p.add_argument("--to", metavar="TXN", help="bring back the state right after transaction TXN (like conda's "
                   "--revision N: TXN stays in effect, every apply after it is undone); TXN is its number (3), id or "
                   "a prefix of the id; 0 (or stock) is the state before rocmbuild's first transaction")
    p.add_argument("--undo", metavar="TXN", help="bring back the state right before the apply TXN (it and every "
                   "apply after it undone; what a rollout undoes its own apply with, TXN from its JSON)")
    p.add_argument("--force", action="store_true", help="roll back even over files changed since (drift)")
    p.add_argument("--if-applied", action="store_true",
                   help="when nothing is in effect to undo, succeed (exit 0, nothing_to_roll_back) instead of exit 2")
    p.add_argument("--keep", type=a.at_least_one, default=None, metavar="N",
                   help="keep the backups of the newest N transactions (default: the config's keep, else 5)")


def _cmd_rollback(args) -> VerbResult:
    from rocmbuild.flows import manage

    if args.to is not None and args.undo is not None:
        from rocmbuild.errors import InputError
        raise InputError("give --to TXN (the state after it) or --undo TXN (the state before it), not both",
                         "`rocmbuild history` lists the transactions")
    return manage.rollback(env=args.env, python=args.python, to=args.to, force=args.force, wait=a.lock_wait(args),
                           keep=args.keep, probe_timeout=args.probe_timeout, if_applied=args.if_applied,
                           undo=args.undo)


def _add_redo(sub) -> None:
    p = sub.add_parser("redo", help="re-apply what the last rollback undid (from that rollback's backups), verified")
    a.common(p)
    a.target(p)
    a.txn_opts(p)
    p.add_argument("--force", action="store_true", help="redo even over files changed since the rollback (drift)")
    p.add_argument("--keep", type=a.at_least_one, default=None, metavar="N",
                   help="keep the backups of the newest N transactions (default: the config's keep, else 5)")


def _cmd_redo(args) -> VerbResult:
    from rocmbuild.flows import manage

    return manage.redo(env=args.env, python=args.python, force=args.force, wait=a.lock_wait(args), keep=args.keep,
                       probe_timeout=args.probe_timeout)


def _add_history(sub) -> None:
    p = sub.add_parser("history", help="list the transactions on the target and the space backups hold")
    a.common(p)
    a.target(p)
    p.add_argument("--limit", type=a.positive, default=None, metavar="N",
                   help="only the newest N transactions (default: all; the table lists the newest first)")


def _cmd_history(args) -> VerbResult:
    from rocmbuild.flows import manage

    return manage.history(env=args.env, python=args.python, limit=args.limit)


def _add_recover(sub) -> None:
    p = sub.add_parser("recover", help="only roll back an interrupted transaction (nothing else)")
    a.common(p)
    a.target(p)
    a.txn_opts(p)


def _cmd_recover(args) -> VerbResult:
    from rocmbuild.flows import manage

    return manage.recover(env=args.env, python=args.python, wait=a.lock_wait(args), probe_timeout=args.probe_timeout)


# --------------------------------------------------------------------------------------------
# demo (the whole workflow on a bundled miniature MIOpen, in a scratch dir)


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="build, apply, crash and recover, roll back: the whole job on a bundled tiny "
                                    "library in a scratch env (no ROCm, no GPU)")
    a.common(p)
    p.add_argument("--keep-dir", metavar="DIR", default=None, dest="keep_dir",
                   help="make everything in DIR (new or empty) and keep it, instead of a temp dir removed at the end; "
                   "the result says how to go on there")
    p.add_argument("--keep", metavar="DIR", default=None, dest="keep_dir", help=argparse.SUPPRESS)  # the old name


def _cmd_demo(args) -> VerbResult:
    from rocmbuild.flows import demo

    return demo.demo(keep=args.keep_dir)


VERBS: list[tuple[Callable[[Any], None], Callable[[argparse.Namespace], VerbResult]]] = [
    (_add_recipes, _cmd_recipes),
    (_add_show, _cmd_show),
    (_add_plan, _cmd_plan),
    (_add_build, _cmd_build),
    (_add_status, _cmd_status),
    (_add_verify, _cmd_verify),
    (_add_doctor, _cmd_doctor),
    *cacheverbs.VERBS,
    (_add_export, _cmd_export),
    (_add_lock, _cmd_lock),
    (_add_apply, _cmd_apply),
    (_add_rollback, _cmd_rollback),
    (_add_redo, _cmd_redo),
    (_add_history, _cmd_history),
    (_add_recover, _cmd_recover),
    (_add_demo, _cmd_demo),
    *fleetverbs.VERBS,
]
