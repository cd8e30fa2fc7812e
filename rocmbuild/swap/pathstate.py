"""What a path is now: :class:`PathState` values, read with ``lstat`` through an :class:`Observer`.

Decisions: an observation never follows a symlink and never hashes; the place that hashes
(:func:`unchanged`) does so only when identity cannot decide and kind,
size and mode already match. Planning takes an ``Observer`` so that tests can stand a dict in for
the filesystem; :func:`resolve` walks symlinks through it, component by component.

Drift (:func:`unchanged`) is judged against the identity recorded when rocmbuild placed the file:
device, inode, size, mtime_ns and ctime_ns. An in-place write moves the ctime even when the mtime
is put back, so a moved size or mtime is drift, and a moved ctime alone (a chmod, a new hardlink,
a backup unlinked) is settled by the content: the sha256 recorded in the journal (the manifest's),
never the bytes of a file that may be the same inode (a hardlinked cache file changes with it).
A ctime of 0 (a journal written before ctime was recorded) is not compared. Without an independent
digest (a restored original: never hashed, by design) identity without the ctime decides.
"""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from rocmbuild import schema as s
from rocmbuild.fs.disk import sha256_file


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
    ctime_ns: int = 0  # files: catches an in-place write whose mtime was put back (0: not recorded)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Any, file: object = "a path state") -> "PathState":
        """A journaled path state (null or ``{}``: absent); SchemaError naming the field."""
        state: PathState = s.load(PATH_STATE_SPEC, d, file)
        return state

    @classmethod
    def from_stat(cls, st: os.stat_result, target: str | None = None) -> "PathState":
        if stat.S_ISLNK(st.st_mode):
            return cls("link", target=target)
        if stat.S_ISREG(st.st_mode):
            return cls("file", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode),
                       ctime_ns=st.st_ctime_ns)
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


KINDS = ("file", "link", "absent", "other")
_RECORD = s.record(PathState, kind=s.one_of(*KINDS))


def PATH_STATE_SPEC(v: Any, field: str) -> PathState:
    """The schema of a path state in a journal: null or ``{}`` is absent."""
    return PathState("absent") if v is None or v == {} else _RECORD(v, field)


def observe(path: str | os.PathLike[str]) -> PathState:
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


def same_kind(now: PathState, expected: PathState) -> bool | None:
    """The rules every comparison of a path's state starts with: another kind is never the same, a
    link is the same when its text is, a directory or special file is the same by kind; ``None``
    when both are files (their identity and bytes decide, by the caller's rules)."""
    if now.kind != expected.kind:
        return False
    if now.kind == "link":
        return now.target == expected.target
    if now.kind != "file":
        return True
    return None


def unchanged(now: PathState, expected: PathState, path: str | Path, *, digest: str | None,
              source: str | None, obs: Observer) -> bool:
    """``now`` is still what rocmbuild left at ``path`` (``expected``, recorded when it was placed):
    the rules are in the module notes. ``digest``: the sha256 of the bytes placed (None: unknown);
    ``source``: a file holding those bytes, compared only when it is another inode than ``now``."""
    kind = same_kind(now, expected)
    if kind is not None:
        return kind
    if (now.dev, now.inode) == (expected.dev, expected.inode):
        if (now.size, now.mtime_ns) != (expected.size, expected.mtime_ns):
            return False  # written in place
        if not expected.ctime_ns or now.ctime_ns == expected.ctime_ns:
            return True
        return obs.sha256(Path(path)) == digest if digest else True
    if (now.size, now.mode) != (expected.size, expected.mode):
        return False
    if digest:  # another inode (restored from a copied backup, or a copied env): the bytes decide
        return obs.sha256(Path(path)) == digest
    if not source:
        return False
    src = obs.state(Path(source))
    if src.kind != "file":
        return False
    if (src.dev, src.inode) == (now.dev, now.inode):  # it is the source itself (a copied env's hardlink)
        return src.mtime_ns == expected.mtime_ns
    return obs.sha256(Path(path)) == obs.sha256(Path(source))


def found(now: PathState, expected: PathState) -> str:
    """How a drifted path is described: an in-place write looks like the old identity, so say so."""
    text = now.describe()
    if now.kind == "file" and (now.dev, now.inode) == (expected.dev, expected.inode):
        text += " (the same inode, written in place: its content is not what rocmbuild placed)"
    return text


def resolve(path: str | Path, obs: Observer, *, limit: int = 40) -> str:
    """``realpath`` through ``obs``: every symlink on the way is followed (``..`` after it is taken
    from where the link led); what does not exist is kept as named. A loop is a ValueError."""
    pending = [p for p in str(path).split("/")][::-1]
    out = "/"
    hops = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            out = os.path.dirname(out)
            continue
        cand = os.path.join(out, name)
        st = obs.state(Path(cand))
        if st.kind == "link":
            hops += 1
            if hops > limit:
                raise ValueError(f"too many symlinks on the way to {path}")
            text = st.target or ""
            if text.startswith("/"):
                out = "/"
            pending.extend(text.split("/")[::-1])
            continue
        out = cand
    return out
