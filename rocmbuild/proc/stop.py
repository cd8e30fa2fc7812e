"""One stop path for SIGINT, SIGTERM and SIGHUP (the story: docs/transactions.md, "Signals").

:func:`handling` (the CLI's ``main``) installs one handler for the three signals: the first
raises :class:`Stop` -- a ``KeyboardInterrupt``, so no ``except Exception`` swallows it, and every
existing Ctrl-C cleanup (the runner killing the child's tree, the builder removing its temp
artifact, the protocol rolling back) runs for all three alike. The CLI exits with 128+n.

Decisions:
* a signal that arrives while the stop is under way (a rollback, its re-verification) or inside a
  :func:`shielded` block is *deferred*: a line on stderr says so and the work goes on; a deferred
  signal is raised when the shielded block ends. Only SIGKILL can cut a rollback short, and that
  leaves a journal the next command recovers;
* a signal the parent set to ignored (``nohup`` ignores SIGHUP, a ``&`` job of a non-interactive
  shell ignores SIGINT) stays ignored: that is the user's choice, as Python itself does for SIGINT;
* the handler writes with ``os.write`` (never through a stream it may have interrupted); on a
  terminal its line starts on a fresh line (back to the row's start, that row erased), never after
  the progress display's row and the ``^C`` the terminal echoed.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from rocmbuild.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stop(KeyboardInterrupt):
    """A stop signal, raised in the main thread; ``details`` gathers what the stop undid."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.details: dict[str, Any] = {}


class _State:
    stopping: int | None = None  # the signal being handled
    pending: int | None = None  # a signal deferred by a shielded block
    shield = 0


_state = _State()


def signum_of(exc: BaseException) -> int:
    """The signal behind a stop (a plain KeyboardInterrupt: SIGINT)."""
    return getattr(exc, "signum", signal.SIGINT)


def name(signum: int) -> str:
    return signal.Signals(signum).name


def note(exc: BaseException, summary: str = "", **details: Any) -> None:
    """Record on a stop what its cleanup did: ``summary`` is a sentence for the message, the rest
    goes to the error's JSON details (a plain KeyboardInterrupt gets a ``details`` too)."""
    if not hasattr(exc, "details"):
        setattr(exc, "details", {})  # noqa: B010 (an attribute a plain exception does not declare)
    recorded: dict[str, Any] = getattr(exc, "details")  # noqa: B009 (the same)
    recorded.update(details)
    if summary:
        recorded.setdefault("summary", []).append(summary)


def _fresh_line() -> str:
    """What starts a line of our own on stderr: on a terminal the cursor may sit on the progress
    display's row, after the ``^C`` the terminal echoed: back to its start and erase that row (the
    display draws itself again below); a dumb terminal cannot erase: a new line."""
    try:
        if not os.isatty(2):
            return ""
    except OSError:
        return ""
    return "\n" if os.environ.get("TERM", "") in ("dumb", "") else "\r\x1b[K"


def _say(text: str) -> None:
    try:
        os.write(2, f"{_fresh_line()}rocmbuild: {text}\n".encode())
    except OSError:
        pass


def _handler(signum: int, _frame: FrameType | None) -> None:
    if _state.stopping is not None:
        _say(f"{name(signum)} received: already stopping after {name(_state.stopping)}; the rollback and its "
             "check finish first (SIGKILL would leave it to the next command's recovery)")
        return
    if _state.shield:
        _state.pending = _state.pending or signum
        _say(f"{name(signum)} received: finishing the current step (a rollback) first, then stopping")
        return
    _state.stopping = signum
    _say(f"{name(signum)} received: stopping (ending child processes, undoing what is half done)")
    raise Stop(signum)


@contextmanager
def handling() -> Iterator[None]:
    """Install the stop handler for the signals not ignored by our parent; restore on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in SIGNALS}
    _state.stopping, _state.pending, _state.shield = None, None, 0
    for s, h in old.items():
        if h is not signal.SIG_IGN:
            signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def begin(exc: BaseException) -> None:
    """Mark a stop as under way (a plain KeyboardInterrupt, raised by Python's own handler)."""
    if _state.stopping is None:
        _state.stopping = signum_of(exc)


@contextmanager
def shielded() -> Iterator[None]:
    """Run a block that must not be cut half-way (a rollback): stop signals wait for its end."""
    _state.shield += 1
    try:
        yield
    finally:
        _state.shield -= 1
    if not _state.shield and _state.pending is not None and _state.stopping is None:
        _state.stopping, _state.pending = _state.pending, None
        raise Stop(_state.stopping)


def interrupted(exc: BaseException) -> Interrupted:
    """The error the CLI reports for a stop: what stopped us and what the stop undid."""
    from rocmbuild.errors import Interrupted

    signum = signum_of(exc)
    details = {"signal": name(signum), "signum": signum, **getattr(exc, "details", {})}
    done = [s for s in details.get("summary", ()) if s]
    message = f"stopped by {name(signum)}" + (": " + "; ".join(done) if done else "")
    hint = ("child processes were ended and nothing was left half done; run the same command again"
            if not any("WARNING" in s for s in done) else
            "run `rocmbuild recover` (safe to repeat); `rocmbuild status` shows what the environment loads now")
    return Interrupted(signum, message, hint, details=details)
