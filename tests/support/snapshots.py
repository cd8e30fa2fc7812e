"""What a target looks like, to compare before and after: "byte for byte the old state".

:func:`snapshot` covers ``prefix/lib`` and ``prefix/share`` (``__pycache__`` skipped) by
content, mode and link text; :func:`inodes` adds the identity of regular files (the protocol
promises the original inode back, not a copy); :func:`listing` walks the whole prefix,
``.rocmbuild/`` included, for "touched nothing".
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path


def _walk(prefix: Path):
    for top in (prefix / "lib", prefix / "share"):
        if not top.exists():
            continue
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
                yield Path(root) / name
            for d in dirs:
                yield Path(root) / d


def snapshot(prefix: Path) -> dict[str, tuple]:
    """path (relative to prefix) -> (type, sha256, mode, link target)."""
    out = {}
    for p in _walk(Path(prefix)):
        st = os.lstat(p)
        rel = str(p.relative_to(prefix))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", None, None, os.readlink(p))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(st.st_mode), None)
        else:
            out[rel] = ("dir", None, stat.S_IMODE(st.st_mode), None)
    return out


def inodes(prefix: Path) -> dict[str, tuple[int, int]]:
    """regular file (relative) -> (device, inode)."""
    out = {}
    for p in _walk(Path(prefix)):
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            out[str(p.relative_to(prefix))] = (st.st_dev, st.st_ino)
    return out


def _identity(st: os.stat_result) -> tuple:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def listing(prefix: Path, key: Callable[[os.stat_result], tuple] = _identity) -> dict[str, tuple]:
    """Every path under the prefix (incl. .rocmbuild, ``__pycache__`` skipped) -> ``key(lstat)``."""
    out = {}
    for root, dirs, files in os.walk(prefix):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files + dirs:
            p = os.path.join(root, name)
            out[os.path.relpath(p, prefix)] = key(os.lstat(p))
    return out


def full_listing(prefix: Path) -> dict[str, tuple]:
    """Every path under the prefix (incl. .rocmbuild) -> (inode, mtime_ns, size): "touched nothing"."""
    return listing(prefix)


CANARY = b"canary: must never change\n"


def canaries(*dirs: Path) -> dict[Path, bytes]:
    """A ``flag`` file in each dir (what the attacks aim at); returns what they must stay."""
    out = {}
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        (d / "flag").write_bytes(CANARY)
        out[d / "flag"] = CANARY
    return out
