"""The one rich Console (stderr) and Progress, and JSON output (stdout).

Human text and progress always go to stderr; ``--json`` prints exactly one JSON object on
stdout. Nothing here ever prompts: rocmbuild runs unattended.

Decision: message text is never rich markup (nor emoji codes): callers' text names recipe tables
(``[build]``), make's ``gmake[2]: *** [src/x.o] Error 1`` and paths, so every message is a
:class:`rich.text.Text` whose style is set here, never parsed from the text.

Decision: every text passes :func:`rocmbuild.names.safe_text` here, at the one sink, so an escape
sequence, a carriage return or a newline in a recipe's description, a ref, a hint, a path or a
stored history line is shown escaped (``\x1b``), never acted on. ``info``, ``warn`` and ``detail``
are one line each (a newline inside is escaped too: a stray ``\nFAKE: all good`` cannot print a
line of its own); an error's message and hint may have several lines (a list of what is missing, a
build log's tail, a usage) and keep them (:func:`rocmbuild.names.safe_lines`), so what an error
embeds from outside (a ref, a recipe's hint) is escaped with ``safe_text`` where it is made.

Decision: a reader that leaves (``rocmbuild apply ... 2>&1 | head -2``) ends our output, never our
work. rich's default answer to a closed pipe is ``SystemExit(1)``, which would abort (and roll
back) a transaction half way; :class:`_Console` instead points the stream at ``/dev/null`` and
carries on, so a committed outcome stays committed and exits 0.

Decision: rich is imported when the first line is printed (``console`` is made on first use,
PEP 562), not when this module is: every module imports ``ui``, and ``rocmbuild --version``,
``--help`` and the shell's Tab print nothing through it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

from rocmbuild.names import safe_lines, safe_text


def silence(stream) -> None:
    """Point ``stream``'s file descriptor at /dev/null (its reader left): later writes, and the
    flush at exit, succeed and go nowhere."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stream.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):  # no real descriptor (a test's capture): nothing to do
        pass


_console = None


def _make_console():
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            silence(self.file)

    return _Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def __getattr__(name: str):
    """``ui.console``: the one rich Console (stderr), made on first use."""
    global _console
    if name == "console":
        if _console is None:
            _console = _make_console()
        return _console
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_quiet = False
_verbose = 0


def set_quiet(quiet: bool) -> None:
    """With ``--json`` or ``--quiet`` informational text is suppressed (errors still print)."""
    global _quiet
    _quiet = quiet


def set_verbose(verbose: int) -> None:
    """``-v`` (1): also print details (each command run) and stream the output of the commands
    run (a build's compile lines, git's words) as they come; ``-vv`` (2): also rocmbuild's own
    debug lines (:func:`debug_logging`). Quiet wins over both."""
    global _verbose
    _verbose = int(verbose)
    debug_logging(_verbose >= 2 and not _quiet)


def verbosity() -> int:
    """How many ``-v`` were given (0 with ``-q`` or ``--json``)."""
    return 0 if _quiet else _verbose


def streaming() -> bool:
    """Whether a command's output lines are shown as they come (``-v``, not quiet, not ``--json``)."""
    return _verbose >= 1 and not _quiet


class _DebugHandler(logging.Handler):
    """The ``rocmbuild`` logger's records as ``debug: <module>: <text>`` lines on the console."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            say("debug:", "dim", f"{record.name.removeprefix('rocmbuild.')}: {record.getMessage()}")
        except Exception:  # a debug line never breaks the work
            self.handleError(record)


_handler = _DebugHandler()


def debug_logging(on: bool) -> None:
    """Send the ``rocmbuild`` logger's DEBUG records to stderr (``-vv``), or nothing (the default:
    a library caller's own logging configuration is left alone)."""
    log = logging.getLogger("rocmbuild")
    if on:
        if _handler not in log.handlers:
            log.addHandler(_handler)
        log.setLevel(logging.DEBUG)
        log.propagate = False
    elif _handler in log.handlers:
        log.removeHandler(_handler)
        log.setLevel(logging.NOTSET)
        log.propagate = True


def say(label: str, style: str, text: str, *, lines: bool = False) -> None:
    """Print ``label`` (styled) then ``text``, never parsed as markup, its control characters
    escaped (``lines``: its line breaks kept)."""
    from rich.text import Text

    text = safe_lines(text) if lines else safe_text(text)
    __getattr__("console").print(Text.assemble((label, style), " ", text) if label else Text(text))


def info(text: str) -> None:
    if not _quiet:
        say("", "", text)


def detail(text: str) -> None:
    """Shown only with ``-v`` (and not quiet): what rocmbuild does under the hood."""
    if _verbose and not _quiet:
        say("", "", text)


def warn(text: str) -> None:
    say("warning:", "yellow", text)


def error(message: str, hint: str = "") -> None:
    say("error:", "bold red", message, lines=True)
    if hint:
        say("hint:", "cyan", hint, lines=True)


def emit_json(obj: dict[str, Any]) -> None:
    """Print exactly one JSON object on stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()
