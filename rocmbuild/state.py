"""On-disk state: where things live, and writes that survive a crash or a power cut.

* ``home()``: ``$ROCMBUILD_HOME``, else ``$XDG_CACHE_HOME/rocmbuild``, else ``~/.cache/rocmbuild``.
  Holds the source clones (``src/``), build trees (``build/``), artifacts (``artifacts/``),
  logs (``logs/``) and, for targets outside a prefix, their state (``targets/<hash>/``).
* A target's own state lives with it, on the same filesystem: ``<prefix>/.rocmbuild/``.

Every write that matters goes through :func:`atomic_write_bytes`: a temp file in the same
directory, fsync, ``os.replace``, fsync of the directory.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def home() -> Path:
    env = os.environ.get("ROCMBUILD_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "rocmbuild"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(Path(path), (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
