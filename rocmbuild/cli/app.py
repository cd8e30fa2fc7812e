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
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from rocmbuild import __version__, ui
from rocmbuild.cli import render
from rocmbuild.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK, RocmbuildError


@dataclass
class Result:
    """What a verb returns. A non-zero ``exit_code`` should come with an ``error`` (what failed,
    what to do), printed like a raised error but keeping ``data`` in the JSON (e.g. doctor's checks)."""

    data: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    exit_code: int = EXIT_OK
    error: RocmbuildError | None = None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (the backups of the newest transaction are always kept), got {text}")
    return value


def _version(text: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        raise argparse.ArgumentTypeError(f"not a version: {text!r} (expected e.g. 3.5.1)") from None
    return text


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
    p.add_argument("--probe-timeout", type=_positive_float, default=300.0, metavar="SECONDS",
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
    from rocmbuild.flows import workflow

    plan = workflow.build_plan(args.recipe, args.recipes_dir, overrides_from(args), offline=args.offline)
    return Result(plan, workflow.render_build_plan(plan))


def _add_build(sub) -> None:
    p = sub.add_parser("build", help="fetch, patch, configure, build and stage an artifact")
    p.add_argument("recipe", nargs="?", help="recipe name or path to a .toml file")
    p.add_argument("--from-lock", metavar="FILE", help="build exactly what a `rocmbuild lock` file pins")
    _common(p)
    _recipe_dirs(p)
    _overrides(p)


def _cmd_build(args) -> Result:
    from rocmbuild.flows import workflow

    recipe, overrides = _source_of(args)
    data = render.build_data(workflow.build(recipe, args.recipes_dir, overrides))
    return Result(data, render.build(data))


# --------------------------------------------------------------------------------------------
# status / verify / doctor (read-only: they never change the target)


def _add_status(sub) -> None:
    p = sub.add_parser("status", help="what the target environment loads now")
    _common(p)
    _target(p)
    p.add_argument("--hash", action="store_true", help="also sha256 each loaded library (slow for 1 GiB files)")


def _cmd_status(args) -> Result:
    from rocmbuild.target import target

    t = target.discover(args.env, args.python, timeout=args.probe_timeout, want_hash=args.hash)
    data = render.status_data(t)
    from rocmbuild.flows import (
        txnflow,  # what rocmbuild changed here: transactions in effect, unfinished, drift
    )

    data["changes"] = txnflow.status_changes(t.prefix)
    return Result(data, render.status(data) + "\n" + txnflow.render_status_changes(data["changes"]))


def _add_verify(sub) -> None:
    p = sub.add_parser("verify", help="check what the target loads: one library, expected version, compatible")
    _common(p)
    _target(p)
    p.add_argument("--expect", type=_version, metavar="VERSION", help="the library version that must be loaded, e.g. 3.5.1")
    p.add_argument("--expect-file", metavar="PATH",
                   help="the loaded library must be this very file (same device and inode)")
    p.add_argument("--smoke", action="store_true", help="run the BatchNorm2d GPU smoke test (skipped without a GPU)")
    p.add_argument("--hash", action="store_true", help="also sha256 each loaded library")
    p.add_argument("--encoding", choices=["miopen", "cudnn"], default="miopen",
                   help="how to decode the version integer (default miopen)")
    p.add_argument("--library", default="libMIOpen", metavar="NAME", help="library file stem (default libMIOpen)")


def _cmd_verify(args) -> Result:
    from pathlib import Path

    from rocmbuild.errors import VerifyError
    from rocmbuild.target import probe, target

    t = target.discover(args.env, args.python, timeout=args.probe_timeout, want_hash=args.hash, smoke=args.smoke)
    verdict = probe.judge(t.report, library=args.library, encoding=args.encoding, expect=args.expect,
                          expected_file=Path(args.expect_file) if args.expect_file else None, smoke=args.smoke)
    data = {"target": t.to_json(), **verdict.to_json()}
    if not verdict.ok:
        bad = verdict.failures()
        raise VerifyError(
            f"verification failed in {t.prefix}: " + "; ".join(f"{c.name}: expected {c.expected}, found {c.found}"
                                                               for c in bad),
            " ".join(c.message for c in bad if c.message) or "see the checks above",
            details={"checks": [c.to_json() for c in verdict.checks], "failures": [c.name for c in bad],
                     "target": t.to_json()},
        )
    return Result(data, f"verified {t.prefix}\n" + verdict.render())


def _add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="preflight checks: tools, ROCm, GPU, disk, target, a recipe's requirements")
    p.add_argument("recipe", nargs="?", help="also check this recipe's [requires]")
    _common(p)
    _recipe_dirs(p)
    _target(p)


def _cmd_doctor(args) -> Result:
    from rocmbuild import doctor
    from rocmbuild import recipe

    r = recipe.load(args.recipe, args.recipes_dir) if args.recipe else None
    checks = doctor.run(r, args.env, args.python, timeout=args.probe_timeout)
    failed = doctor.failed(checks)
    text = "\n".join(c.render() for c in checks)
    text += f"\n{len(failed)} failed" if failed else "\nall checks passed (warnings do not block)"
    error = None
    if failed:
        from rocmbuild.errors import RequirementError

        error = RequirementError(f"{len(failed)} doctor check(s) failed: {', '.join(c.name for c in failed)}",
                                 "; ".join(f"{c.name}: {c.fix}" for c in failed if c.fix) or "see the checks above")
    return Result({"checks": [c.to_json() for c in checks], "failed": [c.name for c in failed]},
                  text, EXIT_INPUT if failed else EXIT_OK, error)


# --------------------------------------------------------------------------------------------
# registry and main

VERBS: list[tuple[Callable, Callable]] = [
    (_add_recipes, _cmd_recipes),
    (_add_show, _cmd_show),
    (_add_plan, _cmd_plan),
    (_add_build, _cmd_build),
    (_add_status, _cmd_status),
    (_add_verify, _cmd_verify),
    (_add_doctor, _cmd_doctor),
]



# --------------------------------------------------------------------------------------------
# apply / rollback / history / recover (transactions on a target)


def _txn_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", action="store_true", help="wait for another rocmbuild run on this target to finish")


def _add_apply(sub) -> None:
    p = sub.add_parser("apply", help="build (cached) and swap the library into the target, verified, atomically")
    p.add_argument("recipe", nargs="?", help="recipe name or path to a .toml file")
    src = p.add_argument_group("what to apply instead of a recipe")
    src.add_argument("--artifact", metavar="FILE|URL", help="an artifact bundle from `rocmbuild export`")
    src.add_argument("--sha256", metavar="HEX", help="the bundle's sha256 (default: FILE.sha256 beside it)")
    src.add_argument("--from-lock", metavar="FILE", help="build exactly what a `rocmbuild lock` file pins")
    p.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    _common(p)
    _recipe_dirs(p)
    _overrides(p)
    _target(p)
    _txn_opts(p)
    p.add_argument("--expect", type=_version, metavar="VERSION", help="the version verification must find (default: the recipe's)")
    p.add_argument("--smoke", action="store_true", help="also run the BatchNorm smoke test on the GPU")
    p.add_argument("--keep", type=_at_least_one, default=5, metavar="N",
                   help="keep the backups of the newest N transactions (default 5); older ones are pruned")
    p.add_argument("--allow-outside-prefix", action="store_true",
                   help="allow changing a library the target loads from outside its prefix (e.g. /opt/rocm/lib)")


def _apply_kwargs(args) -> dict:
    return dict(env=args.env, python=args.python, expect=args.expect, smoke=args.smoke, wait=args.wait,
                keep=args.keep, allow_outside_prefix=args.allow_outside_prefix, probe_timeout=args.probe_timeout)


def _source_of(args) -> tuple[str | None, Any]:
    """(recipe, overrides) from a positional RECIPE or --from-lock (``--artifact`` for apply:
    recipe None); exactly one of them must be given."""
    from rocmbuild.errors import InputError
    from rocmbuild.flows import fleet

    artifact = getattr(args, "artifact", None)
    given = [x for x in (args.recipe, artifact, args.from_lock) if x]
    if len(given) != 1:
        raise InputError("give exactly one of: RECIPE, --artifact FILE|URL, --from-lock FILE",
                         "e.g. `rocmbuild apply miopen-3.5.1 --env PREFIX`")
    if args.from_lock:
        if any(overrides_from(args).as_dict().values()):
            raise InputError("--from-lock pins every build override; do not combine it with --ref, -D, ...",
                             "write a new lock with the overrides you want: `rocmbuild lock RECIPE ... -o FILE`")
        return fleet.from_lock(args.from_lock, args.recipes_dir)
    return (None if artifact else args.recipe), overrides_from(args)


def _cmd_apply(args) -> Result:
    from rocmbuild.flows import fleet, workflow

    recipe, overrides = _source_of(args)
    if args.dry_run:
        data = fleet.dry_run(recipe=recipe, artifact=args.artifact, sha256=args.sha256, recipes_dirs=args.recipes_dir,
                             overrides=overrides, env=args.env, python=args.python,
                             allow_outside_prefix=args.allow_outside_prefix, probe_timeout=args.probe_timeout)
        # what apply would refuse, the dry run reports with the same exit code (the plan is still shown)
        refusal = data.pop("_refusal", None)
        return Result(data, fleet.render_dry_run(data), refusal.exit_code if refusal else EXIT_OK, refusal)
    if args.artifact:
        data = fleet.apply_bundle(args.artifact, sha256=args.sha256, **_apply_kwargs(args))
    else:
        data = workflow.apply(recipe, args.recipes_dir, overrides, **_apply_kwargs(args))
    return Result(data, render.apply(data))


def _add_rollback(sub) -> None:
    p = sub.add_parser("rollback", help="undo the last apply (or everything since --to TXN), verified")
    _common(p)
    _target(p)
    _txn_opts(p)
    p.add_argument("--to", metavar="TXN", help="restore the state before this transaction (undoing later ones too)")
    p.add_argument("--force", action="store_true", help="roll back even over files changed since (drift)")
    p.add_argument("--keep", type=_at_least_one, default=5, metavar="N", help="keep the backups of the newest N transactions")


def _cmd_rollback(args) -> Result:
    from rocmbuild.flows import txnflow

    data = txnflow.rollback(env=args.env, python=args.python, to=args.to, force=args.force, wait=args.wait,
                             keep=args.keep, probe_timeout=args.probe_timeout)
    return Result(data, render.rollback(data))


def _add_history(sub) -> None:
    p = sub.add_parser("history", help="list the transactions on the target and the space backups hold")
    _common(p)
    _target(p)


def _cmd_history(args) -> Result:
    from rocmbuild.flows import txnflow

    data = txnflow.history(env=args.env, python=args.python)
    return Result(data, txnflow.render_history(data))


def _add_recover(sub) -> None:
    p = sub.add_parser("recover", help="only roll back an interrupted transaction (nothing else)")
    _common(p)
    _target(p)
    _txn_opts(p)


def _cmd_recover(args) -> Result:
    from rocmbuild.flows import txnflow

    data = txnflow.recover(env=args.env, python=args.python, wait=args.wait, probe_timeout=args.probe_timeout)
    return Result(data, render.recover(data))


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="write an artifact bundle (.tar.gz + .sha256) to apply on other machines")
    p.add_argument("what", metavar="RECIPE|KEY", help="a recipe (built or taken from the cache) or an artifact key")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the bundle to write (.tar.gz), or a directory")
    _common(p)
    _recipe_dirs(p)
    _overrides(p)


