"""Argument types and the option groups the verbs share.

Usage errors raise instead of exiting (:class:`Parser`), so they honour ``--json`` and exit 2.

Decision: the global flags (:data:`GLOBAL_FLAGS`) are accepted before and after the verb. The
top-level parser stores them as ``<dest>_before``; every verb's parser (``app.build_parser`` adds
them to each, so a verb added later needs nothing) defaults them to ``SUPPRESS``, so a flag given
only before the verb is not reset by the verb's parser; :func:`merge_globals` joins the two.
"""

from __future__ import annotations

import argparse
import difflib
import re
from typing import TYPE_CHECKING, NoReturn

from rocmbuild.errors import InputError
from rocmbuild.fs.locks import LockWait

if TYPE_CHECKING:  # the recipe package is imported by the verbs that read one
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
    """argparse that raises instead of exiting, so usage errors honour --json and exit 2; help
    text keeps its line breaks (the examples)."""

    has_globals = False

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # `--t 0` is not `--to 0`: a script's typo is an error
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(did_you_mean(message), self.format_usage().strip())


_CHOICE = re.compile(r"invalid choice: '?([^'\s]*)'? \(choose from (.*)\)$")


def did_you_mean(message: str) -> str:
    """argparse's "invalid choice" with the nearest choice named first (``rocmbuild aply``:
    did you mean apply?); any other message as it is."""
    m = _CHOICE.search(message)
    if not m:
        return message
    choices = [c.strip(" '") for c in m.group(2).split(",")]
    near = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
    return message[:m.start()] + f"invalid choice: '{m.group(1)}'" + (
        f": did you mean {near[0]}?" if near else "") + f" (choose from {', '.join(choices)})"


_UNKNOWN = re.compile(r"^unrecognized arguments: (.*)$")


def suggest_option(message: str, parser: argparse.ArgumentParser) -> str:
    """argparse's "unrecognized arguments: --envv /x" with the nearest option of ``parser`` (the
    verb's) named: ``(--envv: did you mean --env?)``; any other message as it is."""
    m = _UNKNOWN.match(message)
    if not m:
        return message
    known = [s for act in parser._actions for s in act.option_strings if s.startswith("--")]
    said = []
    for word in m.group(1).split(" "):
        flag = word.split("=", 1)[0]
        near = difflib.get_close_matches(flag, known, n=1, cutoff=0.75) if flag.startswith("--") else []
        said += [f"{flag}: did you mean {near[0]}?"] if near else []
    return message + (f" ({'; '.join(said)})" if said else "")


# --------------------------------------------------------------------------------------------
# shared option groups


#: the global flags: (option strings, argparse keywords); accepted before or after the verb
GLOBAL_FLAGS: tuple[tuple[tuple[str, ...], dict], ...] = (
    (("--json",), {"action": "store_true", "help": "print exactly one JSON object on stdout"}),
    (("-q", "--quiet"), {"action": "store_true", "help": "one line per result on stdout (doctor: only what fails); "
                                                       "only errors and warnings on stderr"}),
    (("-v", "--verbose"), {"action": "count", "help": "each command run, and its output (a build's) live on stderr; "
                                                      "-vv: also rocmbuild's debug lines (-q wins)"}),
    (("--debug",), {"action": "store_true", "help": "show tracebacks"}),
)


def _dest(names: tuple[str, ...]) -> str:
    return names[-1].lstrip("-").replace("-", "_")


