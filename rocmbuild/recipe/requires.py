"""``[requires]``: the recipe's programs and paths, each a string or a table of alternatives that
may depend on a define, and the hints that say what to install, per distribution.

An entry is ``"cmake>=3.21"`` / ``"/usr/include/bzlib.h"`` (as before), or a table
``{ any = ["A", "B"], when = "DEFINE" }``, ``{ path = "A", when = "DEFINE" }`` (``program = ...``
in ``programs``). A hint is a string or a table keyed by ``rocm`` (AMD's repository), os-release
IDs (``debian``, ``ubuntu``, ``fedora``, ``rhel``, ``sles``, ``arch``, ...) and ``default``.

Decisions:

* ``when`` follows CMake's truthiness on the define's value after ``-D`` overrides: ON for
  ``true``, ``ON``, ``1``, ``YES``, ``Y``, ``TRUE`` (any case) and a non-zero number; an absent
  define, any other string and a list are OFF, and the requirement does not apply.
* A hint is keyed by the entry's text (a string entry), or by any one of a table's alternatives.
* Parsing is strict: an unknown key in an entry gets a "did you mean", a wrong type names the
  entry (``requires.paths[3].when``); a hint table's key is an os-release ID (lower case letters,
  digits, ``._-``): a near miss of a known one (``debain``) is refused with a "did you mean".
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Mapping

from rocmbuild.errors import RecipeError
from rocmbuild.recipe.model import DEFINE_RE, Hint, Need, Recipe, Requirement, Requires

_REQ_RE = re.compile(r"^\s*([^<>=!\s]+)\s*(?:>=\s*([0-9][0-9A-Za-z.+-]*))?\s*$")
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
KNOWN_IDS = ("rocm", "default", "debian", "ubuntu", "linuxmint", "pop", "fedora", "rhel", "centos", "rocky",
             "almalinux", "ol", "sles", "opensuse", "opensuse-leap", "opensuse-tumbleweed", "suse", "arch",
             "manjaro", "endeavouros", "gentoo", "alpine", "nixos", "void")
_TRUE = ("ON", "TRUE", "1", "YES", "Y")


def _fail(path: Path | None, key: str, message: str, hint: str) -> RecipeError:
    return RecipeError(f"{path}: {message}", hint, details={"file": str(path), "key": key})


def _suggest(key: str, choices) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(choices))}"


def split_requirement(spec: str, path: Path | None = None) -> tuple[str, str | None]:
    """``"cmake>=3.25"`` -> ``("cmake", "3.25")``; a bare name has no floor."""
    m = _REQ_RE.match(spec)
    if not m:
        raise RecipeError(
            f"{path}: invalid requirement '{spec}' in requires.programs",
            "write a program name or path, optionally with a version floor: \"cmake>=3.25\"",
            details={"file": str(path), "key": "requires.programs"},
        )
    return m.group(1), m.group(2)


def _entry(kind: str, i: int, e: Any, path: Path) -> Requirement:
    where = f"requires.{kind}[{i}]"
    one = "program" if kind == "programs" else "path"
    shape = f'a string, or a table {{ any = ["A", "B"], when = "DEFINE" }} or {{ {one} = "A", when = "DEFINE" }}'
    if isinstance(e, str):
        if not e.strip():
            raise _fail(path, where, f"'{where}' is empty", f"write {shape}")
        return e
    if not isinstance(e, dict):
        raise _fail(path, where, f"'{where}' must be {shape}, got {type(e).__name__} ({e!r})",
                    "a bundled recipe shows the format: `rocmbuild show miopen-develop`")
    keys = (one, "any", "when")
    for k in e:
        if k not in keys:
            raise _fail(path, f"{where}.{k}", f"unknown key '{k}' in {where}", _suggest(k, keys))
    if (one in e) == ("any" in e):
        raise _fail(path, where, f"{where} needs exactly one of '{one}' and 'any'",
                    f'{one} = "A" for one, any = ["A", "B"] for alternatives')
    alts = [e[one]] if one in e else e["any"]
    label = f"{where}.{one if one in e else 'any'}"
    if not isinstance(alts, list) or not alts or not all(isinstance(a, str) and a.strip() for a in alts):
        raise _fail(path, label, f"'{label}' must be " + ("a non-empty string" if one in e else
                    "a non-empty list of non-empty strings") + f", got {e[one] if one in e else e['any']!r}",
                    f"write {shape}")
    when = e.get("when")
    if when is not None and (not isinstance(when, str) or not DEFINE_RE.match(when)):
        raise _fail(path, f"{where}.when", f"'{where}.when' must name a define (a CMake variable), got {when!r}",
                    'e.g. when = "MIOPEN_USE_HIPBLASLT": the requirement applies only when that define is ON')
    return Need(tuple(alts), when)


def _hint(k: str, v: Any, path: Path) -> Hint:
    where = f"requires.hints.{k}"
    if isinstance(v, str):
        return v
    if not isinstance(v, dict) or not v:
        raise _fail(path, where, f"hint for '{k}' must be a string or a table of strings keyed by distribution",
                    'e.g. "apt install rocm-llvm", or { rocm = "apt install rocm-llvm", debian = "apt install '
                    'clang-22", default = "..." }')
    for d, text in v.items():
        if not _ID_RE.match(d):
            raise _fail(path, f"{where}.{d}", f"'{d}' in the hint for '{k}' is not an os-release ID",
                        "use rocm (AMD's repository), default, or an ID of /etc/os-release (debian, ubuntu, fedora, ...)")
        close = difflib.get_close_matches(d, KNOWN_IDS, n=1, cutoff=0.75)
        if d not in KNOWN_IDS and close:
            raise _fail(path, f"{where}.{d}", f"unknown distribution '{d}' in the hint for '{k}'",
                        f"did you mean '{close[0]}'?")
        if not isinstance(text, str) or not text.strip():
            raise _fail(path, f"{where}.{d}", f"'{where}.{d}' must be a non-empty string, got {text!r}",
                        'e.g. debian = "apt install libhalf-dev"')
    return tuple(sorted(v.items()))


def parse_requires(r: Mapping[str, Any], path: Path) -> Requires:
    for k in r:
        if k not in ("programs", "paths", "hints"):
            raise _fail(path, f"requires.{k}", f"unknown key 'requires.{k}' in [requires]",
                        _suggest(k, ("programs", "paths", "hints")))
    lists = {}
    for kind in ("programs", "paths"):
        raw = r.get(kind, [])
        if not isinstance(raw, list):
            raise _fail(path, f"requires.{kind}", f"'requires.{kind}' must be a list, got {type(raw).__name__}",
                        f'{kind} = ["A", {{ any = ["B", "C"], when = "DEFINE" }}]')
        lists[kind] = tuple(_entry(kind, i, e, path) for i, e in enumerate(raw))
    for e in lists["programs"]:
        for alt in (e.any if isinstance(e, Need) else (e,)):
            split_requirement(alt, path)
    hints = r.get("hints", {})
    if not isinstance(hints, dict):
        raise _fail(path, "requires.hints", f"'requires.hints' must be a table, got {type(hints).__name__}",
                    'write [requires.hints] with "requirement" = "apt install ..." lines')
    named = [t for e in (*lists["programs"], *lists["paths"]) for t in (e.any if isinstance(e, Need) else (e,))]
    parsed = []
    for k, v in hints.items():
        if k not in named and k not in [e.name for e in (*lists["programs"], *lists["paths"]) if isinstance(e, Need)]:
            raise _fail(path, f"requires.hints.{k}", f"hint for '{k}', which is not in requires.programs or paths",
                        _suggest(k, named))
        parsed.append((k, _hint(k, v, path)))
    return Requires(lists["programs"], lists["paths"], tuple(sorted(parsed)))


# --------------------------------------------------------------------------------------------
# when


def define_on(value) -> bool:
    """CMake's truthiness of a define's value (the module notes)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        v = value.strip().upper()
        if v in _TRUE:
            return True
        try:
            return float(v) != 0
        except ValueError:
            return False
    return False


def skipped(n: Need, recipe: Recipe) -> str | None:
    """Why ``n`` does not apply to ``recipe`` (its defines after ``-D``), or None when it does."""
    if n.when is None:
        return None
    value = recipe.build.define(n.when)
    if value is None:
        return f"not needed: {n.when} is not set"
    if define_on(value):
        return None
    shown = "OFF" if value is False else repr(value) if not isinstance(value, str) else value
    return f"not needed: {n.when} is {shown}"
