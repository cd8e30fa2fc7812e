"""The build cache's home: ``$ROCMBUILD_HOME``, else ``$XDG_CACHE_HOME/rocmbuild``, else
``~/.cache/rocmbuild``.

It holds the source clones (``src/``), build trees (``build/``), artifacts (``artifacts/``), logs
(``logs/``) and, for targets outside a prefix, their state (``targets/<hash>/``). A target's own
state lives with it, on the same filesystem (``<prefix>/.rocmbuild/``, see ``swap/state.py``).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    env = os.environ.get("ROCMBUILD_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "rocmbuild"
