"""Where things live: the build cache's home, rocmbuild's own state, and the target state
directory rule.

``cache_home()`` is ``$ROCMBUILD_HOME``, else ``$XDG_CACHE_HOME/rocmbuild``, else
``~/.cache/rocmbuild``. It holds only what can be made again: the source clones (``src/``), build
trees (``build/``), artifacts (``artifacts/``), logs (``logs/<recipe>/``), downloads
(``downloads/``); ``rm -rf`` of it costs rebuilds, never a rollback.

``state_home()`` holds what cannot be made again: for targets whose library lives outside their
prefix, their state (``targets/<hash>/``: journals, backups, history), and the record of every
target changed (``known-targets/``: what ``cache gc`` must not take from them). It is
``$ROCMBUILD_STATE_HOME``, else ``$ROCMBUILD_HOME/state`` when ``$ROCMBUILD_HOME`` is set (one
directory holds everything: the tests and the demo stay hermetic), else
``$XDG_STATE_HOME/rocmbuild``, else ``~/.local/state/rocmbuild`` (the XDG base directory spec:
"state data that should persist between (application) restarts, but that is not important or
portable enough" for the data home). Older releases kept both inside the cache home;
``swap/migrate.py`` moves them here on first run. A target's own state lives with it, on the
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


def state_home() -> Path:
    """rocmbuild's own state (see the module notes)."""
    explicit = os.environ.get("ROCMBUILD_STATE_HOME")
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("ROCMBUILD_HOME")
    if env:
        return Path(env).expanduser() / "state"
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
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


def targets_dir(state: Path) -> Path:
    """The outside-prefix state dirs, in a state home (:func:`state_home`)."""
    return Path(state) / "targets"


def known_targets_dir(state: Path) -> Path:
    """The known-targets records, in a state home (:func:`state_home`)."""
    return Path(state) / "known-targets"


def target_state_dir(prefix: Path, libdir: Path | None = None, *, outside: bool = False) -> Path:
    """Where a target's lock, journals, backups and history live: ``<prefix>/.rocmbuild``, or, for
    a library outside the prefix, ``<state home>/targets/<sha256(libdir)[:16]>``."""
    if not outside:
        return Path(prefix) / STATE_DIRNAME
    if libdir is None:
        raise ValueError("a library outside the prefix is placed by its lib dir: libdir is required")
    digest = hashlib.sha256(str(Path(libdir)).encode()).hexdigest()[:16]
    return targets_dir(state_home()) / digest
