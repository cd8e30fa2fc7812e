"""Lock files: pin a recipe to an exact commit, so every machine builds the same thing.

``rocmbuild lock RECIPE [-o FILE]`` writes JSON::

    {"schema": 1, "recipe": "miopen-develop", "recipe_path": "...",
     "recipe_sha256": "<sha256 of the recipe as parsed, plus its patch files' contents>",
     "commit": "<full sha the ref resolved to>", "ref": "develop",
     "overrides": {...every command-line override...}, "created": "..."}

``rocmbuild apply --from-lock FILE`` (and ``build --from-lock``) loads the same recipe by name,
refuses (exit 2) if its content hash differs from the lock's ("the recipe changed since the lock
was written"), and builds exactly the locked commit with the locked overrides.

Decision: the content hash is over the *parsed* recipe (so comments and formatting do not
matter) and the bytes of every patch it applies (so a changed patch does).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rocmbuild.disk import atomic_write_json, read_json
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
    def from_json(cls, d: dict[str, Any]) -> "Lock":
        ov = dict(d.get("overrides", {}))
        ov["defines"] = tuple(ov.get("defines", ()))
        return cls(
            recipe=d["recipe"],
            recipe_path=d["recipe_path"],
            recipe_sha256=d["recipe_sha256"],
            ref=d.get("ref"),
            commit=d.get("commit"),
            overrides=Overrides(**{k: v for k, v in ov.items() if k in _OVERRIDE_FIELDS}),
            created=d.get("created", ""),
            schema=d["schema"],
        )

    def pinned(self) -> Overrides:
        """The locked overrides, with the ref pinned to the locked commit."""
        return dataclasses.replace(self.overrides, ref=self.commit) if self.commit else self.overrides


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
    try:
        data = read_json(p)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read lock file {p}: {exc}", "write one with `rocmbuild lock RECIPE -o FILE`") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or "recipe" not in data:
        raise InputError(f"{p} is not a rocmbuild lock file (schema {SCHEMA})", "write one with `rocmbuild lock RECIPE -o FILE`")
    lock = Lock.from_json(data)
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
