"""Names and text: the strict grammar of what may reach a file name, and the one function that
makes any text safe to show a person.

Decisions:
* a recipe name, a version and a commit are checked against a grammar *where they enter*
  (a recipe file, a manifest, a lock file, a source tree); nothing downstream uses one raw, so
  a manifest's ``"recipe": "../../tmp/x"`` or a version with a newline never reaches a path or
  a terminal;
* the grammars: a recipe name is ``[A-Za-z0-9][A-Za-z0-9._+-]*`` (at most 100 characters, not
  ending in ``.``, no ``..``); a version is ``[0-9A-Za-z][0-9A-Za-z._+~-]*`` (at most 64); a
  commit is 40 (sha1) or 64 (sha256) lowercase hex digits;
* a byte of a path that is not UTF-8 (Python's surrogateescape, ``\\udcff``) is shown as the byte
  (``\\xff``);
* :func:`safe_text` escapes every control character (C0, DEL, C1, and the Unicode format and
  line/paragraph separators a terminal may act on) as a visible ``\\x1b``/``\\u202e`` form;
  JSON output keeps the exact strings (it is escaped by JSON itself). A newline is kept only
  where the caller says the text is multi-line (:func:`safe_lines`).
"""

from __future__ import annotations

import re
import unicodedata

RECIPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+~-]{0,63}$")
COMMIT_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")

__all__ = ["recipe_version", "RECIPE_RE", "VERSION_RE", "COMMIT_RE", "is_recipe_name", "is_version", "is_commit",
           "bad_name_reason", "safe_text", "safe_lines"]


def is_recipe_name(value: object) -> bool:
    # fullmatch: ``$`` alone would let a trailing newline through ("mini\n")
    return (isinstance(value, str) and bool(RECIPE_RE.fullmatch(value)) and ".." not in value
            and not value.endswith("."))


def is_version(value: object) -> bool:
    return isinstance(value, str) and bool(VERSION_RE.fullmatch(value)) and ".." not in value


def is_commit(value: object) -> bool:
    return isinstance(value, str) and bool(COMMIT_RE.fullmatch(value))


_GRAMMAR = {
    "recipe": (is_recipe_name, "letters, digits and . _ + - (starting with a letter or digit, no '..', "
                               "at most 100 characters)"),
    "version": (is_version, "letters, digits and . _ + ~ - (starting with a letter or digit, at most 64 "
                            "characters)"),
    "commit": (is_commit, "40 or 64 lowercase hexadecimal digits"),
}


def recipe_version(recipe: object, version: object) -> str:
    """``miopen 3.5.1``, or the recipe alone when the version is not known (a prebuilt package's
    artifact knows its version only once verified): never a double space."""
    return f"{recipe} {version}" if version else str(recipe)


def bad_name_reason(kind: str, value: object) -> str | None:
    """None when ``value`` is a valid ``kind`` (``recipe``, ``version``, ``commit``); else a
    sentence saying what was expected (for an error naming the file and the field)."""
    check, expected = _GRAMMAR[kind]
    if check(value):
        return None
    if not isinstance(value, str):
        return f"expected a string ({expected}), got {type(value).__name__}"
    shown = safe_text(value)
    return f"expected {expected}, got '{shown if len(shown) <= 120 else shown[:119] + '…'}'"


def _escape(ch: str) -> str:
    o = ord(ch)
    if 0xDC80 <= o <= 0xDCFF:  # a byte that was not UTF-8 (a path's surrogateescape): shown as that byte
        return f"\\x{o - 0xDC00:02x}"
    if o < 0x100:
        return f"\\x{o:02x}"
    if o < 0x10000:
        return f"\\u{o:04x}"
    return f"\\U{o:08x}"


def _is_control(ch: str) -> bool:
    o = ord(ch)
    if o < 0x20 or 0x7F <= o < 0xA0:
        return True
    return unicodedata.category(ch) in ("Cf", "Zl", "Zp", "Cs", "Co", "Cn") and ch not in ("\u200d",)


def safe_text(text: object) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``), never acted on.
    A tab is shown as a space; a newline is escaped (use :func:`safe_lines` for multi-line text)."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():
        return s
    return "".join(" " if ch == "\t" else (_escape(ch) if _is_control(ch) else ch) for ch in s)


def safe_lines(text: object) -> str:
    """Like :func:`safe_text`, but newlines stay line breaks (a message of several lines, a
    build log's tail); a carriage return, which could overwrite what a line said, is escaped."""
    s = text if isinstance(text, str) else str(text)
    return "\n".join(safe_text(line) for line in s.split("\n"))
