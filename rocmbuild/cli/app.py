"""rocmbuild: build GPU libraries from recipes and swap them into PyTorch environments.

``main`` parses the command line (``commands/`` has one module per verb; ``completion`` is added here, since
it reads the parser itself), runs the verb and prints its result once: with ``--json`` exactly
one JSON object on stdout, ``{"ok", "verb", "exit_code", ...}`` plus ``"error": {"message", "hint",
...}`` on failure (docs/json.md); otherwise the text render.py makes, on stdout. An error is
printed once, on stderr (also with ``--json``, for the human watching a log), and a result that
carries one (a failed doctor, a refused dry run) does not repeat it in its text. Progress and
notes go to stderr; nothing ever prompts. Errors are
:class:`RocmbuildError` subclasses, caught once here: message and hint are printed (a traceback only
with ``--debug``) and the process exits with the error's code (rocmbuild.errors). SIGINT, SIGTERM
and SIGHUP raise ``rocmbuild.proc.stop.Stop`` while a verb runs; it is reported as the error
``Interrupted`` (what the stop undid in its details) with exit 128+n.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import TYPE_CHECKING, Any, Callable, NoReturn

from rocmbuild.proc import stop
from rocmbuild import ui
from rocmbuild.names import safe_lines
from rocmbuild.cli import args as a
from rocmbuild.cli import completion, help
from rocmbuild.cli.args import Parser, UsageError
from rocmbuild.cli.commands import VERBS
from rocmbuild.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK, InputError, RocmbuildError, from_os_error

if TYPE_CHECKING:  # progress (rich), the results and swap trees, the renderers: imported once a verb runs, so
    from rocmbuild.results import VerbResult  # --version, --help and the shell's Tab stay cheap (docs/architecture.md)



def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Callable]]:
    parser = Parser(prog="rocmbuild", description=help.DESCRIPTION, epilog=help.epilog())
    parser.add_argument("-V", "--version", action="version", version=help.version_text())
    a.common(parser, top=True)
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    handlers: dict[str, Callable] = {}
    for add, cmd in VERBS:
        add(sub)
        handlers[cmd.__module__.rpartition(".cmd_")[2]] = cmd  # rocmbuild.cli.commands.cmd_<verb>.run
    completion.add(sub)
    handlers["completion"] = lambda args: completion.command(args, parser)
    for name, p in sub.choices.items():
        for each in completion.parsers_under(p):  # a verb's own sub-verbs too
            a.common(each)
        if p.epilog is None:
            p.epilog = help.examples(name)
    return parser, handlers


def _run(argv: list[str], want_json: bool, debug: bool) -> tuple[str | None, VerbResult | int, object]:
    """(verb, its result, its JSON object or text), or (verb, exit code, None) when it failed (the
    failure is already printed)."""
    parser, handlers = build_parser()
    verb = next((a for a in argv if a in handlers), None)  # known even when parsing fails
    try:
        args = a.merge_globals(parser.parse_args(argv))
        verb = args.verb
        if verb is None:
            parser.print_help(sys.stderr)
            if want_json:  # still exactly one object on stdout
                return verb, _fail(verb, True, InputError("no verb given", parser.format_usage().strip()), EXIT_INPUT), None
            return verb, EXIT_INPUT, None
        ui.set_quiet(args.json or args.quiet)
        ui.set_verbose(args.verbose or 0)
        a.resolve_env_name(args)
        a.check_target_paths(args)
        a.config_defaults(args)
        from rocmbuild.proc import ahead

        with ahead.started():  # the first command's supervisor starts now, while the verb's modules import
            ahead.warm()
            from rocmbuild import progress
            from rocmbuild.swap import migrate

            progress.configure(json=args.json, quiet=args.quiet)
            if verb != "completion":
                migrate.migrate()  # state left in the cache home by an older release (a note when it moves)
            result = handlers[verb](args)
        return verb, result, (result.to_json() if want_json else _text(result, args.quiet))
    except UsageError as exc:
        mine = _verb_parser(parser, argv)  # an unknown option is reported by the top parser: the verb's usage
        message = a.suggest_option(str(exc), mine)
        usage = mine.format_usage().strip() if message != str(exc) or str(exc).startswith("unrecognized") else exc.usage
        return verb, _fail(verb, want_json, InputError(message, usage), EXIT_INPUT), None
    except RocmbuildError as exc:
        if debug:
            traceback.print_exc()
        return verb, _fail(verb, want_json, exc, exc.exit_code), None
    except OSError as exc:
        err = from_os_error(exc, os_error_phase(exc))
        if err is None:
            return verb, _internal(verb, want_json, debug, exc), None
        if debug:
            traceback.print_exc()
        return verb, _fail(verb, want_json, err, err.exit_code), None
    except KeyboardInterrupt as exc:  # SIGINT, SIGTERM, SIGHUP (rocmbuild.proc.stop): cleaned up on the way here
        err = stop.interrupted(exc)
        return verb, _fail(verb, want_json, err, err.exit_code), None
    except Exception as exc:  # a bug: say so, keep the traceback for --debug
        return verb, _internal(verb, want_json, debug, exc), None


def _verb_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the deepest verb named in ``argv`` (``cache list``: list's), else ``parser``:
    where a mistyped option is looked up."""
    found = parser
    for word in argv:
        subs = [p for p in completion.parsers_under(found) if p is not found and p.prog.split()[-1] == word]
        if subs:
            found = subs[0]
    return found


