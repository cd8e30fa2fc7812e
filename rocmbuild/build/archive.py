"""Downloads and archives: streamed, checksummed downloads and safe extraction.

Used for source tarballs (:mod:`rocmbuild.build.tarball`) and artifact bundles (:mod:`rocmbuild.build.bundle`).

* :func:`download` fetches an https/http URL (``requests``, streamed, with a progress bar), a
  ``file://`` URL or a plain path to ``dest`` through ``dest.part``, hashing as it goes; a sha256
  mismatch deletes the download (never the user's own local file) and raises :class:`FetchError`.
* :func:`safe_extract` refuses the whole archive, before writing anything, if any member has an
  absolute name, a ``..`` component, is a device or FIFO, or is a symlink/hardlink pointing
  outside the tree; on top of that Python's ``filter="data"`` is used where it exists.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import urllib.parse
import zlib
from pathlib import Path, PurePosixPath

from rocmbuild import ui
from rocmbuild.disk import CHUNK
from rocmbuild.errors import CorruptArchiveError, FetchError

def unsafe_member(member: tarfile.TarInfo) -> str | None:
    """Why a tar member may not be extracted, or None if it is safe."""
    name = member.name
    p = PurePosixPath(name)
    if name.startswith("/") or p.is_absolute() or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    if ".." in p.parts:
        return "path with '..'"
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        return "device or FIFO"
    if member.issym():
        target = PurePosixPath(member.linkname)
        if target.is_absolute():
            return f"symlink to absolute path {member.linkname}"
        if not inside(p.parent / target):
            return f"symlink pointing outside the tree ({member.linkname})"
    if member.islnk():
        target = PurePosixPath(member.linkname)
        if target.is_absolute() or not inside(target):
            return f"hardlink pointing outside the tree ({member.linkname})"
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return "unsupported member type"
    return None


def inside(path: str | PurePosixPath) -> bool:
    """True when the relative POSIX path stays inside its tree (never climbs above its root)."""
    path = PurePosixPath(path)
    if path.is_absolute():
        return False
    depth = 0
    for part in path.parts:
        if part in ("", "."):
            continue
        depth += -1 if part == ".." else 1
        if depth < 0:
            return False
    return True


def download(url: str, dest: Path, expected: str) -> None:
    """Fetch ``url`` (http/https/file/path) to ``dest`` via ``dest.part``, checking sha256."""
    part = dest.with_name(dest.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    parsed = urllib.parse.urlparse(url)
    try:
        with open(part, "wb") as out:
            if parsed.scheme in ("http", "https"):
                import requests

                try:
                    with requests.get(url, stream=True, timeout=(30, 300)) as resp:
                        resp.raise_for_status()
                        total = int(resp.headers.get("content-length") or 0) or None
                        with ui.progress(f"downloading {Path(parsed.path).name}", total) as (prog, task):
                            for chunk in resp.iter_content(CHUNK):
                                out.write(chunk)
                                h.update(chunk)
                                prog.update(task, advance=len(chunk))
                except requests.RequestException as exc:
                    raise FetchError(f"cannot download {url}: {exc}",
                                     "check the URL (source.tarball or --source), your network and proxy",
                                     details={"url": url}) from exc
            else:
                local = Path(urllib.parse.unquote(parsed.path)) if parsed.scheme == "file" else Path(url).expanduser()
                if parsed.scheme not in ("", "file"):
                    raise FetchError(f"unsupported tarball URL scheme '{parsed.scheme}' in {url}",
                                     "use https://, http://, file:// or a local path")
                try:
                    src = open(local, "rb")
                except OSError as exc:
                    raise FetchError(f"cannot read tarball {local}: {exc.strerror or exc}",
                                     "check the path in source.tarball (or --source)", details={"url": url}) from exc
                with src, ui.progress(f"copying {local.name}", local.stat().st_size) as (prog, task):
                    for chunk in iter(lambda: src.read(CHUNK), b""):
                        out.write(chunk)
                        h.update(chunk)
                        prog.update(task, advance=len(chunk))
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    got = h.hexdigest()
    if got != expected:
        part.unlink(missing_ok=True)
        raise FetchError(
            f"sha256 mismatch for {url}: expected {expected}, got {got}; the download was deleted",
            "the file changed upstream or is corrupt: check source.sha256 (sha256sum FILE) and the URL",
            details={"url": url, "expected": expected, "actual": got},
        )
    os.replace(part, dest)


# what reading a truncated or damaged .tar.gz raises, depending on where the damage is
CORRUPT = (tarfile.TarError, zlib.error, EOFError)


def corrupt(archive: Path, exc: BaseException) -> CorruptArchiveError:
    return CorruptArchiveError(
        f"the tarball {archive} cannot be read to its end: it is truncated, damaged or not a tar archive "
        f"({type(exc).__name__}: {exc}); nothing was extracted",
        "download or copy it again (compare its size and sha256 with the original)",
        details={"archive": str(archive), "reason": f"{type(exc).__name__}: {exc}"})


def safe_extract(archive: Path, dest: Path) -> None:
    try:
        tf = tarfile.open(archive, "r:*")
    except OSError as exc:
        raise FetchError(f"cannot open tarball {archive}: {exc}", "check source.tarball points at a tar archive") from exc
    except CORRUPT as exc:
        raise corrupt(archive, exc) from exc
    with tf:
        try:
            members = tf.getmembers()  # reads the whole stream: a truncation shows here
        except CORRUPT as exc:
            raise corrupt(archive, exc) from exc
        for m in members:
            why = unsafe_member(m)
            if why:
                raise FetchError(
                    f"refusing to extract {archive.name}: member '{m.name}' is unsafe ({why}); nothing was extracted",
                    "use a trusted archive; rocmbuild never writes outside the source directory",
                    details={"member": m.name, "reason": why},
                )
        dest.mkdir(parents=True)
        if hasattr(tarfile, "data_filter"):
            try:
                tf.extractall(dest, members=members, filter="data")
            except tarfile.FilterError as exc:
                raise FetchError(f"refusing to extract {archive.name}: {exc}",
                                 "use a trusted archive; rocmbuild never writes outside the source directory") from exc
        else:  # pragma: no cover - Python < 3.11.4
            tf.extractall(dest, members=members)


