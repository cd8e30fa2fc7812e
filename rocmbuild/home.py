"""Where things live: the build cache's home and the target state directory rule.

``cache_home()`` is ``$ROCMBUILD_HOME``, else ``$XDG_CACHE_HOME/rocmbuild``, else
``~/.cache/rocmbuild``. It holds the source clones (``src/``), build trees (``build/``), artifacts
(``artifacts/``), logs (``logs/``), downloads (``downloads/``), for targets whose library lives
outside their prefix, their state (``targets/<hash>/``), and the record of every target changed
with this home (``known-targets/``: what ``cache gc`` must not take from them). A target's own state lives with it, on the
same filesystem: ``<prefix>/.rocmbuild/``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

STATE_DIRNAME = ".rocmbuild"


def cache_home() -> Path:
    env = os.environ.get("ROCMBUILD_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "rocmbuild"


def src_dir(home: Path) -> Path:
    return Path(home) / "src"


def build_dir(home: Path) -> Path:
    return Path(home) / "build"


def artifacts_dir(home: Path) -> Path:
    return Path(home) / "artifacts"


def logs_dir(home: Path) -> Path:
    return Path(home) / "logs"


def downloads_dir(home: Path) -> Path:
    return Path(home) / "downloads"


def targets_dir(home: Path) -> Path:
    return Path(home) / "targets"


def known_targets_dir(home: Path) -> Path:
    return Path(home) / "known-targets"


def target_state_dir(prefix: Path, libdir: Path | None = None, *, outside: bool = False) -> Path:
    """Where a target's lock, journals, backups and history live: ``<prefix>/.rocmbuild``, or, for
    a library outside the prefix, ``<home>/targets/<sha256(libdir)[:16]>``."""
    if not outside:
        return Path(prefix) / STATE_DIRNAME
    digest = hashlib.sha256(str(Path(libdir)).encode()).hexdigest()[:16]
    return targets_dir(cache_home()) / digest
