"""What a path is now: :class:`PathState` values, read with ``lstat`` through an :class:`Observer`.

Decisions: an observation never follows a symlink and never hashes; the one place that hashes
(:func:`same_or_same_bytes`) does so only when identity cannot decide and kind, size and mode
already match. Planning takes an ``Observer`` so that tests can stand a dict in for the filesystem.
"""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from rocmbuild.disk import sha256_file


@dataclass(frozen=True)
class PathState:
    """What a path is: ``file`` (with identity), ``link`` (with text), ``absent``, or ``other``."""

    kind: str
    dev: int = 0
    inode: int = 0
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0
    target: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> "PathState":
        return cls(**d) if d else cls("absent")

    @classmethod
    def from_stat(cls, st: os.stat_result, target: str | None = None) -> "PathState":
        if stat.S_ISLNK(st.st_mode):
            return cls("link", target=target)
        if stat.S_ISREG(st.st_mode):
            return cls("file", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode))
        return cls("other", st.st_dev, st.st_ino, mode=stat.S_IMODE(st.st_mode))

    def same(self, other: "PathState") -> bool:
        """Same thing: same kind and, for files, same device+inode+size+mtime; for links, same text."""
        if self.kind != other.kind:
            return False
        if self.kind == "file":
            return (self.dev, self.inode, self.size, self.mtime_ns) == (
                other.dev, other.inode, other.size, other.mtime_ns)
        if self.kind == "link":
            return self.target == other.target
        return True

    def describe(self) -> str:
        if self.kind == "file":
            return f"file (dev {self.dev}, inode {self.inode}, {self.size} bytes, mode {self.mode:o})"
        if self.kind == "link":
            return f"link -> {self.target}"
        return self.kind


def observe(path: str | os.PathLike) -> PathState:
    """``lstat`` a path into a :class:`PathState` (never follows a symlink, never hashes)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return PathState("absent")
    except NotADirectoryError:
        return PathState("absent")
    target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    return PathState.from_stat(st, target)


class Observer(Protocol):
    def state(self, path: Path) -> PathState: ...

    def sha256(self, path: Path) -> str: ...


class FsObserver:
    """The real filesystem."""

    def state(self, path: Path) -> PathState:
        return observe(path)

    def sha256(self, path: Path) -> str:
        return sha256_file(path)


def same_or_same_bytes(now: PathState, expected: PathState, path: str | Path, source: str | None,
                       obs: Observer) -> bool:
    """``now`` is what rocmbuild left there: the same file (identity), or -- after a restore from a
    copied backup (another filesystem), which makes a new inode -- the same bytes as ``source``.
    Hashing happens only in that second case, when kind, size and mode already match."""
    if now.same(expected):
        return True
    if not (now.kind == expected.kind == "file" and (now.size, now.mode) == (expected.size, expected.mode)):
        return False
    if not source or obs.state(Path(source)).kind != "file":
        return False
    return obs.sha256(Path(path)) == obs.sha256(Path(source))
