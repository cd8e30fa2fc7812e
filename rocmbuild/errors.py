"""Errors and exit codes.

Every failure a user can cause or meet is a :class:`RocmbuildError` with a ``message`` (what
happened) and a ``hint`` (what to do). The CLI prints both and exits with the class's code:

====  =====================================================================
code  meaning
====  =====================================================================
0     ok (also "already applied", "nothing to recover")
1     anything else (an internal error: a bug, please report it)
2     bad input: usage, recipe, target; nothing was fetched or changed
3     fetch or build failed; the target was not touched
4     verification failed; every change was rolled back
5     a lock (target, source cache, artifact key) is held by another run
====  =====================================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2
EXIT_BUILD = 3
EXIT_VERIFY = 4
EXIT_LOCKED = 5


class RocmbuildError(Exception):
    """Base class: a message saying what happened and a hint saying what to do."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, hint: str = "", *, details: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}

    def to_json(self) -> dict:
        out = {"message": self.message, "hint": self.hint, "type": type(self).__name__}
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
