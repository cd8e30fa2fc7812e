"""Zip archives (``.zip``, ``.whl``) built entry by entry, honest and hostile, for the prebuilt tests.

A symlink is stored the way Info-ZIP stores it: ``S_IFLNK`` in the high 16 bits of
``external_attr``, the target as the entry's bytes. :func:`wheel_of` packs a real directory
(the fixture library's install tree) as a wheel under ``<top>/``, links kept as links.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zipfile
from pathlib import Path

ZEntry = tuple[str, str, bytes]  # (name, kind: file|dir|symlink|chr|fifo, data or link target)


def write_zip(path: Path, entries: list[ZEntry]) -> str:
    """Write ``entries`` in order to ``path``; its sha256."""
    kinds = {"file": stat.S_IFREG | 0o644, "dir": stat.S_IFDIR | 0o755, "symlink": stat.S_IFLNK | 0o777,
             "chr": stat.S_IFCHR | 0o644, "fifo": stat.S_IFIFO | 0o644}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, kind, data in entries:
            zi = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            zi.external_attr = kinds[kind] << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_entries(root: Path, top: str) -> list[ZEntry]:
    """Every file, link and directory below ``root`` as entries under ``top/`` (sorted)."""
    out: list[ZEntry] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = Path(dirpath).relative_to(root)
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            arc = f"{top}/{(rel / name).as_posix()}"
            if p.is_symlink():
                out.append((arc, "symlink", os.readlink(p).encode()))
            elif p.is_dir():
                out.append((arc + "/", "dir", b""))
            else:
                out.append((arc, "file", p.read_bytes()))
    return out


def wheel_of(path: Path, root: Path, top: str) -> str:
    """A wheel holding ``root`` under ``top/`` plus a dist-info; its sha256."""
    dist = "fixture_miopen-3.5.1.dist-info"
    meta = [(f"{dist}/METADATA", "file", b"Metadata-Version: 2.1\nName: fixture-miopen\nVersion: 3.5.1\n"),
            (f"{dist}/WHEEL", "file", b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")]
    return write_zip(path, tree_entries(root, top) + meta)
