"""The config file(s): defaults a machine (or a user) sets once, instead of on every command.

Read in order, a later file winning key by key: ``/etc/rocmbuild/config.toml`` (the machine),
``$XDG_CONFIG_HOME/rocmbuild/config.toml`` (default ``~/.config/rocmbuild/config.toml``, the
user), then the file ``$ROCMBUILD_CONFIG`` names (a run, a CI job). The command line wins over
all of them. A file that does not exist is skipped; ``$ROCMBUILD_CONFIG`` naming a missing file is
an error (it was asked for); a default path that is a directory, a FIFO or a socket is a file that
cannot be read (below), never skipped silently and never read (a FIFO would block forever).

Keys (anything else is ignored with a warning and a "did you mean" for a near miss)::

    jobs = 8                       # build --jobs
    gpu_targets = "gfx1151"        # --gpu-targets (a string, as on the command line)
    launcher = "ccache"            # --launcher: auto, none, ccache, sccache
    keep = 5                       # apply/rollback --keep
    run_as = "owner"               # --run-as: as root, another user's env runs as its owner (refuse, root)
    [[caches]]                     # binary caches, looked up in order (docs/caches.md)
    url = "oci://registry.lab:5000/rocmbuild"
    push = true                    # `rocmbuild push` without --to uploads here
    username_env = "LAB_REGISTRY_USER"   # the NAMES of env vars holding credentials, never secrets
    password_env = "LAB_REGISTRY_TOKEN"
    insecure = false               # plain HTTP to a host that is not loopback
    ca_bundle = "/etc/ssl/lab-ca.pem"
    [trust]
    public_keys = ["lab-1:BASE64..."]
    [sign]
    key = "/etc/rocmbuild/lab-1.secret"

Decisions:
* ``[[caches]]`` and ``[trust] public_keys`` are lists: a later file *replaces* an earlier file's
  list (it does not add to it), so a user's file can narrow what the machine trusts and the
  source of each value stays one file.
* An unknown key (a typo, a key of a newer release) is a warning, said once per run, and
  ignored: one bad line pushed to a fleet must not stop every rocmbuild there (``status`` above
  all). A wrong type or value of a known key (also a relative ``ca_bundle`` or ``[sign] key``:
  relative to what?), and a file that is not valid TOML (all its keys), are kept as
  :attr:`Config.problems`: a verb that uses that key refuses (exit 2, naming the file, the key and
  what is expected) when it asks for it (:meth:`Config.require`); a verb that does not use it runs,
  after one warning. ``allow_unsigned`` is never a config key: trusting unsigned artifacts is a
  per-command decision (``--allow-unsigned``).
* :class:`Config` is frozen; ``sources`` names, per key, the file that set it.
* A cache URL holding credentials (``oci://user:token@host/repo``, ``https://user:pw@host/``) is
  refused (exit 2, the URL shown as ``***@host``), in a file and on the command line
  (:meth:`Config.cache`, ``--cache``): a URL is printed in messages and JSON and stored in
  provenance files (0644), so secrets go only through ``username_env``/``password_env`` (or
  Docker's config).
"""

from __future__ import annotations

import difflib
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rocmbuild.errors import InputError
from rocmbuild.names import safe_text

SYSTEM_FILE = Path("/etc/rocmbuild/config.toml")
LAUNCHERS = ("auto", "none", "ccache", "sccache")

#: top-level key -> (expected Python type, its name in messages)
SCALARS: dict[str, tuple[type, str]] = {"jobs": (int, "an integer"), "gpu_targets": (str, "a string"),
                                        "launcher": (str, "a string"), "keep": (int, "an integer"),
                                        "run_as": (str, "a string")}
RUN_AS = ("owner", "refuse", "root")
TABLES = ("caches", "trust", "sign")
CACHE_KEYS: dict[str, tuple[type, str]] = {"url": (str, "a string"), "push": (bool, "true or false"),
                                           "username_env": (str, "a string"), "password_env": (str, "a string"),
                                           "insecure": (bool, "true or false"), "ca_bundle": (str, "a string")}
TRUST_KEYS = {"public_keys": (list, "a list of strings")}
SIGN_KEYS = {"key": (str, "a string")}


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


# What urllib's parser drops before reading a URL (Python >= 3.11.4): C0 controls and spaces in
# front, tabs and newlines anywhere. ``urlparse(" oci://u:p@h/r").netloc`` is ``u:p@h``.
_LEADING = "".join(map(chr, range(0x21)))
_DROPPED = str.maketrans("", "", "\t\r\n")