def _cmd_export(args) -> Result:
    from rocmbuild.flows import fleet

    info = fleet.export(args.what, args.output, args.recipes_dir, overrides_from(args))
    return Result(info, f"{info['file']}\n{info['sha256']}  (also in {info['sha256_file']})\n"
                        f"apply it elsewhere with: rocmbuild apply --artifact {info['file']} --env PREFIX")


def _add_lock(sub) -> None:
    p = sub.add_parser("lock", help="pin a recipe's ref to a commit (with every override) in a lock file")
    p.add_argument("recipe", help="recipe name or path to a .toml file")
    p.add_argument("-o", "--output", metavar="FILE", help="the lock file (default: ./<recipe>.lock.json)")
    _common(p)
    _recipe_dirs(p)
    _overrides(p)


def _cmd_lock(args) -> Result:
    from rocmbuild.flows import fleet

    data = fleet.lock(args.recipe, args.output, args.recipes_dir, overrides_from(args))
    lk = data["lock"]
    return Result(data, f"{data['lock_file']}: {lk['recipe']} @ {lk['ref']} -> {lk['commit']}\n"
                        f"rebuild exactly this with: rocmbuild apply --from-lock {data['lock_file']}")


VERBS += [
    (_add_export, _cmd_export),
    (_add_lock, _cmd_lock),
    (_add_apply, _cmd_apply),
    (_add_rollback, _cmd_rollback),
    (_add_history, _cmd_history),
    (_add_recover, _cmd_recover),
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
    verb = next((a for a in argv if a in handlers), None)  # known even when parsing fails
    try:
        args = parser.parse_args(argv)
        verb = args.verb
        if verb is None:
            parser.print_help(sys.stderr)
            return EXIT_INPUT
        ui.set_quiet(args.json or args.quiet)
        result = handlers[verb](args)
    except _UsageError as exc:
        from rocmbuild.errors import InputError

        return _fail(verb, want_json, InputError(str(exc), exc.usage), EXIT_INPUT)
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
    try:
        if result.error is not None:
            ui.error(result.error.message, result.error.hint)
        if want_json:
            out = {**result.data, "ok": result.exit_code == EXIT_OK, "verb": verb, "exit_code": result.exit_code}
            if result.error is not None:
                out["error"] = result.error.to_json()
            ui.emit_json(out)
        elif result.text:
            print(result.text, flush=True)
    except BrokenPipeError:
        # `rocmbuild status | head -3`: the reader left; that is not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return result.exit_code


def _fail(verb: str | None, want_json: bool, exc: RocmbuildError, code: int) -> int:
    ui.error(exc.message, exc.hint)
    if want_json:
        ui.emit_json({"ok": False, "verb": verb, "exit_code": code, "error": exc.to_json()})
    return code
