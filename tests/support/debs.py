"""Small Debian packages made by the tests themselves: the ``ar`` format written here byte by
byte (so a test can also write a wrong one), the control and data tars with ``tarfile``, zstd
with the same module rocmbuild reads it with.

``write_deb(path, data=[...])``: ``data`` entries are ``(name, kind, payload)`` with kind
``file`` (bytes), ``dir``, ``symlink`` (target text), ``hardlink`` (target member name), or
``chr``; names are written as dpkg writes them (``./usr/...``). ``members=`` replaces the ar
members altogether (name, bytes) for the hostile cases; ``ar_member()`` writes one header.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

CONTROL = (b"Package: libmiopen1\nSource: miopen\nVersion: 7.2.4+dfsg-1\nArchitecture: amd64\n"
           b"Description: AMD's Machine Intelligence Library\n fixture\n")


def ar_member(name: str, data: bytes, *, size: str | None = None, mode: str = "100644", trailer: bytes = b"`\n",
              mtime: str = "1782764449") -> bytes:
    """One ``ar`` header and its data (padded to an even length); ``size``: the field as written."""
    size_field = size if size is not None else str(len(data))
    head = (name.encode().ljust(16) + mtime.encode().ljust(12) + b"0".ljust(6) + b"0".ljust(6)
            + mode.encode().ljust(8) + size_field.encode().ljust(10) + trailer)
    assert len(head) == 60, head
    return head + data + (b"\n" if len(data) % 2 else b"")


def tar_bytes(entries, *, compression: str | None = "xz") -> bytes:
    """A tar of ``entries`` (see the module notes), compressed: xz, gz, bz2, zst or None."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, kind, payload in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1782764449
            if kind == "file":
                ti.size, ti.mode = len(payload), 0o644
                tf.addfile(ti, io.BytesIO(payload))
                continue
            ti.type, ti.mode = {"dir": (tarfile.DIRTYPE, 0o755), "symlink": (tarfile.SYMTYPE, 0o777),
                                "hardlink": (tarfile.LNKTYPE, 0o644), "chr": (tarfile.CHRTYPE, 0o644)}[kind]
            if kind in ("symlink", "hardlink"):
                ti.linkname = payload
            tf.addfile(ti)
    return compress(buf.getvalue(), compression)


def compress(raw: bytes, compression: str | None) -> bytes:
    if compression is None:
        return raw
    if compression == "xz":
        import lzma
        return lzma.compress(raw)
    if compression == "gz":
        import gzip
        return gzip.compress(raw, mtime=0)
    if compression == "bz2":
        import bz2
        return bz2.compress(raw)
    from rocmbuild.sources.debarchive import _zstd
    return _zstd().compress(raw)


EXT = {None: "", "xz": ".xz", "gz": ".gz", "bz2": ".bz2", "zst": ".zst"}


def tree_entries(lib_dir: Path, prefix: str = "./usr/lib/x86_64-linux-gnu") -> list:
    """The data entries of a runtime package of the fixture library (as Debian lays one out)."""
    parts = prefix.strip("./").split("/")
    out = [("./", "dir", None)] + [("./" + "/".join(parts[:i + 1]) + "/", "dir", None) for i in range(len(parts))]
    real = (Path(lib_dir) / "libMIOpen.so.1.0").read_bytes()
    return out + [(f"{prefix}/libMIOpen.so.1.0", "file", real),
                  (f"{prefix}/libMIOpen.so.1", "symlink", "libMIOpen.so.1.0"),
                  ("./usr/share/", "dir", None), ("./usr/share/doc/", "dir", None),
                  ("./usr/share/doc/libmiopen1/", "dir", None),
                  ("./usr/share/doc/libmiopen1/copyright", "file", b"fixture\n")]


def write_deb(path: Path, data=(), *, compression: str | None = "xz", control: bytes = CONTROL,
              members: list[tuple[str, bytes]] | None = None, raw: bytes | None = None) -> str:
    """Write a ``.deb`` at ``path``; returns its sha256. ``raw``: write these bytes instead."""
    if raw is None:
        if members is None:
            members = good_members(data, compression, control)
        raw = b"!<arch>\n" + b"".join(ar_member(n, d) for n, d in members)
    path.write_bytes(raw)
    return hashlib.sha256(raw).hexdigest()


def good_members(data, compression: str | None = "xz", control: bytes = CONTROL) -> list[tuple[str, bytes]]:
    """The three members dpkg writes: debian-binary, control.tar.xz, data.tar[.EXT]."""
    return [("debian-binary", b"2.0\n"),
            ("control.tar.xz", tar_bytes([("./", "dir", None), ("./control", "file", control)])),
            (f"data.tar{EXT[compression]}", tar_bytes(list(data), compression=compression))]
