"""Errors and exit codes.

Every failure a user can cause or meet is a :class:`RocmbuildError` with a ``message`` (what
happened) and a ``hint`` (what to do). The CLI prints both and exits with the class's code:

=====  =====================================================================
code   meaning
=====  =====================================================================
0      ok (also "already applied", "nothing to recover")
1      anything else (an internal error: a bug, please report it)
2      bad input: usage, recipe, target, requirement, incompatible artifact, another GPU; nothing in the target was changed
3      fetch or build failed; the target was not touched
4      verification failed; every change was rolled back (verify, status --check: DRIFT; nothing changed)
5      a lock (target, source cache, artifact key) is held by another run
128+n  stopped by signal n (130 SIGINT, 143 SIGTERM, 129 SIGHUP); what was half done is undone
=====  =====================================================================

Expected conditions of the system are not bugs (docs/json.md has the table): no space or a
read-only filesystem while fetching or building is 3 (:class:`BuildFilesystemError`), on the
target 2 (:class:`TargetFilesystemError`, "nothing was changed" or "rolled back"); a name or an
argument list too long is 2 (:class:`SystemLimitError`); a truncated or damaged archive is 3
(:class:`CorruptArchiveError`); an unusable state path is 2 (:class:`StatePathError`).
:func:`from_os_error` turns an ``OSError`` into the right one by its errno.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2
EXIT_BUILD = 3
EXIT_VERIFY = 4
EXIT_LOCKED = 5

#: (code, meaning) for ``--help`` and the docs: the table above, as data
EXIT_CODES: tuple[tuple[str, str], ...] = (
    (str(EXIT_OK), 'ok (also "already applied", "nothing to recover")'),
    (str(EXIT_INTERNAL), "anything else: an internal error (a bug, please report it)"),
    (str(EXIT_INPUT), "bad input: usage, recipe, target, requirement, incompatible artifact, another GPU; nothing in the target was changed"),
    (str(EXIT_BUILD), "fetch or build failed; the target was not touched"),
    (str(EXIT_VERIFY), "verification failed; every change was rolled back (verify, status --check: also on DRIFT "
                      "from what rocmbuild placed; nothing was changed)"),
    (str(EXIT_LOCKED), "a lock (target, source cache, artifact key) is held by another run"),
    ("128+n", "stopped by signal n (130 SIGINT, 143 SIGTERM, 129 SIGHUP); what was half done is undone"),
)


class RocmbuildError(Exception):
    """Base class: a message saying what happened and a hint saying what to do."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, hint: str = "", *, details: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}

    def to_json(self) -> dict:
        out: dict[str, Any] = {"message": self.message, "hint": self.hint, "type": type(self).__name__}
        if self.details:
            out["details"] = self.details
        return out


class InputError(RocmbuildError):
    """Bad usage or arguments (exit 2)."""

    exit_code = EXIT_INPUT


class RecipeError(InputError):
    """A recipe that cannot be found, parsed or validated (exit 2)."""


class TargetError(InputError):
    """A target that is not usable: wrong path, no Python, no torch, not writable (exit 2)."""


class StateError(TargetError):
    """A state file of the target (a journal) cannot be read: nothing is changed until it is
    dealt with (exit 2)."""


class RequirementError(InputError):
    """A program or path the recipe requires is missing (exit 2)."""


class FetchError(RocmbuildError):
    """Fetching sources failed: unknown ref, network, checksum, patch (exit 3)."""

    exit_code = EXIT_BUILD


class BuildError(RocmbuildError):
    """Configure, compile or install failed (exit 3)."""

    exit_code = EXIT_BUILD


class VerifyError(RocmbuildError):
    """Verification failed and the change was rolled back (exit 4)."""

    exit_code = EXIT_VERIFY


class LockedError(RocmbuildError):
    """Another run holds a lock this one needs: the target, a source cache, an artifact key (exit 5)."""

    exit_code = EXIT_LOCKED


class Interrupted(RocmbuildError):
    """Stopped by SIGINT, SIGTERM or SIGHUP after ending the children and undoing what was half
    done (exit 128 + the signal: 130, 143, 129)."""

    def __init__(self, signum: int, message: str, hint: str = "", *, details: dict | None = None) -> None:
        super().__init__(message, hint, details=details)
        self.exit_code = 128 + signum


