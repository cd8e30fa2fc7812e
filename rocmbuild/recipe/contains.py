"""``[source] contains``: the fixes a recipe's source must contain, parsed strictly.

Each entry is a table with ``name`` (required, non-empty, unique in the recipe) and exactly one
of ``grep`` (a fixed string, searched in the files under ``path``) and ``commit`` (40 hex digits:
an ancestor of the checked-out commit). ``path`` (only with ``grep``; default: the whole source
directory) is relative to the source directory (below ``subdir``) and in its clean form: no
``..``, ``.``, empty component, leading or trailing ``/``. Unknown keys are refused with a "did
you mean". The check itself runs after the fetch (:mod:`rocmbuild.sources.fixes`).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from rocmbuild.errors import RecipeError
from rocmbuild.recipe.model import Fix

KEYS = ("name", "grep", "path", "commit")
_SHA_RE = re.compile(r"[0-9a-fA-F]{40}")
_EXAMPLE = ('contains = [{ name = "gfx115x batch-norm fix", grep = "MIO_BN_GFX115X", path = "src/kernels" }, '
            '{ name = "...", commit = "<40-hex sha>" }]')


def _fail(path: Path, key: str, message: str, hint: str = _EXAMPLE) -> RecipeError:
    return RecipeError(f"{path}: {message}", hint, details={"file": str(path), "key": key})


def clean_relative(value: str) -> bool:
    """A relative path in its normal form (``src/kernels``), or "" for the whole tree."""
    if value == "":
        return True
    if value.startswith("/") or value.endswith("/") or any(ord(c) < 32 or c == "\x7f" for c in value):
        return False
    return all(part not in ("", ".", "..") for part in value.split("/"))


def parse_contains(value: Any, path: Path, *, git: bool = True) -> tuple[Fix, ...]:
    """``[source] contains`` (a list of tables) -> the fixes; RecipeError (exit 2) naming the entry.
    A ``commit`` needs a git source (an archive has no history)."""
    if not isinstance(value, list):
        raise _fail(path, "source.contains", f"'source.contains' must be a list of tables, got {type(value).__name__}")
    fixes = tuple(_entry(item, f"source.contains[{i}]", path) for i, item in enumerate(value))
    seen: set[str] = set()
    for i, fix in enumerate(fixes):
        if fix.name in seen:
            raise _fail(path, f"source.contains[{i}].name", f"two fixes are named {fix.name!r}",
                        "give each fix its own name")
        seen.add(fix.name)
        if fix.commit and not git:
            raise _fail(path, f"source.contains[{i}].commit", f"fix {fix.name!r} names a commit, and an archive "
                        "source has no history to find it in", "use grep = \"...\" (a string the fix adds)")
    return fixes


def _entry(item: Any, key: str, path: Path) -> Fix:
    if not isinstance(item, dict):
        raise _fail(path, key, f"'{key}' must be a table, got {type(item).__name__}")
    for k, v in item.items():
        if k not in KEYS:
            close = difflib.get_close_matches(k, KEYS, n=1, cutoff=0.6)
            raise _fail(path, f"{key}.{k}", f"unknown key '{k}' in {key}",
                        f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(KEYS)}")
        if not isinstance(v, str):
            raise _fail(path, f"{key}.{k}", f"'{key}.{k}' must be a string, got {type(v).__name__}",
                        "each of name, grep, path and commit is a string, e.g. { name = \"gfx115x batch-norm fix\", grep = "
                        "\"MIO_BN_GFX115X\", path = \"src/kernels\" } (`rocmbuild show miopen-develop` has one)")
    name = item.get("name", "").strip()
    if not name:
        raise _fail(path, f"{key}.name", f"{key} needs a 'name' (what the fix is, shown by show, status and the "
                    "manifest)")
    if ("grep" in item) == ("commit" in item):
        raise _fail(path, key, f"{key} ({name!r}) needs exactly one of 'grep' and 'commit'")
    if "commit" in item:
        if "path" in item:
            raise _fail(path, f"{key}.path", f"'path' applies to 'grep', not to 'commit' ({name!r})", "remove path")
        if not _SHA_RE.fullmatch(item["commit"]):
            raise _fail(path, f"{key}.commit", f"{key}.commit must be a full commit sha (40 hex digits), got "
                        f"{item['commit']!r}", "write the whole sha: git rev-parse COMMIT")
        return Fix(name=name, commit=item["commit"].lower())
    if not item["grep"]:
        raise _fail(path, f"{key}.grep", f"{key}.grep ({name!r}) is empty", "give the string the fix adds")
    where = item.get("path", "")
    if not clean_relative(where):
        raise _fail(path, f"{key}.path", f"{key}.path {where!r} must be a clean relative path inside the source "
                    "(below subdir)", "e.g. src/kernels (no '..', '.', '//', leading or trailing '/')")
    return Fix(name=name, grep=item["grep"], path=where)
