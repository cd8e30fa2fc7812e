"""Where conda and mamba keep envs, from their config files and variables (no tool is run here).

Decisions:

* The files are those conda reads (``conda/base/constants.py`` ``SEARCH_PATH`` on Linux, with
  the ``condarc.d/*.yml`` folders) plus micromamba's ``~/.mambarc``; a later file has the higher
  precedence, so its ``envs_dirs`` come first, as conda merges lists.
* Only the ``envs_dirs:`` key is read, by a small reader of the two YAML spellings people write
  (a block list of ``- item`` lines, or a flow list ``[a, b]``), quotes and comments stripped;
  anything else in the file is ignored and an unreadable file is skipped (no YAML dependency).
  Values get ``~`` and ``$VAR`` expanded, as conda does.
* Variables: ``$CONDA_ENVS_PATH``/``$CONDA_ENVS_DIRS`` (colon-separated, before any file, as
  conda gives them precedence), ``$MAMBA_ROOT_PREFIX/envs``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SEARCH_PATH = (
    "/etc/conda/.condarc", "/etc/conda/condarc", "/etc/conda/condarc.d/",
    "/var/lib/conda/.condarc", "/var/lib/conda/condarc", "/var/lib/conda/condarc.d/",
    "$CONDA_ROOT/.condarc", "$CONDA_ROOT/condarc", "$CONDA_ROOT/condarc.d/",
    "$XDG_CONFIG_HOME/conda/.condarc", "$XDG_CONFIG_HOME/conda/condarc", "$XDG_CONFIG_HOME/conda/condarc.d/",
    "~/.config/conda/.condarc", "~/.config/conda/condarc", "~/.config/conda/condarc.d/",
    "~/.conda/.condarc", "~/.conda/condarc", "~/.conda/condarc.d/",
    "~/.condarc", "~/.mambarc",
    "$CONDA_PREFIX/.condarc", "$CONDA_PREFIX/condarc", "$CONDA_PREFIX/condarc.d/",
    "$MAMBA_ROOT_PREFIX/.condarc", "$MAMBA_ROOT_PREFIX/.mambarc",
    "$CONDARC", "$MAMBARC",
)
_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def _expand(text: str) -> str | None:
    """``~`` and ``$VAR`` expanded; None when a variable the path starts from is unset."""
    def sub(m: re.Match) -> str:
        return os.environ.get(m.group(1) or m.group(2), "\0")

    out = os.path.expanduser(_VAR.sub(sub, text))
    return None if "\0" in out else out


def rc_files() -> list[Path]:
    """The config files that exist, lowest precedence first."""
    out: list[Path] = []
    for entry in SEARCH_PATH:
        path = _expand(entry)  # an unset variable: that entry is skipped
        if not path:
            continue
        p = Path(path)
        if entry.endswith("/"):
            try:
                out += sorted(f for f in p.iterdir() if f.suffix in (".yml", ".yaml") and f.is_file())
            except OSError:
                pass
        elif p.is_file() and p not in out:
            out.append(p)
    return out


def _scalar(text: str) -> str:
    text = text.strip()
    if text[:1] in ("'", '"'):
        end = text.find(text[0], 1)
        return text[1:end] if end > 0 else text[1:]
    return re.split(r"\s+#", text, maxsplit=1)[0].strip()


def read_envs_dirs(text: str) -> list[str]:
    """The ``envs_dirs`` list of one YAML file's text (block or flow style); [] when absent."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^envs_dirs\s*:\s*(.*)$", line)
        if not m:
            continue
        rest = re.split(r"(?:^|\s)#", m.group(1), maxsplit=1)[0].strip()
        if rest.startswith("["):
            inner = rest[1:rest.index("]")] if "]" in rest else rest[1:]
            return [v for v in (_scalar(x) for x in inner.split(",")) if v]
        if rest:
            return []
        items = []
        for item in lines[i + 1:]:
            if not item.strip() or item.lstrip().startswith("#"):
                continue
            m = re.match(r"^\s*-\s+(.*)$", item) or re.match(r"^\s*-()$", item)
            if not m:
                break
            value = _scalar(m.group(1))
            if value:
                items.append(value)
        return items
    return []


def _split(var: str) -> list[str]:
    return [p for p in os.environ.get(var, "").split(os.pathsep) if p]


def configured_dirs() -> list[tuple[Path, str]]:
    """(envs directory, where it was named), highest precedence first, from variables and files."""
    out: list[tuple[Path, str]] = []
    for var in ("CONDA_ENVS_PATH", "CONDA_ENVS_DIRS"):
        out += [(Path(p), f"${var}") for p in _split(var)]
    for rc in reversed(rc_files()):
        try:
            values = read_envs_dirs(rc.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        for v in values:
            path = _expand(v)
            if path:
                out.append((Path(path), str(rc)))
    root = os.environ.get("MAMBA_ROOT_PREFIX")
    if root:
        out.append((Path(root) / "envs", "$MAMBA_ROOT_PREFIX"))
    return out
