"""Argument types and the option groups the verbs share.

Usage errors raise instead of exiting (:class:`Parser`), so they honour ``--json`` and exit 2.
"""

from __future__ import annotations

import argparse

from rocmbuild.errors import InputError
from rocmbuild.locks import LockWait
from rocmbuild.recipe import Overrides


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def at_least_one(text: str) -> int:
    return positive(text, " (the backups of the newest transaction are always kept)")


def version(text: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        raise argparse.ArgumentTypeError(f"not a version: {text!r} (expected e.g. 3.5.1)") from None
    return text


class UsageError(Exception):
    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so usage errors honour --json and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, self.format_usage().strip())


# --------------------------------------------------------------------------------------------
# shared option groups


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")


def recipe_dirs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipes-dir", action="append", default=[], metavar="DIR",
                   help="look for recipes here first (repeatable)")


def overrides(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("build overrides")
    g.add_argument("--ref", help="branch, tag or commit to build instead of the recipe's")
    g.add_argument("--source", metavar="URL|PATH", help="another remote (e.g. a local mirror) or tarball URL")
    g.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="set a CMake define (repeatable)")
    g.add_argument("--jobs", type=int, metavar="N", help="parallel build jobs (0 = all cores)")
    g.add_argument("--gpu-targets", metavar="gfxNNNN[,gfxNNNN]", help="sets GPU_TARGETS")
    g.add_argument("--launcher", choices=["ccache", "sccache"], help="compiler launcher (cache)")


def recipe_options(p: argparse.ArgumentParser) -> None:
    """What every verb taking a recipe accepts: the common options, recipe dirs, build overrides."""
    common(p)
    recipe_dirs(p)
    overrides(p)


def target(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--env", metavar="PREFIX", help="the environment prefix (conda env or venv)")
    g.add_argument("--python", metavar="EXE", help="the target's Python executable")
    p.add_argument("--probe-timeout", type=positive_float, default=300.0, metavar="SECONDS",
                   help="how long the probe may run in the target Python (default 300)")


def waiting(p: argparse.ArgumentParser) -> None:
    """The one lock policy: fail at once (exit 5) naming the holder, or wait, at most S seconds."""
    p.add_argument("--wait", action="store_true",
                   help="when another rocmbuild run holds a lock this one needs (the target, a source cache, "
                        "an artifact's build), wait for it instead of failing with exit 5")
    p.add_argument("--wait-timeout", type=positive_float, metavar="S",
                   help="wait at most S seconds for each such lock, then fail with exit 5 (implies --wait)")


def txn_opts(p: argparse.ArgumentParser) -> None:
    waiting(p)


def lock_wait(args: argparse.Namespace) -> LockWait:
    return LockWait.from_options(bool(getattr(args, "wait", False)), getattr(args, "wait_timeout", None))


def overrides_from(args: argparse.Namespace) -> Overrides:
    return Overrides(
        ref=getattr(args, "ref", None),
        source=getattr(args, "source", None),
        defines=tuple(getattr(args, "defines", []) or ()),
        jobs=getattr(args, "jobs", None),
        gpu_targets=getattr(args, "gpu_targets", None),
        launcher=getattr(args, "launcher", None),
    )


def check_one_source(args: argparse.Namespace) -> None:
    """Exactly one of RECIPE, --artifact (apply only), --from-lock; --from-lock takes no overrides."""
    given = [x for x in (args.recipe, getattr(args, "artifact", None), args.from_lock) if x]
    if len(given) != 1:
        raise InputError("give exactly one of: RECIPE, --artifact FILE|URL, --from-lock FILE",
                         "e.g. `rocmbuild apply miopen-3.5.1 --env PREFIX`")
    if args.from_lock and any(overrides_from(args).as_dict().values()):
        raise InputError("--from-lock pins every build override; do not combine it with --ref, -D, ...",
                         "write a new lock with the overrides you want: `rocmbuild lock RECIPE ... -o FILE`")


def positive(text: str, why: str = "") -> int:
    """A count of 1 or more (``--keep``, ``history --limit``); ``why``: said when it is not."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1{why}, got {text}")
    return value
