"""``rocmbuild show``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("show", help="show a recipe as rocmbuild understands it")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    a.recipe_options(p)


def run(args) -> VerbResult:
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
