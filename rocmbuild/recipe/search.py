"""Finding recipes by name: the search path, the bundled recipes, and loading one.

Search order for a name: ``--recipes-dir`` (in the order given), ``$ROCMBUILD_RECIPES``
(colon-separated), ``$XDG_CONFIG_HOME/rocmbuild/recipes`` (default ``~/.config/rocmbuild/recipes``),
then the recipes bundled with rocmbuild; the first match wins. An argument that ends in ``.toml``
or contains a ``/`` is a path.
"""

from __future__ import annotations

import logging

import difflib
import os
from pathlib import Path
from typing import Sequence

from rocmbuild import names
from rocmbuild.errors import RecipeError
from rocmbuild.recipe.model import Recipe
from rocmbuild.recipe.parsing import parse


def bundled_dir() -> Path:
    """The recipes shipped with rocmbuild.

    Installed from a wheel they are ``rocmbuild/recipes`` (with ``rocmbuild/patches`` beside);
    in a checkout (and an editable install) they are the top-level ``recipes/`` (with
    ``patches/`` beside). Either way the patch lookup "patches/<name>/ in the parent of the
    recipe's directory" finds the bundled patches.
    """
    package = Path(__file__).resolve().parents[1]
    inside = package / "recipes"
    return inside if inside.is_dir() else package.parent / "recipes"


def search_path(recipes_dirs: Sequence[str | Path] = ()) -> list[Path]:
    dirs = [Path(d).expanduser() for d in recipes_dirs]
    env = os.environ.get("ROCMBUILD_RECIPES", "")
    dirs += [Path(d).expanduser() for d in env.split(":") if d]
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    dirs.append(config / "rocmbuild" / "recipes")
    dirs.append(bundled_dir())
    return dirs


def available(recipes_dirs: Sequence[str | Path] = ()) -> list[tuple[str, Path]]:
    """(name, path) of every recipe found, first match per name wins, in search order."""
    seen: dict[str, Path] = {}
    for d in search_path(recipes_dirs):
        if d.is_dir():
            for f in sorted(d.glob("*.toml")):
                if f.is_file():  # as find() judges it: a FIFO or a directory named x.toml is no recipe
                    seen.setdefault(f.stem, f)
    return list(seen.items())


def find(name_or_path: str, recipes_dirs: Sequence[str | Path] = ()) -> Path:
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        p = Path(name_or_path).expanduser()
        if not p.is_file():
            near = _near_file(p.parent, p.name)
            raise RecipeError(f"recipe file not found: {p}",
                              (f"did you mean '{p.parent / near}'? " if near else "")
                              + "check the path, or give a recipe name (rocmbuild recipes)")
        return p.resolve()
    why = names.bad_name_reason("recipe", name_or_path)
    if why is not None:  # never joined into a file name: "..", a newline, a control character
        raise RecipeError(f"not a recipe name: {why}",
                          "give a recipe name (rocmbuild recipes lists them) or a path to a .toml file")
    for d in search_path(recipes_dirs):
        f = d / f"{name_or_path}.toml"
        if f.is_file():
            return f
    found = available(recipes_dirs)
    known = [n for n, _ in found]
    here = _near_file(Path("."), name_or_path)  # `plan miopen-demo.tom` beside miopen-demo.toml: that file
    close = difflib.get_close_matches(name_or_path, known, n=1)
    listing = "; ".join(f"{n} ({p})" for n, p in found) or "none"
    hint = (f"did you mean './{here}', the recipe file in this directory? " if here else
            f"did you mean '{close[0]}'? " if close else "") + f"recipes found: {listing}"
    raise RecipeError(
        f"unknown recipe '{name_or_path}' (searched: {', '.join(str(d) for d in search_path(recipes_dirs))})",
        hint,
        details={"recipes": {n: str(p) for n, p in found}},
    )


def _near_file(directory: Path, name: str) -> str | None:
    """The ``.toml`` file in ``directory`` that ``name`` is (its stem), or nearly is (a typo): the
    file name, else None."""
    try:
        files = sorted(p.name for p in directory.glob("*.toml") if p.is_file())
    except OSError:
        return None
    stems = {f[:-len(".toml")]: f for f in files}
    if name in stems:
        return stems[name]
    close = difflib.get_close_matches(name, files, n=1, cutoff=0.85) or \
        difflib.get_close_matches(name, list(stems), n=1, cutoff=0.85)
    return stems.get(close[0], close[0]) if close else None


def load(name_or_path: str, recipes_dirs: Sequence[str | Path] = ()) -> Recipe:
    path = find(name_or_path, recipes_dirs)
    logging.getLogger(__name__).debug("recipe %s: %s", name_or_path, path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"cannot read recipe {path}: {exc}", "check the file's permissions and encoding") from exc
    return parse(text, path)
