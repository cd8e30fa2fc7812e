"""Lock files: pin a recipe to an exact commit, so every machine builds the same thing.

``rocmbuild lock RECIPE [-o FILE]`` writes JSON::

    {"schema": 1, "recipe": "miopen-develop", "recipe_path": "...",
     "recipe_sha256": "<sha256 of the recipe as parsed, plus its patch files' contents>",
     "commit": "<full sha the ref resolved to>", "ref": "develop",
     "overrides": {...every command-line override...}, "created": "..."}

``rocmbuild apply --from-lock FILE`` (and ``build --from-lock``) loads the same recipe by name,
refuses (exit 2) if its content hash differs from the lock's ("the recipe changed since the lock
was written"), and builds exactly the locked commit with the locked overrides.

Decisions: the file is read by one schema (:data:`LOCK_SPEC`: every field typed, the recipe
name and the commit by their grammar, the overrides by their own types, an unknown override key
refused); anything else is an InputError (exit 2) naming the file, the field and what was
expected. The content hash is over the *parsed* recipe (so comments and formatting do not
matter) and the bytes of every patch it applies (so a changed patch does).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rocmbuild import schema as s
from rocmbuild.fs.disk import atomic_write_json, read_json
from rocmbuild.errors import InputError, RecipeError
from rocmbuild.recipe.search import load as load_recipe
from rocmbuild.recipe.model import Recipe
from rocmbuild.recipe.overrides import Overrides

SCHEMA = 1
_OVERRIDE_FIELDS = frozenset(f.name for f in dataclasses.fields(Overrides))


@dataclass(frozen=True)
class Lock:
    """One lock file's content; :meth:`to_json` is the file (and the ``lock`` verb's ``lock``)."""

    recipe: str
    recipe_path: str
    recipe_sha256: str
    ref: str | None
    commit: str | None
    overrides: Overrides
    created: str
    schema: int = SCHEMA

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "recipe": self.recipe,
            "recipe_path": self.recipe_path,
            "recipe_sha256": self.recipe_sha256,
            "ref": self.ref,
            "commit": self.commit,
            "overrides": {k: list(v) if isinstance(v, tuple) else v for k, v in self.overrides.as_dict().items()},
            "created": self.created,
        }

    @classmethod
    def from_json(cls, d: Any, file: object = "lock file") -> "Lock":
        """The lock ``d`` (JSON) read by its schema; SchemaError naming ``file``, the field and
        what was expected."""
        return s.load(LOCK_SPEC, d, file)

    def pinned(self) -> Overrides:
        """The locked overrides, with the ref pinned to the locked commit."""
        return dataclasses.replace(self.overrides, ref=self.commit) if self.commit else self.overrides


_SHA = s.check(s.string, lambda v: bool(re.fullmatch(r"[0-9a-f]{64}", v)), "a sha256 (64 lowercase hexadecimal digits)")
_OVERRIDES = s.record(Overrides, jobs=s.optional(s.check(s.integer, lambda v: v >= 0, "an integer of 0 or more")))
_SCHEMA = s.obj({"schema": (s.check(s.integer, lambda v: v == SCHEMA, f"{SCHEMA} (the lock file schema this "
                                     "rocmbuild reads)"), s.REQUIRED)})
_RECORD = s.record(Lock, recipe=s.name("recipe"), recipe_sha256=_SHA, commit=s.optional(s.name("commit")),
                   overrides=_OVERRIDES)


def LOCK_SPEC(v: Any, where: str) -> Lock:
    """A lock file's schema: the schema number first (a file of another kind is said as such)."""
    if type(v) is dict:
        _SCHEMA(v, where)
    lock = _RECORD(v, where)
    if type(v.get("overrides")) is dict and set(v["overrides"]) - _OVERRIDE_FIELDS:
        s.fail("overrides", "only the keys " + ", ".join(sorted(_OVERRIDE_FIELDS)), sorted(set(v["overrides"]) - _OVERRIDE_FIELDS)[0])
    return lock


def content_hash(r: Recipe) -> str:
    h = hashlib.sha256(r.canonical_json().encode())
    for p in r.patch_files:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def create(name: str, recipes_dirs: Sequence[str], overrides: Overrides, commit: str | None) -> Lock:
    r = load_recipe(name, recipes_dirs)
    return Lock(
        recipe=r.name,
        recipe_path=str(r.path),
        recipe_sha256=content_hash(r),
        ref=overrides.ref or r.source.ref,
        commit=commit,
        overrides=overrides,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )


def write(lock: Lock, out: Path) -> None:
    atomic_write_json(out, lock.to_json())


def load(path: str | Path, recipes_dirs: Sequence[str] = ()) -> tuple[str, Overrides, Lock]:
    """(recipe name or path, overrides pinned to the locked commit, the lock) after checking the
    recipe has not changed since the lock was written."""
    p = Path(path).expanduser()
    hint = "write one with `rocmbuild lock RECIPE -o FILE`"
    try:
        data = read_json(p)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read lock file {p}: {exc}", hint) from exc
    try:
        lock = Lock.from_json(data, p)
    except s.SchemaError as exc:
        raise InputError(f"not a usable rocmbuild lock file: {exc}", hint + " (or fix the field it names)",
                         details={"schema": exc.to_json()}) from None
    name = lock.recipe
    try:
        r = load_recipe(name, recipes_dirs)
    except RecipeError:
        r = load_recipe(lock.recipe_path, recipes_dirs)
        name = lock.recipe_path
    if content_hash(r) != lock.recipe_sha256:
        raise InputError(
            f"recipe '{r.name}' ({r.path}) changed since the lock file {p} was written",
            "build from the recipe as it is now (without --from-lock), or write a new lock with `rocmbuild lock`",
            details={"lock": lock.recipe_sha256, "now": content_hash(r)},
        )
    return name, lock.pinned(), lock
