"""Which paths a recipe may name: relative ones that stay inside their root, and a clean absolute
install prefix. Checked when the recipe is read; the builder checks the prefix again, after
resolving every symlink, before it moves anything."""

from __future__ import annotations

import os
from pathlib import Path


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