def _text(result: VerbResult, quiet: bool) -> str:
    """The text of ``result``: with ``-q`` its one line per result (oneline.py), else render.py's."""
    from rocmbuild.cli import oneline, render

    if quiet:
        short = oneline.brief(result)
        if short is not None:
            return short
    return render.text(result)


def _internal(verb: str | None, want_json: bool, debug: bool, exc: BaseException) -> int:
    if debug:
        traceback.print_exc()
    err = RocmbuildError(f"internal error: {type(exc).__name__}: {exc}",
                         "this is a bug in rocmbuild; run again with --debug and report the traceback")
    return _fail(verb, want_json, err, EXIT_INTERNAL)


# the packages that fetch, build and cache: an OSError raised under them left the target untouched
BUILD_SIDE = ("rocmbuild.sources", "rocmbuild.builder", "rocmbuild.store", "rocmbuild.recipe")
BASE = ("rocmbuild.fs.disk", "rocmbuild.fs.root", "rocmbuild.fs.beneath", "rocmbuild.home", "rocmbuild.proc.runner", "rocmbuild.ui",
        "rocmbuild.errors")


def os_error_phase(exc: BaseException) -> str:
    """``"build"`` when the innermost rocmbuild module at work (past the base modules every layer
    uses) is on the build side, else ``"target"``."""
    for frame, _line in reversed(list(traceback.walk_tb(exc.__traceback__))):
        name = frame.f_globals.get("__name__", "")
        if name.startswith("rocmbuild.") and not name.startswith(BASE):
            return "build" if name.startswith(BUILD_SIDE) else "target"
    return "target"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["__complete"]:  # the shell's Tab (cli/complete.py): no verb, no envelope
        from rocmbuild.cli import complete

        return complete.main(argv[1:])
    with stop.handling():  # SIGINT, SIGTERM and SIGHUP take one stop path; exit 128+n
        try:
            return _main(argv)
        except KeyboardInterrupt as exc:  # while printing the finished verb's result: nothing to undo
            return 128 + stop.signum_of(exc)


def entry() -> NoReturn:
    """The console script and ``python -m rocmbuild``: :func:`main`, then the process ends as the
    interpreter would end it minus the teardown of the modules a verb imported (about 350 for an
    apply; 20-40 ms here, that nothing sees): atexit handlers run, reference cycles are collected,
    stdout and stderr are flushed, then ``os._exit``. A non-daemon thread still running, or a
    stream that cannot be flushed, takes the interpreter's own exit (it joins the thread, or
    reports the stream, as before)."""
    code = main()
    import atexit
    import gc
    import os
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    gc.collect()
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code)


def _main(argv: list[str]) -> int:
    want_json = "--json" in argv
    verb, result, rendered = _run(argv, want_json, "--debug" in argv)
    if isinstance(result, int):
        return result
    error = result.error
    code = error.exit_code if error is not None else EXIT_OK
    try:
        if want_json:
            assert isinstance(rendered, dict)  # with --json a verb's result renders to its JSON object
            out: dict[str, Any] = {**rendered, "ok": code == EXIT_OK, "verb": verb, "exit_code": code}
            changed = getattr(result, "changed", None)  # a verb that can change something says if it did
            if changed is not None:
                out["changed"] = bool(changed)
            if error is not None:
                out["error"] = error.to_json()
            ui.emit_json(out)
        elif rendered:
            print(safe_lines(rendered), flush=True)  # the renderers escape each one-line value; this, the rest
        if error is not None:  # once, on stderr, after the data it is about (the text does not repeat it)
            ui.error(error.message, error.hint)
    except BrokenPipeError:
        # `rocmbuild status | head -3`: the reader left; that is not an error of ours, and the
        # outcome (committed or not) keeps its code
        ui.silence(sys.stdout)
    return code


def _fail(verb: str | None, want_json: bool, exc: RocmbuildError, code: int) -> int:
    ui.error(exc.message, exc.hint)
    if want_json:
        ui.emit_json({"ok": False, "verb": verb, "exit_code": code, "error": exc.to_json()})
    return code
