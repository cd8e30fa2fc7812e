"""Command line: argparse, one ``_add_<verb>`` / ``_cmd_<verb>`` pair per verb.

Each ``_cmd_<verb>`` takes the parsed arguments and returns a :class:`Result`; :func:`main`
renders it and exits with its code. Errors are :class:`RocmbuildError` subclasses: the message
and hint are printed (a traceback only with ``--debug``) and the process exits with the error's
code (see ``rocmbuild.errors``).

Output: with ``--json`` exactly one JSON object is printed on stdout,
``{"ok", "verb", "exit_code", ...}`` plus ``"error": {"message", "hint"}`` on failure; progress and
human text go to stderr. Without ``--json`` the result's text is printed on stdout and progress
on stderr. Nothing ever prompts.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from rocmbuild import __version__, ui
from rocmbuild.errors import EXIT_INTERNAL, EXIT_INPUT, EXIT_OK, RocmbuildError


@dataclass
class Result:
    data: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    exit_code: int = EXIT_OK


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so usage errors honour --json and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message, self.format_usage().strip())


class _UsageError(Exception):
    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


# --------------------------------------------------------------------------------------------
# shared option groups


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")


def _recipe_dirs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipes-dir", action="append", default=[], metavar="DIR",
                   help="look for recipes here first (repeatable)")


def _overrides(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("build overrides")
    g.add_argument("--ref", help="branch, tag or commit to build instead of the recipe's")
    g.add_argument("--source", metavar="URL|PATH", help="another remote (e.g. a local mirror) or tarball URL")
    g.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="set a CMake define (repeatable)")
    g.add_argument("--jobs", type=int, metavar="N", help="parallel build jobs (0 = all cores)")
    g.add_argument("--gpu-targets", metavar="gfxNNNN[,gfxNNNN]", help="sets GPU_TARGETS")
    g.add_argument("--launcher", choices=["ccache", "sccache"], help="compiler launcher (cache)")


def _target(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--env", metavar="PREFIX", help="the environment prefix (conda env or venv)")
    g.add_argument("--python", metavar="EXE", help="the target's Python executable")
    p.add_argument("--probe-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="how long the probe may run in the target Python (default 300)")


def overrides_from(args: argparse.Namespace):
    from rocmbuild.recipe import Overrides

    return Overrides(
        ref=getattr(args, "ref", None),
        source=getattr(args, "source", None),
        defines=tuple(getattr(args, "defines", []) or ()),
        jobs=getattr(args, "jobs", None),
        gpu_targets=getattr(args, "gpu_targets", None),
        launcher=getattr(args, "launcher", None),
    )


# --------------------------------------------------------------------------------------------
# recipes / show


def _add_recipes(sub) -> None:
    p = sub.add_parser("recipes", help="list the recipes found and where")
    _common(p)
    _recipe_dirs(p)


def _cmd_recipes(args) -> Result:
    from rocmbuild import recipe

    found = recipe.available(args.recipes_dir)
    rows = []
    lines = []
    for name, path in found:
        try:
            desc = recipe.load(str(path)).description
            error = None
        except RocmbuildError as exc:
            desc, error = "", exc.message
        rows.append({"name": name, "path": str(path), "description": desc, "error": error})
        lines.append(f"{name:24} {desc or ('INVALID: ' + error if error else '')}\n{'':24} {path}")
    search = [str(d) for d in recipe.search_path(args.recipes_dir)]
    return Result({"recipes": rows, "search_path": search}, "\n".join(lines) or "no recipes found")


def _add_show(sub) -> None:
    p = sub.add_parser("show", help="show a recipe as rocmbuild understands it")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    _common(p)
    _recipe_dirs(p)
    _overrides(p)


def _cmd_show(args) -> Result:
    from rocmbuild import recipe

    r = recipe.apply_overrides(recipe.load(args.recipe, args.recipes_dir), overrides_from(args))
    data = {"name": r.name, "path": str(r.path), "description": r.description, "recipe": r.canonical(),
            "patch_files": [str(p) for p in r.patch_files]}
    text = [f"{r.name}: {r.description}", f"file: {r.path}", r.path.read_text()]
    return Result(data, "\n".join(text))


# --------------------------------------------------------------------------------------------
# plan / build


def _add_plan(sub) -> None:
    p = sub.add_parser("plan", help="show what build/apply would run, changing nothing")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    _common(p)
    _recipe_dirs(p)
    _overrides(p)
    p.add_argument("--offline", action="store_true", help="do not contact the remote to resolve the ref")


def _cmd_plan(args) -> Result:
    from rocmbuild import workflow

    plan = workflow.build_plan(args.recipe, args.recipes_dir, overrides_from(args), offline=args.offline)
    return Result(plan, workflow.render_build_plan(plan))


def _add_build(sub) -> None:
    p = sub.add_parser("build", help="fetch, patch, configure, build and stage an artifact")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    _common(p)
    _recipe_dirs(p)
    _overrides(p)


def _cmd_build(args) -> Result:
    from rocmbuild import workflow

    art = workflow.build(args.recipe, args.recipes_dir, overrides_from(args))
    m = art.manifest
    data = {
        "cached": art.cached,
        "artifact": str(art.path),
        "key": m.key,
        "recipe": m.recipe,
        "commit": m.commit,
        "version": m.version,
        "libraries": [{"name": lib.name, "file": lib.file, "soname": lib.soname, "chain": list(lib.chain)}
                      for lib in m.libraries],
    }
    verb = "cached (no configure, no compile)" if art.cached else "built"
    text = f"{m.recipe} {m.version or ''} @ {(m.commit or '')[:12]}: {verb}\nartifact: {art.path}"
    for lib in m.libraries:
        text += f"\n  {lib.name}: {' -> '.join(lib.chain)} (SONAME {lib.soname})"
    return Result(data, text)


# --------------------------------------------------------------------------------------------
# registry and main

VERBS: list[tuple[Callable, Callable]] = [
    (_add_recipes, _cmd_recipes),
    (_add_show, _cmd_show),
    (_add_plan, _cmd_plan),
    (_add_build, _cmd_build),
]


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Callable]]:
    parser = _Parser(prog="rocmbuild", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"rocmbuild {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    handlers: dict[str, Callable] = {}
    for add, cmd in VERBS:
        add(sub)
        handlers[cmd.__name__.removeprefix("_cmd_")] = cmd
    return parser, handlers


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    want_json = "--json" in argv
    debug = "--debug" in argv
    parser, handlers = build_parser()
    verb = None
    try:
        args = parser.parse_args(argv)
        verb = args.verb
        if verb is None:
            parser.print_help(sys.stderr)
            return EXIT_INPUT
        ui.set_quiet(args.json or args.quiet)
        result = handlers[verb](args)
    except _UsageError as exc:
        return _fail(verb, want_json, RocmbuildError(str(exc), exc.usage), EXIT_INPUT)
    except RocmbuildError as exc:
        if debug:
            traceback.print_exc()
        return _fail(verb, want_json, exc, exc.exit_code)
    except KeyboardInterrupt:
        return _fail(verb, want_json, RocmbuildError("interrupted", "nothing was left half done; run the command again"), 130)
    except Exception as exc:  # a bug: say so, keep the traceback for --debug
        if debug:
            traceback.print_exc()
        err = RocmbuildError(f"internal error: {type(exc).__name__}: {exc}",
                             "this is a bug in rocmbuild; run again with --debug and report the traceback")
        return _fail(verb, want_json, err, EXIT_INTERNAL)
    if want_json:
        ui.emit_json({"ok": result.exit_code == EXIT_OK, "verb": verb, "exit_code": result.exit_code, **result.data})
    elif result.text:
        print(result.text)
    return result.exit_code


def _fail(verb: str | None, want_json: bool, exc: RocmbuildError, code: int) -> int:
    ui.error(exc.message, exc.hint)
    if want_json:
        ui.emit_json({"ok": False, "verb": verb, "exit_code": code, "error": exc.to_json()})
    return code