# --------------------------------------------------------------------------------------------
# expected conditions of the operating system: their own types, messages and exit codes


class FilesystemError(RocmbuildError):
    """A filesystem refused a write rocmbuild needs: no space, quota, read-only. The exit code
    follows where it happened (the subclasses)."""


class BuildFilesystemError(FilesystemError, BuildError):
    """... while fetching, building or caching: the target was not touched (exit 3)."""


class TargetFilesystemError(FilesystemError, TargetError):
    """... on the target: nothing was changed, or every change was rolled back (exit 2)."""


class RolledBackFilesystemError(TargetFilesystemError, VerifyError):
    """... after the swap began: every change was rolled back and the old state verified again.
    Exit 2 like every filesystem error on the target; still a VerifyError for callers that catch
    "rolled back"."""

    exit_code = EXIT_INPUT


class SystemLimitError(InputError):
    """A name or an argument list longer than the system allows (ENAMETOOLONG, E2BIG): the input
    must be shorter (exit 2)."""


class ArtifactError(FetchError):
    """An artifact's own record (its manifest, provenance or identity record) does not hold what it
    must: corrupt, or not written by rocmbuild; nothing was changed (exit 3)."""


class CorruptArchiveError(FetchError):
    """A tarball or bundle that cannot be read to its end: truncated or damaged (exit 3)."""


class StatePathError(TargetError):
    """A path of the target's state (``.rocmbuild/``, its lock) is not what it must be, e.g. the
    lock is a directory (exit 2)."""


NO_SPACE = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded"}
READ_ONLY = {errno.EROFS: "the filesystem is read-only"}
TOO_LONG = {errno.ENAMETOOLONG: "a file name is too long", errno.E2BIG: "an argument list is too long"}


def _where(exc: OSError) -> str:
    return f": {exc.filename}" if exc.filename else ""


def _named(exc: OSError, where: str | None) -> OSError:
    """``exc`` naming ``where`` when it names no file itself (a write() names none)."""
    if exc.filename is None and where:
        exc.filename = where
    return exc


def _free(path: str | None) -> str:
    import shutil

    if not path:
        return ""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return f" ({shutil.disk_usage(p).free // 2**20} MiB free now)"
    except OSError:
        return ""


def from_os_error(exc: OSError, phase: str, *, rolled_back: bool = False,
                  where: str | None = None) -> RocmbuildError | None:
    """The error to report for an expected ``OSError`` (None: not an expected one). ``phase`` is
    ``"build"`` (fetch, build, the cache: exit 3, the target untouched) or ``"target"`` (exit 2:
    nothing changed, or ``rolled_back``); ``where`` names the place when ``exc`` names no file."""
    no, path = exc.errno, _named(exc, where).filename
    details = {"errno": errno.errorcode.get(no or 0, str(no)), "path": str(path) if path else None, "phase": phase}
    if no in TOO_LONG:
        return SystemLimitError(
            f"{TOO_LONG[no]}{_where(exc)}" + (_lengths(path) if no == errno.ENAMETOOLONG else ""),
            "use a shorter name or value (a file or directory name may have 255 bytes, a path 4096, one "
            "argument 128 KiB); nothing was changed", details=details)
    if no not in NO_SPACE and no not in READ_ONLY:
        return None
    what = NO_SPACE.get(no) or READ_ONLY[no]
    fix = ("free some space there" + _free(path) if no in NO_SPACE
           else "remount it read-write (or let rocmbuild write somewhere writable)")
    if phase == "build":
        return BuildFilesystemError(
            f"{what}{_where(exc)}; the build did not finish", f"{fix} (or point $ROCMBUILD_HOME at another disk) "
            "and run the command again; the target was not touched", details=details)
    done = "every change was rolled back" if rolled_back else "nothing was changed"
    return TargetFilesystemError(f"{what}{_where(exc)}; {done}", f"{fix} and run the command again; {done}",
                                 details={**details, "rolled_back": rolled_back})


def _lengths(path) -> str:
    if not path:
        return ""
    text = os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path)
    longest = max((len(os.fsencode(p)) for p in text.split("/")), default=0)
    return f" (its longest component has {longest} bytes, the whole path {len(os.fsencode(text))})"