def _as_parsed(url: str) -> str:
    """``url`` as urllib reads it (what the scheme dispatch, the registry's host and requests see)."""
    return url.lstrip(_LEADING).translate(_DROPPED)


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` in its authority shown as ``***@`` (what a message, a
    JSON answer or a file may hold of a URL). Judged on the URL as urllib reads it: a space in
    front or a tab in the scheme hides nothing."""
    seen = _as_parsed(url)
    if seen.lower().startswith("oci://") and "@" in seen:  # no repository name holds an @: all of it goes
        return "oci://***@" + seen.rpartition("@")[2]
    red = _USERINFO.sub(r"\1***@", seen)
    return red if red != seen else url


def check_cache_url(url: str) -> str:
    """``url`` when it holds no credentials and nothing urllib would drop; else InputError (exit
    2) naming it redacted, with the way credentials are given (the URL's secret is never repeated)."""
    if redact_url(url) != url and "***@" in redact_url(url):
        raise InputError(f"{safe_text(redact_url(url))}: the cache URL holds credentials (user:password@), which are "
                         "refused: they would be shown in messages, JSON and provenance files",
                         "remove them from the URL; put them in environment variables and name those in the "
                         "cache's [[caches]] entry (username_env, password_env), or run `docker login HOST` for "
                         "an oci:// cache", details={"url": redact_url(url)})
    if _as_parsed(url) != url:
        raise InputError(f"{safe_text(url)}: the cache URL starts with a space or a control character, or holds a "
                         "tab or a newline", "write the URL without them", details={"url": url})
    return url


@dataclass(frozen=True)
class CacheConfig:
    """One ``[[caches]]`` entry (or a ``--cache``/``--to`` URL: everything else default)."""

    url: str
    push: bool = False
    username_env: str | None = None
    password_env: str | None = None
    insecure: bool = False
    ca_bundle: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "push": self.push, "username_env": self.username_env,
                "password_env": self.password_env, "insecure": self.insecure, "ca_bundle": self.ca_bundle}


@dataclass(frozen=True)
class Config:
    jobs: int | None = None
    gpu_targets: str | None = None
    launcher: str | None = None
    keep: int | None = None
    run_as: str | None = None
    caches: tuple[CacheConfig, ...] = ()
    public_keys: tuple[str, ...] = ()
    sign_key: str | None = None
    #: key ("jobs", "caches", "trust.public_keys", "sign.key", ...) -> the file that set it
    sources: Mapping[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # the files read, in order
    #: key -> why its value cannot be used (``""``: a whole file that is not valid TOML)
    problems: Mapping[str, InputError] = field(default_factory=dict)

    def require(self, *names: str) -> "Config":
        """This config, when none of ``names`` (``jobs``, ``caches``, ``trust.public_keys``, ``sign.key``,
        ...) has a bad value (nor is in a file that cannot be parsed); else that InputError (exit 2)."""
        for name in ("", *names):
            if name in self.problems and (name or names):
                raise self.problems[name]
        return self

    def cache(self, url: str) -> CacheConfig:
        """The configured entry for ``url`` (its credentials, CA...), else a bare one; a URL
        holding credentials is exit 2 (:func:`check_cache_url`)."""
        check_cache_url(url)
        for c in self.caches:
            if c.url.rstrip("/") == url.rstrip("/"):
                return c
        return CacheConfig(url)


def user_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rocmbuild" / "config.toml"


def candidates(system: Path = SYSTEM_FILE) -> list[tuple[Path, bool]]:
    """(file, required) in reading order."""
    out = [(system, False), (user_file(), False)]
    named = os.environ.get("ROCMBUILD_CONFIG")
    if named:
        out.append((Path(named).expanduser(), True))
    return out


def _suggest(key: str, choices) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(choices))}"


def _bad(path: Path, key: str, message: str, hint: str) -> InputError:
    return InputError(f"{path}: {message}", hint, details={"file": str(path), "key": key})


_warned: set[tuple[str, str]] = set()  # (file, key) said already in this run


def _unknown(path: Path, key: str, choices) -> None:
    """An unknown key: a warning (once per run), the key ignored."""
    if (str(path), key) in _warned:
        return
    _warned.add((str(path), key))
    from rocmbuild import ui

    ui.warn(f"{path}: unknown key '{key}' ignored; {_suggest(key.rsplit('.', 1)[-1], choices)} "
            "(`rocmbuild config list` shows every key and its value)")


def warn_unused(cfg: "Config", used: tuple[str, ...]) -> None:
    """The problems of the keys a verb does not use (``used``: those it required): a warning each,
    once per run; the verb goes on."""
    for name, problem in cfg.problems.items():
        where = (problem.details.get("file", ""), "bad:" + name)
        if (name and name in used) or where in _warned:
            continue
        _warned.add(where)
        from rocmbuild import ui

        ui.warn(f"{problem.message}; not used by this command, so it goes on ({problem.hint})")


def _typed(path: Path, key: str, value: Any, spec: tuple[type, str]) -> Any:
    typ, name = spec
    ok = isinstance(value, typ) and not (typ is int and isinstance(value, bool))
    if typ is list:
        ok = ok and all(isinstance(x, str) for x in value)
    if not ok:
        raise _bad(path, key, f"'{key}' must be {name}, not {type(value).__name__} {value!r:.60}",
                   f"fix '{key}' in {path}")
    return value


def _table(path: Path, name: str, value: Any, spec: Mapping[str, tuple[type, str]]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(path, name, f"'{name}' must be a table ([{name}]), not {type(value).__name__}", f"fix it in {path}")
    out = {}
    for k, v in value.items():
        if k not in spec:
            _unknown(path, f"{name}.{k}", spec)
            continue
        out[k] = _typed(path, f"{name}.{k}", v, spec[k])
    return out


def _caches(path: Path, value: Any) -> tuple[CacheConfig, ...]:
    if not isinstance(value, list):
        raise _bad(path, "caches", "'caches' must be an array of tables ([[caches]])", f"fix it in {path}")
    out = []
    for i, entry in enumerate(value):
        t = _table(path, f"caches[{i}]", entry, CACHE_KEYS)
        if "url" not in t:
            raise _bad(path, f"caches[{i}]", f"[[caches]] entry {i + 1} has no url",
                       'add url = "oci://HOST/REPO" (or file:///DIR, https://HOST/PATH)')
        if redact_url(t["url"]) != t["url"]:
            raise _bad(path, f"caches[{i}].url", f"[[caches]] entry {i + 1}: its url {redact_url(t['url'])} holds "
                       "credentials (user:password@), which are refused: they would be shown in messages, JSON and "
                       "provenance files", f"remove them from the URL in {path}; put them in environment variables "
                       "and name those with username_env and password_env in the entry")
        if t.get("ca_bundle") and not os.path.isabs(t["ca_bundle"]):
            raise _bad(path, f"caches[{i}].ca_bundle", "ca_bundle must be an absolute path", f"fix it in {path}")
        out.append(CacheConfig(**t))
    return tuple(out)


def _check_values(path: Path, values: dict[str, Any]) -> None:
    if "jobs" in values and values["jobs"] < 0:
        raise _bad(path, "jobs", "'jobs' must be 0 (all cores) or more", f"fix it in {path}")
    if "keep" in values and values["keep"] < 1:
        raise _bad(path, "keep", "'keep' must be at least 1", f"fix it in {path}")
    if "launcher" in values and values["launcher"] not in LAUNCHERS:
        raise _bad(path, "launcher", f"'launcher' must be one of {', '.join(LAUNCHERS)}, not {values['launcher']!r}",
                   f"fix it in {path}")
    if "run_as" in values and values["run_as"] not in RUN_AS:
        raise _bad(path, "run_as", f"'run_as' must be one of {', '.join(RUN_AS)}, not {values['run_as']!r}",
                   f"fix it in {path}")
    key = values.get("sign.key")
    if key is not None and not os.path.isabs(key):
        raise _bad(path, "sign.key", "[sign] key must be an absolute path", f"fix it in {path}")


def parse_file(path: Path) -> dict[str, Any]:
    """One file's settings, flattened: ``jobs``, ``caches``, ``trust.public_keys``, ``sign.key``;
    the first bad value raised (:func:`read_file` keeps each key's problem instead)."""
    values, problems = read_file(path)
    if problems:
        raise next(iter(problems.values()))
    return values


def _one(path: Path, k: str, v: Any) -> dict[str, Any]:
    if k in SCALARS:
        return {k: _typed(path, k, v, SCALARS[k])}
    if k == "caches":
        return {"caches": _caches(path, v)}
    if k == "trust":
        return {f"trust.{n}": tuple(x) for n, x in _table(path, "trust", v, TRUST_KEYS).items()}
    if k == "sign":
        return {f"sign.{n}": x for n, x in _table(path, "sign", v, SIGN_KEYS).items()}
    _unknown(path, k, [*SCALARS, *TABLES])
    return {}


# a problem under a table stands for the setting a verb asks for
_SETTING = {"trust": "trust.public_keys", "sign": "sign.key"}


class _NotAFile(Exception):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _read(path: Path) -> str:
    """A config file's text; a path that is no regular file (a directory, a FIFO that would block
    the read forever, a socket) raises :class:`_NotAFile` saying what it is."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _NotAFile("directory" if stat.S_ISDIR(mode) else "FIFO" if stat.S_ISFIFO(mode) else "special file")
    with os.fdopen(fd, "rb") as f:
        return f.read().decode()


def read_file(path: Path) -> tuple[dict[str, Any], dict[str, InputError]]:
    """One file's settings, flattened, and the problem of each key whose value is bad (``""``:
    the whole file cannot be read). Unknown keys warn and are ignored."""
    try:
        data = tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as exc:
        return {}, {"": _bad(path, "", f"not valid TOML: {exc}", "fix the syntax (https://toml.io)")}
    except _NotAFile as exc:  # a directory, FIFO, socket, device: never read (a FIFO would hang)
        return {}, {"": _bad(path, "", f"is a {exc.what}, not a config file",
                             "a config file is a TOML file: move that away and write the settings into a file "
                             "of that name (or leave the path absent)")}
    except (OSError, UnicodeDecodeError) as exc:
        return {}, {"": _bad(path, "", f"cannot read the config file: {exc}", "fix its permissions or remove it")}
    values: dict[str, Any] = {}
    problems: dict[str, InputError] = {}
    for k, v in data.items():
        try:
            got = _one(path, k, v)
            _check_values(path, got)
            values.update(got)
        except InputError as exc:
            problems[_SETTING.get(k, k)] = exc
    return values, problems


def load(system: Path = SYSTEM_FILE) -> Config:
    """The effective config from every file that exists (see the module notes)."""
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    problems: dict[str, InputError] = {}
    files = []
    for path, required in candidates(system):
        if required and not path.is_file():
            raise InputError(f"ROCMBUILD_CONFIG names {path}, which is not a file",
                             "point ROCMBUILD_CONFIG at a config.toml, or unset it")
        if not os.path.exists(path):  # absent (a dangling link too): nothing set there
            continue
        files.append(str(path))
        values, bad = read_file(path)
        for k, v in values.items():
            merged[k], sources[k] = v, str(path)
            problems.pop(k, None)  # a later file's good value replaces an earlier bad one
        problems.update(bad)
    return Config(jobs=merged.get("jobs"), gpu_targets=merged.get("gpu_targets"), launcher=merged.get("launcher"),
                  keep=merged.get("keep"), run_as=merged.get("run_as"), caches=merged.get("caches", ()),
                  public_keys=merged.get("trust.public_keys", ()), sign_key=merged.get("sign.key"),
                  sources=sources, files=tuple(files), problems=problems)


#: what is in effect when no file sets a key (``config list`` says it instead of "not set")
DEFAULTS = {
    "jobs": "the recipe's [build] jobs, else all cores",
    "gpu_targets": "the recipe's GPU_TARGETS (the bundled recipes: \"auto\", this machine's GPUs)",
    "launcher": "the recipe's [build] launcher, else auto (ccache when installed)",
    "keep": "5 (apply, rollback and redo keep the backups of the newest 5 transactions)",
    "run_as": "owner (as root, another user's environment is activated and probed as that user)",
    "caches": "none: no binary cache is asked (--cache URL asks one)",
    "trust.public_keys": "none: no signer is trusted (a cache's artifacts are refused unless --allow-unsigned)",
    "sign.key": "none: push needs --sign-key FILE",
}

#: the setting names ``config list`` shows, in order, with the attribute holding each
SETTINGS = (("jobs", "jobs"), ("gpu_targets", "gpu_targets"), ("launcher", "launcher"), ("keep", "keep"),
            ("run_as", "run_as"),
            ("caches", "caches"), ("trust.public_keys", "public_keys"), ("sign.key", "sign_key"))