def common(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """The global flags (idempotent: ``app.build_parser`` calls it for every verb's parser)."""
    if getattr(p, "has_globals", False):
        return
    g = p.add_argument_group("global options") if top else p
    for names, kw in GLOBAL_FLAGS:
        dest = _dest(names)
        if top:
            g.add_argument(*names, dest=f"{dest}_before", default=0 if kw["action"] == "count" else False, **kw)
        else:
            g.add_argument(*names, dest=dest, default=argparse.SUPPRESS, **kw)
    if top:  # `rocmbuild -n torch status`: the env name may come before the verb too
        g.add_argument("-n", "--name", dest="env_name_before", metavar="NAME", default=None,
                       help="a conda env by name, for the verbs that take --env (also after the verb)")
    p.has_globals = True  # type: ignore[attr-defined]  # our parser class's mark, set on the instance


def merge_globals(args: argparse.Namespace) -> argparse.Namespace:
    """One value per global flag from its two places (counts add up)."""
    for names, kw in GLOBAL_FLAGS:
        dest = _dest(names)
        before, after = getattr(args, f"{dest}_before", None), getattr(args, dest, None)
        if kw["action"] == "count":
            value: object = (before or 0) + (after or 0)
        else:
            value = bool(before or after)
        setattr(args, dest, value)
        if hasattr(args, f"{dest}_before"):
            delattr(args, f"{dest}_before")
    _merge_env_name(args)
    return args


def _merge_env_name(args: argparse.Namespace) -> None:
    """``-n NAME`` before the verb: the verb must take a target, and not be given one after it."""
    name = getattr(args, "env_name_before", None)
    if hasattr(args, "env_name_before"):
        delattr(args, "env_name_before")
    if name is None:
        return
    verb = getattr(args, "verb", None) or "this verb"
    if not hasattr(args, "env_name"):
        raise UsageError(f"-n/--name: `{verb}` takes no target environment",
                         "give -n NAME only with the verbs that take --env (apply, status, rollback, ...)")
    if any(getattr(args, k, None) for k in ("env_name", "env", "python")):
        raise UsageError("-n/--name before the verb, and another target after it: give one target",
                         f"e.g. `rocmbuild -n {name} {verb}`")
    args.env_name = name


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
    g.add_argument("--launcher", choices=["auto", "none", "ccache", "sccache"],
                   help="compiler launcher (cache); auto: ccache when installed")


def recipe_options(p: argparse.ArgumentParser) -> None:
    """What every verb taking a recipe accepts: the common options, recipe dirs, build overrides."""
    common(p)
    recipe_dirs(p)
    overrides(p)


def target(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--env", metavar="PREFIX", help="the environment prefix (conda env or venv)")
    g.add_argument("-n", "--name", dest="env_name", metavar="NAME",
                   help="a conda environment by name (as `conda activate NAME`)")
    g.add_argument("--python", metavar="EXE", help="the target's Python executable")
    p.add_argument("--probe-timeout", type=positive_float, default=300.0, metavar="SECONDS",
                   help="how long the probe may run in the target Python (default 300)")
    p.add_argument("--run-as", choices=("owner", "refuse", "root"),
                   help="run as root on an environment another user owns: run its code (activation, Python, "
                        "torch) as that owner (default; config run_as), refuse (exit 2), or as root anyway")


def waiting(p: argparse.ArgumentParser) -> None:
    """The one lock policy: fail at once (exit 5) naming the holder, or wait, at most S seconds."""
    p.add_argument("--wait", action="store_true",
                   help="when another rocmbuild run holds a lock this one needs (the target, a source cache, "
                        "an artifact's build), wait for it instead of failing with exit 5")
    p.add_argument("--wait-timeout", type=positive_float, metavar="S",
                   help="wait at most S seconds for each such lock, then fail with exit 5 (implies --wait)")


def binary_caches(p: argparse.ArgumentParser) -> None:
    """Substitution from binary caches (docs/caches.md): build and apply of a recipe or lock file."""
    g = p.add_argument_group("binary caches (substitution before building)")
    g.add_argument("--cache", dest="caches", action="append", default=[], metavar="URL",
                   help="also look the artifact up in this cache (oci://, file://, https://), before the "
                        "config's [[caches]] (repeatable)")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--no-cache", action="store_true", help="do not look in any binary cache (build here)")
    x.add_argument("--offline", action="store_true",
                   help="touch no network at all: no cache lookup, no git ls-remote or fetch (a named ref is "
                        "taken from the cached artifact of this recipe)")
    g.add_argument("--fresh", action="store_true",
                   help="build anew even when the artifact is cached (here or in a binary cache); the new build "
                        "replaces the cached one")
    g.add_argument("--require-cache", action="store_true",
                   help="never compile: an artifact no cache supplies is an error (exit 3)")
    g.add_argument("--allow-unsigned", action="store_true",
                   help="use an artifact that is unsigned or signed by an untrusted key (this command only)")


def cache_options(args: argparse.Namespace, *, allow_other_arch: bool = False):
    """The :class:`~rocmbuild.flows.substitute.CacheOptions` the flags of :func:`binary_caches` give."""
    from rocmbuild.flows.substitute import CacheOptions

    if args.fresh and args.require_cache:
        raise UsageError("--fresh builds here; --require-cache never builds: give one of them",
                         "rocmbuild build --fresh RECIPE")
    return CacheOptions(urls=tuple(args.caches), no_cache=args.no_cache, require=args.require_cache,
                        offline=args.offline, allow_unsigned=args.allow_unsigned, allow_other_arch=allow_other_arch,
                        fresh=args.fresh)


def txn_opts(p: argparse.ArgumentParser) -> None:
    waiting(p)


def lock_wait(args: argparse.Namespace) -> LockWait:
    return LockWait.from_options(bool(getattr(args, "wait", False)), getattr(args, "wait_timeout", None))


def overrides_from(args: argparse.Namespace) -> Overrides:
    from rocmbuild.recipe import Overrides

    return Overrides(
        ref=getattr(args, "ref", None),
        source=getattr(args, "source", None),
        defines=tuple(getattr(args, "defines", []) or ()),
        jobs=getattr(args, "jobs", None),
        gpu_targets=getattr(args, "gpu_targets", None),
        launcher=getattr(args, "launcher", None),
    )


def config_defaults(args: argparse.Namespace) -> None:
    """The config file's ``jobs``, ``gpu_targets``, ``launcher`` (not with ``--from-lock``, which pins
    them) and ``keep`` (apply, rollback, redo) where the command line gave none: the flag wins."""
    from rocmbuild import config

    cfg = config.load()
    used = config_keys_used(args)
    cfg.require(*used)  # a bad value of a key this verb uses: exit 2; any other: a warning
    config.warn_unused(cfg, used)
    if not getattr(args, "from_lock", None):
        for name in ("jobs", "gpu_targets", "launcher"):
            if hasattr(args, name) and getattr(args, name) is None:
                setattr(args, name, getattr(cfg, name))
    if getattr(args, "verb", None) in ("apply", "rollback", "redo") and args.keep is None:
        args.keep = cfg.keep or 5
    from rocmbuild.proc import runas

    runas.set_policy(getattr(args, "run_as", None) or cfg.run_as or "owner")  # a bad run_as: None, "owner"


def config_keys_used(args: argparse.Namespace) -> tuple[str, ...]:
    """The config keys this command reads (a bad value of one of them refuses it, exit 2): the
    build overrides it has no flag for, ``keep`` (apply, rollback, redo), the binary caches and
    trusted keys (a lookup: not with --no-cache, --offline or apply --artifact), ``push``'s caches
    and signing key;
    ``config list`` shows them all."""
    from rocmbuild import config

    verb = getattr(args, "verb", None)
    if verb == "config":
        return tuple(name for name, _ in config.SETTINGS)
    used = [] if getattr(args, "from_lock", None) else [
        n for n in ("jobs", "gpu_targets", "launcher") if hasattr(args, n) and getattr(args, n) is None]
    used += ["keep"] if verb in ("apply", "rollback", "redo") and getattr(args, "keep", None) is None else []
    if hasattr(args, "caches") and not any(getattr(args, n, None) for n in ("no_cache", "offline", "artifact")):
        used += ["caches", "trust.public_keys"]
    if verb == "push":
        used += ["caches", "sign.key"]
    if getattr(args, "remote", None):
        used += ["caches", "trust.public_keys"]
    return tuple(dict.fromkeys(used))  # not run_as: a bad one is warned about and the safe default used


def check_one_source(args: argparse.Namespace) -> None:
    """Exactly one of RECIPE, --artifact (apply only), --from-lock; --from-lock takes no overrides."""
    given = [x for x in (args.recipe, getattr(args, "artifact", None), args.from_lock) if x]
    if len(given) != 1:
        raise InputError("give exactly one of: RECIPE, --artifact FILE|URL, --from-lock FILE",
                         "e.g. `rocmbuild apply miopen-3.5.1 --env PREFIX`")
    if args.from_lock and any(overrides_from(args).as_dict().values()):
        raise InputError("--from-lock pins every build override; do not combine it with --ref, -D, ...",
                         "write a new lock with the overrides you want: `rocmbuild lock RECIPE ... -o FILE`")


def resolve_env_name(args: argparse.Namespace) -> None:
    """``-n NAME`` (any verb with --env): the conda env's prefix becomes ``args.env``."""
    name = getattr(args, "env_name", None)
    if name is None:
        return
    from rocmbuild import ui
    from rocmbuild.environment import envs, target

    args.env = str(envs.find(name))
    target.named(args.env, name)
    ui.info(f"environment {name}: {args.env}")


def check_target_paths(args: argparse.Namespace) -> None:
    """``--env`` / ``--python`` (and ``-n NAME``'s prefix) must be UTF-8 paths: refused here, before
    any build (exit 2), with the path shown escaped; ``target.resolve`` checks what it finds too."""
    from rocmbuild.environment import target

    for flag in ("env", "python"):
        value = getattr(args, flag, None)
        if value:
            target.require_utf8(value, f"--{flag}")


def positive(text: str, why: str = "") -> int:
    """A count of 1 or more (``--keep``, ``history --limit``); ``why``: said when it is not."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1{why}, got {text}")
    return value
