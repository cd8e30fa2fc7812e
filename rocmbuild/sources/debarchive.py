"""Debian packages (``.deb``) as tar members, so one extractor checks and writes every archive.

A ``.deb`` is an ``ar`` archive: ``debian-binary`` (``2.0``), ``control.tar[.xz|.zst|.gz]``
(the package's metadata) and ``data.tar[.xz|.zst|.gz|.bz2]``, the tree as installed below ``/``.
:class:`DebReader` opens the data tar and answers the two calls the extractor makes of a
``TarFile`` (``getmembers``, ``extractfile``): its members pass the very walls a tarball's do
(:func:`rocmbuild.sources.extract.check_members`, the fd-relative writer, the disk re-check); there
is no second, weaker extractor. The control file gives the package's provenance
(:class:`Package`: name, version, architecture), recorded in the artifact's manifest.

Decisions:
* The format is told by the bytes (``!<arch>\\n``), not the name. The ``ar`` container is read
  here, strictly (about 80 lines): 60-byte headers whose size field is decimal digits only (mtime,
  uid, gid decimal, mode octal, or blank), the ``\\x60\\n`` trailer, the member's data inside the
  file (a header claiming more bytes than the file has is a truncated archive, judged before a
  byte of it is read), members in dpkg's order (``debian-binary``, ``control.tar*``,
  ``data.tar*``; ``_``-prefixed members, dpkg's extension point, skipped; anything else, a second
  control or data member, or none, refused). Not ``arpy`` (PyPI, maintained): it reads GNU/BSD
  long-name and symbol tables a ``.deb`` never has, trusts the size field, and its errors are
  its own; the subset dpkg writes is small enough to check field by field.
* Nothing large is read into memory: the data member is a bounded window over the file,
  decompressed as a stream (``lzma``, ``gzip``, ``bz2``, or zstd: ``compression.zstd`` on
  Python 3.14+, the ``backports.zstd`` package before, the same ``ZstdFile``). The control tar is
  read as a stream with a budget of :data:`MAX_CONTROL` decompressed bytes and its ``control``
  file at most :data:`MAX_CONTROL_FILE` bytes; a field that is not the grammar Debian gives it is
  refused (it names directories and is shown).
* The data tar is rooted at ``/``: no top-level directory is dropped (``strip_top = False``), so
  ``[source] subdir = "usr"`` names ``./usr`` itself.
* An RPM (``\\xed\\xab\\xee\\xdb``) is refused with the way round: PyPI's ``rpmfile`` reads a zstd
  payload whole into memory and keeps only "dir" and "symlink" of a cpio member's type (a block
  device reads as a directory; hardlinks are lost), so it cannot be held to these walls.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import re
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

AR_MAGIC = b"!<arch>\n"
RPM_MAGIC = b"\xed\xab\xee\xdb"
HEADER = 60
MAX_CONTROL = 64 << 20  # decompressed bytes of control.tar read at most
MAX_CONTROL_FILE = 1 << 20  # the control file itself
RPM_HINT = ("unpack it by hand (mkdir t && cd t && rpm2cpio FILE.rpm | cpio -idm), pack the tree "
            "(tar czf tree.tar.gz -C t .) and give that with file:// and its sha256")
_COMPRESSED = {"": None, ".gz": "gz", ".xz": "xz", ".zst": "zst", ".bz2": "bz2"}
_CONTROL_EXT = ("", ".gz", ".xz", ".zst")
_FIELDS = {"Package": re.compile(r"[a-z0-9][a-z0-9+.-]+"),
           "Version": re.compile(r"(?:[0-9]+:)?[0-9][A-Za-z0-9.+~:-]*"),
           "Architecture": re.compile(r"[a-z0-9][a-z0-9-]*")}


class DebFormatError(Exception):
    """The file is not a Debian binary package we read; ``truncated``: it ends too early; ``hint``:
    what to do, when it is not "give a package as dpkg-deb writes it"."""

    def __init__(self, message: str, *, truncated: bool = False, hint: str | None = None) -> None:
        super().__init__(message)
        self.truncated, self.hint = truncated, hint


@dataclass(frozen=True)
class Package:
    """Where an artifact's tree came from: a Debian package's name, version and architecture."""

    name: str
    version: str
    architecture: str | None  # None: an ``apt:`` spec that names none (``show``: known once fetched)
    format: str = "deb"

    def to_json(self) -> dict[str, str | None]:
        return {"format": self.format, "name": self.name, "version": self.version, "architecture": self.architecture}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Package":
        return cls(name=data["name"], version=data["version"], architecture=data["architecture"],
                   format=data.get("format", "deb"))

    def describe(self) -> str:
        """``Debian package libmiopen1 7.2.4+dfsg-1 (amd64)``"""
        return f"Debian package {self.name} {self.version} ({self.architecture})"


@dataclass(frozen=True)
class _Member:
    name: str
    offset: int
    size: int


def is_deb(path: Path) -> bool:
    """Whether ``path`` is an ``ar`` archive (a ``.deb``), judged by its bytes, not its name."""
    with open(path, "rb") as f:
        return f.read(len(AR_MAGIC)) == AR_MAGIC


def is_rpm(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(RPM_MAGIC)) == RPM_MAGIC


def _number(field: bytes, what: str, base: int, *, required: bool = False) -> int:
    text = field.decode("ascii", "replace").rstrip(" ")
    if not text and not required:
        return 0
    if not text or not all(c in "0123456789"[:base] for c in text):
        raise DebFormatError(f"the ar header's {what} field is not a {'decimal' if base == 10 else 'octal'} "
                             f"number ({field!r})")
    return int(text, base)


def read_members(f: IO[bytes], file_size: int) -> list[_Member]:
    """The ``ar`` members (name, data offset, size), every header checked; nothing read beyond them."""
    if f.read(len(AR_MAGIC)) != AR_MAGIC:
        raise DebFormatError("not an ar archive (no !<arch> magic)")
    out, pos = [], len(AR_MAGIC)
    while pos < file_size:
        f.seek(pos)
        head = f.read(HEADER)
        if len(head) < HEADER:
            raise DebFormatError(f"an ar header at byte {pos} is cut short ({len(head)} of {HEADER} bytes)",
                                 truncated=True)
        if head[58:60] != b"`\n":
            raise DebFormatError(f"the ar header at byte {pos} does not end with `\\n (a bad header)")
        raw = head[:16].decode("ascii", "replace").rstrip(" ")
        name = raw[:-1] if raw.endswith("/") else raw
        if not name or not name.isprintable() or "/" in name:
            raise DebFormatError(f"the ar member name {head[:16]!r} at byte {pos} is not a plain name")
        _number(head[16:28], "mtime", 10)
        _number(head[28:34], "uid", 10)
        _number(head[34:40], "gid", 10)
        _number(head[40:48], "mode", 8)
        size = _number(head[48:58], "size", 10, required=True)
        start = pos + HEADER
        if start + size > file_size:
            raise DebFormatError(f"the ar member {name} declares {size} bytes but only {file_size - start} "
                                 "follow its header", truncated=True)
        out.append(_Member(name, start, size))
        pos = start + size + (size & 1)  # data is padded to an even offset
    return out


def _pick(members: list[_Member]) -> tuple[_Member, _Member, str, str]:
    """dpkg's order: debian-binary, control.tar*, data.tar* (``_`` members skipped)."""
    names = [m.name for m in members]
    core = [m for m in members if not m.name.startswith("_")]
    if not core or core[0].name != "debian-binary" or core[0] is not members[0]:
        raise DebFormatError(f"the first member is not debian-binary (members: {', '.join(names) or 'none'})")
    controls = [m for m in core if m.name.startswith("control.tar")]
    datas = [m for m in core if m.name.startswith("data.tar")]
    if len(datas) != 1:
        raise DebFormatError(f"{'no' if not datas else len(datas)} data.tar members, exactly one expected "
                             f"(members: {', '.join(names)})")
    if len(controls) != 1:
        raise DebFormatError(f"{'no' if not controls else len(controls)} control.tar members, exactly one "
                             f"expected (members: {', '.join(names)})")
    if [m.name for m in core] != ["debian-binary", controls[0].name, datas[0].name]:
        raise DebFormatError(f"unexpected members or order (members: {', '.join(names)}; dpkg writes "
                             "debian-binary, control.tar*, data.tar*)")
    c_ext, d_ext = controls[0].name[len("control.tar"):], datas[0].name[len("data.tar"):]
    if c_ext not in _CONTROL_EXT:
        raise DebFormatError(f"unknown control member compression {controls[0].name}")
    if d_ext not in _COMPRESSED:
        raise DebFormatError(f"unknown data member compression {datas[0].name}")
    return controls[0], datas[0], c_ext, d_ext


