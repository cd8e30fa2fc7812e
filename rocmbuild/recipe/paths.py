"""Which paths a recipe may name: relative ones that stay inside their root, and a clean absolute
install prefix. Checked when the recipe is read; the builder checks the prefix again, after
resolving every symlink, before it moves anything."""

from __future__ import annotations

import os
import re
from pathlib import Path


def is_remote_url(url: str) -> bool:
    """A URL with a scheme (``https://``, ``file://``...) or scp-like ssh (``git@host:path``), as
    opposed to a local path."""
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", url) or re.match(r"^[^/]+@[^/:]+:", url))


def local_git_path(url: str, recipe_path: Path) -> str:
    """A recipe's ``source.git``: a relative local path is taken against the recipe file's
    directory (not where rocmbuild runs), ``~`` is the user's home; URLs stay as written."""
    if is_remote_url(url) or not url:
        return url
    p = Path(url).expanduser()
    if not p.is_absolute():
        p = Path(os.path.abspath(recipe_path)).parent / p
    return os.path.normpath(p)


def relative_inside(value: str) -> bool:
    return not (os.path.isabs(value) or ".." in Path(value).parts)


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` is not a clean absolute install prefix, or None. The prefix becomes a path
    under the build's DESTDIR, so its text must already be its normal form: absolute, no ``..``,
    ``.``, empty component or trailing ``/``, no control character, and not ``/`` itself (that
    would make DESTDIR itself the artifact, with nothing "outside the prefix" left to tell)."""
    if not prefix.startswith("/"):
        return "must be absolute"
    if prefix == "/":
        return "may not be / itself"
    if any(ord(c) < 32 or c == "\x7f" for c in prefix):
        return "contains a control character"
    parts = prefix[1:].split("/")
    if ".." in parts:
        return "may not contain '..'"
    if "." in parts or "" in parts:
        return "is not in normal form (a '.' component, '//' or a trailing '/')"
    return None
