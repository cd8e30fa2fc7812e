"""Zip archives (``.zip``, ``.whl``) as tar members, so one extractor checks and writes both.

Decisions: a zip entry becomes a :class:`ZipMember` (a ``tarfile.TarInfo``) and goes through the
very walls a tar member does (:func:`rocmbuild.sources.extract.check_members`, the fd-relative
writer, the disk re-check); there is no second, weaker extractor. The type comes from the Unix
mode in the high 16 bits of ``external_attr``: a symlink there (``S_IFLNK``, its target being
the entry's bytes) is a symlink member and is judged like one (absolute, ``..``, leaving the tree
when resolved); character and block devices and FIFOs are typed as such and refused; sockets and
unknown types are refused as unsupported; an entry without a Unix mode (made on DOS/Windows) is a
file (0644) or, with a trailing ``/``, a directory (0755). Encrypted entries are refused, and a
symlink whose target is longer than PATH_MAX is refused before its bytes are read.
"""

from __future__ import annotations

import stat
import tarfile
import time
import zipfile
from pathlib import Path
from typing import IO

PATH_MAX = 4096
_TYPES = {stat.S_IFCHR: tarfile.CHRTYPE, stat.S_IFBLK: tarfile.BLKTYPE, stat.S_IFIFO: tarfile.FIFOTYPE}


class ZipMember(tarfile.TarInfo):
    """A zip entry in tar terms; ``zipinfo`` is the entry it reads from."""

    __slots__ = ("zipinfo",)
    zipinfo: zipfile.ZipInfo


class ZipReader:
    """The two calls the extractor makes of a ``TarFile``: ``getmembers`` and ``extractfile``."""

    def __init__(self, path: Path) -> None:
        self.zf = zipfile.ZipFile(path)

    def __enter__(self) -> "ZipReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.zf.close()

    def getmembers(self) -> list[tarfile.TarInfo]:
        return [self._member(zi) for zi in self.zf.infolist()]

    def extractfile(self, m: tarfile.TarInfo) -> IO[bytes]:
        assert isinstance(m, ZipMember)
        return self.zf.open(m.zipinfo)

    def _member(self, zi: zipfile.ZipInfo) -> ZipMember:
        m = ZipMember(zi.filename)
        m.zipinfo = zi
        unix = zi.external_attr >> 16
        kind = stat.S_IFMT(unix)
        m.size = zi.file_size
        m.mtime = time.mktime((*zi.date_time, 0, 0, -1))
        if zi.flag_bits & 0x1:
            m.type = b"?"  # encrypted: refused as an unsupported member type
        elif zi.is_dir() and kind in (0, stat.S_IFDIR):
            m.type = tarfile.DIRTYPE
        elif kind == stat.S_IFLNK:
            m.type = tarfile.SYMTYPE
            m.linkname = self._link_text(zi)
            m.size = 0
        elif kind in _TYPES:
            m.type = _TYPES[kind]
        elif kind in (0, stat.S_IFREG) and not zi.is_dir():
            m.type = tarfile.REGTYPE
        else:
            m.type = b"?"
        default = 0o755 if m.type == tarfile.DIRTYPE else 0o644
        m.mode = stat.S_IMODE(unix) if unix else default
        return m

    def _link_text(self, zi: zipfile.ZipInfo) -> str:
        if zi.file_size > PATH_MAX:
            return "/(a symlink target longer than PATH_MAX)"  # absolute: refused, never read
        return self.zf.read(zi).decode("utf-8", "surrogateescape")


def is_zip(path: Path) -> bool:
    """Whether ``path`` is a zip archive (``.zip``, ``.whl``), judged by its bytes, not its name."""
    return zipfile.is_zipfile(path)