class _Window(io.RawIOBase):
    """``size`` bytes of ``f`` from ``offset``: read and seek never leave them."""

    def __init__(self, f: IO[bytes], offset: int, size: int) -> None:
        self.f, self.offset, self.size, self.pos = f, offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, min(self.size, base + pos))
        return self.pos

    def readinto(self, b) -> int:
        n = min(len(b), self.size - self.pos)
        if n <= 0:
            return 0
        self.f.seek(self.offset + self.pos)
        data = self.f.read(n)
        if not data:
            raise EOFError("the archive ended inside an ar member (it changed while being read)")
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)


def _zstd():
    if sys.version_info >= (3, 14):
        from compression import zstd
    else:
        from backports import zstd
    return zstd


def zstd_errors() -> tuple[type[BaseException], ...]:
    """zstd's decoding error, for the extractor's list of "corrupt" errors (none if not installed)."""
    try:
        return (_zstd().ZstdError,)
    except ImportError:
        return ()


def decompressed(raw: IO[bytes], kind: str | None) -> IO[bytes]:
    """A readable, seekable stream of ``raw`` decompressed (``kind``: gz, xz, zst, bz2 or None)."""
    if kind is None:
        return raw
    if kind == "gz":
        # a binary file in all but its declared type
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
    if kind == "xz":
        return lzma.LZMAFile(raw)
    if kind == "bz2":
        return bz2.BZ2File(raw)
    try:
        zstd = _zstd()
    except ImportError as exc:
        raise DebFormatError("its members are zstd-compressed and this Python has no zstd module",
                             hint="install rocmbuild with its dependencies: before Python 3.14 that includes "
                                  "backports.zstd (pip install backports.zstd)") from exc
    return zstd.ZstdFile(raw)


