"""How text is laid out for a person: the terminal's width, tables and trees made with rich and
turned into plain text, prose wrapped without splitting a word, long keys shortened.

Decisions:
* The width is ``COLUMNS`` when set, else the terminal's; off a terminal (a pipe, a log, with no
  ``COLUMNS``) there is no width: :data:`UNBOUNDED` columns, so no line is wrapped and no cell
  either. A table there is space-aligned, one line per row, a cell of several lines joined with
  ", " and a long cell whole (``rocmbuild history | grep rollback`` keeps a row's txn, date and
  version on one line; ``cut``/``awk`` see the columns).
* Nothing here interprets markup: cells and labels are rich ``Text`` objects, so a bracketed
  word (``[build]``) is printed as it is.
* Words are never split: tables wrap at spaces and end a word too long for its column with an
  ellipsis; prose wraps at spaces and, inside a path longer than the line, after a ``/``.
* A 64-hex run (a cache key, a sha256) reads as its first :data:`KEY_DIGITS` digits and an
  ellipsis in text; JSON keeps it whole.
* Every value shown passes :func:`rocmbuild.names.safe_text` (control characters escaped): a
  table cell (a string is one line; a cell of several lines is a tuple of them) and a tree node
  here, a line of a renderer through :func:`lines` (each element is one
  line, so a newline inside a value is escaped rather than starting a line of its own); the CLI
  passes the whole text through :func:`rocmbuild.names.safe_lines` once more on its way out.
* Where stdout is not UTF-8 (``PYTHONIOENCODING=ascii``), trees and ellipses are drawn in ASCII.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from io import StringIO
from typing import Callable, Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from rocmbuild.names import safe_text

#: each text module's renderers, by result type (cli/render.py registers them)
Renderers = Sequence[tuple[type, Callable[..., str]]]

OFF_TERMINAL = 120
#: the width off a terminal: nothing is wrapped
UNBOUNDED = 10_000
KEY_DIGITS = 16
_KEY = re.compile(r"(?<![0-9a-fA-F])([0-9a-fA-F]{%d})[0-9a-fA-F]{%d}(?![0-9a-fA-F])" % (KEY_DIGITS, 64 - KEY_DIGITS))


def lines(items: Iterable[str]) -> str:
    """One line per item, each through :func:`safe_text` (a newline inside one is escaped)."""
    return "\n".join(safe_text(i) for i in items)


def width() -> int:
    """``COLUMNS``, else the terminal's width, else (stdout is not a terminal) :data:`UNBOUNDED`."""
    if not os.environ.get("COLUMNS", "").strip().isdigit():
        try:
            if not os.isatty(sys.stdout.fileno()):
                return UNBOUNDED
        except (AttributeError, ValueError, OSError):  # no real stdout (captured)
            return UNBOUNDED
    return max(20, shutil.get_terminal_size((OFF_TERMINAL, 24)).columns)


def _utf8() -> bool:
    return "utf" in (getattr(sys.stdout, "encoding", None) or "utf-8").lower()


def short_keys(text: str) -> str:
    """Every 64-hex run in ``text`` as its first 16 digits and an ellipsis."""
    mark = "…" if _utf8() else "..."
    return _KEY.sub(lambda m: m.group(1) + mark, text)


def short(hexdigits: str | None) -> str | None:
    return hexdigits[:KEY_DIGITS] if hexdigits else hexdigits


class _Buffer(StringIO):
    """Text rich writes as for stdout: ASCII tree guides and ellipses where stdout is not UTF-8."""

    @property
    def encoding(self) -> str:  # type: ignore[override]  # StringIO's attribute, computed here
        return "utf-8" if _utf8() else "ascii"


def to_text(renderable, cols: int | None = None) -> str:
    """A rich renderable as plain text at ``cols`` columns (trailing spaces dropped)."""
    out = _Buffer()
    Console(file=out, width=cols or width(), color_system=None, markup=False, highlight=False, emoji=False,
            soft_wrap=False, legacy_windows=False).print(renderable)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()).strip("\n")


class _PathWrapper(textwrap.TextWrapper):
    """Breaks at spaces, and after a ``/`` inside a word (a long path), never inside a name."""

    _split_re = re.compile(r"(\s+|(?<=/)(?=[^/\s]))")

    def _split(self, text: str) -> list[str]:
        return [c for c in self._split_re.split(text) if c]


def wrap(text: str, cols: int | None = None, indent: str = "") -> str:
    """``text`` wrapped to ``cols`` columns; continuation lines indented two more than ``indent``."""
    w = _PathWrapper(width=cols or width(), initial_indent=indent, subsequent_indent=indent + "  ",
                     break_long_words=False, break_on_hyphens=False)
    return "\n".join(w.fill(line) if line.strip() else line for line in text.splitlines())


def _widths(cells: list[list[str]], cols: int) -> list[int] | None:
    """Column widths within ``cols``: each at least its longest word, the room left shared in
    proportion to what each column would take more; None when the longest words do not fit."""
    natural = [max(len(line) for c in col for line in (c.splitlines() or [""])) for col in cells]
    least = [max(len(w) for c in col for w in (c.split() or [""])) for col in cells]
    room = cols - 2 * (len(cells) - 1)
    if sum(natural) <= room:
        return natural
    if sum(least) > room:
        return None
    want = [n - m for n, m in zip(natural, least, strict=True)]
    spare = room - sum(least)
    widths = [m + spare * w // sum(want) for m, w in zip(least, want, strict=True)]
    return widths


Cell = str | tuple[str, ...]  # one line, or several (one fact each)


def cell_text(cell: Cell, sep: str = "\n") -> str:
    """A cell as text, each of its lines through :func:`safe_text` (``sep`` between them)."""
    return sep.join(safe_text(c) for c in cell) if isinstance(cell, tuple) else safe_text(cell)


def table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], cols: int | None = None) -> str | None:
    """A plain table that fits ``cols`` columns, its cells wrapped at spaces; each column at least
    as wide as its longest word. None when even that does not fit (the caller lists the rows)."""
    cols = cols or width()
    if cols >= UNBOUNDED:
        return aligned(headers, rows)
    texts = [[cell_text(c) for c in r] for r in rows]
    cells = [[h, *(r[i] for r in texts)] for i, h in enumerate(headers)]
    widths = _widths(cells, cols)
    if widths is None:
        return None
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0), show_edge=False, header_style="",
              expand=False)
    for h, w in zip(headers, widths, strict=True):
        t.add_column(Text(h), overflow="ellipsis", width=w)
    for row in texts:
        t.add_row(*(Text(c) for c in row))
    return to_text(t, cols)


def aligned(headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> str:
    """A table off a terminal: columns aligned with spaces, one line per row, nothing wrapped or
    cut (a cell of several lines joined with ", ")."""
    texts = [[safe_text(h) for h in headers]] + [[cell_text(c, ", ") for c in r] for r in rows]
    widths = [max(len(r[i]) for r in texts) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in texts)


def tree(label: str, branches: Iterable[tuple[str, Sequence[str]]], cols: int | None = None) -> str:
    """``label`` over branches ``(label, leaves)``, drawn as a tree."""
    root = Tree(Text(safe_text(label)), guide_style="")
    for name, leaves in branches:
        node = root.add(Text(safe_text(name)))
        for leaf in leaves:
            node.add(Text(safe_text(leaf)))
    return to_text(root, cols)