class _Budget(io.RawIOBase):
    """At most ``limit`` bytes of ``src``; more is a :class:`DebFormatError`."""

    def __init__(self, src: IO[bytes], limit: int, what: str) -> None:
        self.src, self.left, self.what = src, limit, what

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.src.read(min(len(b), self.left + 1))
        if len(data) > self.left:
            raise DebFormatError(f"{self.what} is larger than {MAX_CONTROL} bytes decompressed")
        self.left -= len(data)
        b[:len(data)] = data
        return len(data)


def valid_field(key: str, value: object) -> bool:
    """Whether ``value`` is a control field ``key`` (Package, Version, Architecture) as Debian writes it."""
    return isinstance(value, str) and len(value) <= 200 and bool(_FIELDS[key].fullmatch(value))


def apt_spec(spec: str) -> tuple[str, str]:
    """``NAME[:ARCH]=VERSION`` of an ``apt:`` archive as (name, version); a ValueError saying why not."""
    name, eq, version = spec.partition("=")
    pkg, _, arch = name.partition(":")
    if not eq or not version:
        raise ValueError("it must pin one exact version with '='")
    if not _FIELDS["Package"].fullmatch(pkg) or (arch and not _FIELDS["Architecture"].fullmatch(arch)):
        raise ValueError(f"{name!r} is not a Debian package name (lowercase letters, digits, + - .; :ARCH optional)")
    if len(version) > 200 or not _FIELDS["Version"].fullmatch(version):
        raise ValueError(f"{version!r} is not a Debian version")
    return name, version


def parse_control(text: bytes) -> Package:
    """The ``Package``, ``Version`` and ``Architecture`` fields of a control file, checked."""
    fields: dict[str, str] = {}
    for line in text.decode("utf-8", "replace").splitlines():
        m = re.match(r"([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)", line)
        if m and m.group(1) in _FIELDS:
            fields.setdefault(m.group(1), m.group(2).strip())
    for key, rx in _FIELDS.items():
        value = fields.get(key)
        if value is None:
            raise DebFormatError(f"the control file has no {key} field")
        if len(value) > 200 or not rx.fullmatch(value):
            raise DebFormatError(f"the control file's {key} field is not a Debian {key.lower()} ({value[:80]!r})")
    return Package(fields["Package"], fields["Version"], fields["Architecture"])


def _read_control(raw: IO[bytes], kind: str | None) -> Package:
    stream = io.BufferedReader(_Budget(decompressed(raw, kind), MAX_CONTROL, "control.tar"))
    with tarfile.open(fileobj=stream, mode="r|") as tf:
        for m in tf:
            if m.name not in ("control", "./control"):
                continue
            if not m.isreg() or m.size > MAX_CONTROL_FILE:
                raise DebFormatError(f"the control file is not a regular file of at most {MAX_CONTROL_FILE} bytes")
            src = tf.extractfile(m)
            assert src is not None
            return parse_control(src.read(MAX_CONTROL_FILE))
    raise DebFormatError("control.tar has no control file")


class DebReader:
    """A ``.deb``'s data tar as the extractor reads a ``TarFile``; ``package``: its control fields."""

    strip_top = False

    def __init__(self, path: Path) -> None:
        self.f = open(path, "rb")
        try:
            size = self.f.seek(0, 2)
            self.f.seek(0)
            control, data, c_ext, d_ext = _pick(read_members(self.f, size))
            control_raw = io.BufferedReader(_Window(self.f, control.offset, control.size))
            self.package = _read_control(control_raw, _COMPRESSED[c_ext])
            self.data_name = data.name
            self.stream = decompressed(io.BufferedReader(_Window(self.f, data.offset, data.size)), _COMPRESSED[d_ext])
            self.tf = tarfile.open(fileobj=self.stream, mode="r:")
        except BaseException:
            self.f.close()
            raise

    def __enter__(self) -> "DebReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.tf.close()
            self.stream.close()
        finally:
            self.f.close()

    def getmembers(self) -> list[tarfile.TarInfo]:
        return self.tf.getmembers()

    def extractfile(self, m: tarfile.TarInfo) -> IO[bytes] | None:
        return self.tf.extractfile(m)


def read_package(path: Path) -> Package:
    """The control fields of the ``.deb`` at ``path`` (the data member is not read)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        control, _, c_ext, _ = _pick(read_members(f, size))
        return _read_control(io.BufferedReader(_Window(f, control.offset, control.size)), _COMPRESSED[c_ext])
