"""Downloads and archives: streamed, checksummed downloads and safe extraction.

Used for source tarballs (:mod:`rocmbuild.sources.tarball`) and artifact bundles (:mod:`rocmbuild.store.bundle`).

* :func:`download` fetches an https/http URL (``requests``, streamed, with a progress bar, retried
  with backoff: :mod:`rocmbuild.sources.net`), a
  ``file://`` URL, a plain path, or a pinned PyPI package (``pypi:NAME==VERSION``, through
  ``pip download``), or a pinned Debian package (``apt:NAME=VERSION``, through ``apt-get
  download`` from the machine's apt sources) to ``dest`` through ``dest.part``, hashing as it goes; a sha256
  mismatch deletes the download (never the user's own local file) and raises :class:`FetchError`.
* :func:`unsafe_member` is the first, per-header wall of safe extraction (absolute names, ``..``,
  devices and FIFOs, links that leave the tree lexically); :mod:`rocmbuild.sources.extract` adds
  the rest (a model of the whole tree, fd-relative writes, the filter as another wall).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.parse
from pathlib import Path, PurePosixPath

from rocmbuild import progress
from rocmbuild.proc import runner
from rocmbuild.fs.disk import CHUNK
from rocmbuild.errors import FetchError
from rocmbuild.fs.root import Root

def _copy(chunks, out, h, what: str, total: int | None) -> None:
    done = 0
    with progress.phase("download", what) as p:  # a row of the one progress display, inside fetch
        for chunk in chunks:
            out.write(chunk)
            h.update(chunk)
            done += len(chunk)
            p.bytes(done, total)


SOURCE_HINT = ("the network or the server failed: run the command again later (downloads are retried "
               "with backoff), or give a mirror or a local copy of the archive with --source URL|PATH")


def _fetch_http(url: str, out, h, hint: str) -> None:
    import requests

    from rocmbuild.sources import net

    with net.session() as s:
        resp = net.open_stream(s, url, hint)
        with resp:
            total = int(resp.headers.get("content-length") or 0) or None
            try:
                _copy(resp.iter_content(CHUNK), out, h, f"downloading {Path(urllib.parse.urlparse(url).path).name}",
                      total)
            except requests.RequestException as exc:
                raise net.network_error(url, exc, hint) from exc


def _fetch_local(url: str, parsed, out, h) -> None:
    local = Path(urllib.parse.unquote(parsed.path)) if parsed.scheme == "file" else Path(url).expanduser()
    if parsed.scheme not in ("", "file"):
        raise FetchError(f"unsupported archive URL scheme '{parsed.scheme}' in {url}",
                         "use https://, http://, file://, pypi:NAME==VERSION, apt:NAME=VERSION or a local path")
    try:
        src = open(local, "rb")
    except OSError as exc:
        raise FetchError(f"cannot read archive {local}: {exc.strerror or exc}",
                         "check the path in source.archive (or --source)", details={"url": url}) from exc
    with src:
        _copy(iter(lambda: src.read(CHUNK), b""), out, h, f"copying {local.name}", local.stat().st_size)


def _fetch_pypi(spec: str, workdir: Path, out, h) -> None:
    """``pypi:NAME==VERSION``: the one wheel pip downloads for it (``pip download --no-deps``, the
    index pip is configured with), hashed like any other download. Decision: a package registry is
    named by package, not by a host, and only an exact pin is accepted (its sha256 is in the recipe)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise FetchError(f"pypi:{spec} is not a package requirement ({exc})", "write pypi:NAME==VERSION") from exc
    pins = [s for s in req.specifier if s.operator == "=="]
    if len(pins) != 1 or len(req.specifier) != 1 or "*" in pins[0].version:
        raise FetchError(f"pypi:{spec} must pin one exact version", "write pypi:NAME==VERSION (e.g. pypi:nvidia-cudnn-cu13==9.25.1.1)")
    tmp = Path(tempfile.mkdtemp(prefix=".pip-download-", dir=workdir))
    try:
        runner.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--disable-pip-version-check", "-q", "-d", str(tmp), str(req)], error=FetchError,
                   what=f"pip download {req} failed",
                   hint="check the name and version, your network and pip's index settings (pip.conf)")
        files = sorted(p for p in tmp.iterdir() if p.is_file())
        if len(files) != 1:
            raise FetchError(f"pip download {req} gave {len(files)} files, expected one wheel",
                             "pin a package that has a wheel for this platform")
        with open(files[0], "rb") as src:
            _copy(iter(lambda: src.read(CHUNK), b""), out, h, f"copying {files[0].name}", files[0].stat().st_size)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fetch_apt(spec: str, workdir: Path, out, h) -> None:
    """``apt:NAME=VERSION``: the one ``.deb`` ``apt-get download`` fetches for it (the apt sources
    and keys the machine has; apt checks it against the signed Release/Packages), hashed like any
    other download. Decision: like ``pypi:``, a registry is named by package, only an exact version
    is accepted, and the recipe's sha256 is still required (the same name and version may be
    different bytes in another archive: Debian, Ubuntu, AMD's repository)."""
    from rocmbuild.sources.debarchive import apt_spec
    from rocmbuild.errors import RequirementError

    try:
        name, version = apt_spec(spec)
    except ValueError as exc:
        raise FetchError(f"apt:{spec} is not a pinned Debian package: {exc}",
                         "write apt:NAME=VERSION (e.g. apt:libmiopen1=7.2.4+dfsg-1)") from exc
    if shutil.which("apt-get") is None:
        raise RequirementError("apt:NAME=VERSION archives are fetched with apt-get, which is not on PATH",
                               "use a machine with apt (Debian, Ubuntu), or download the .deb by other means "
                               "and give it as file:///PATH/NAME.deb with its sha256")
    pkg = name.partition(":")[0]
    tmp = Path(tempfile.mkdtemp(prefix=".apt-download-", dir=workdir))
    try:
        runner.run(["apt-get", "download", "-q", f"{name}={version}"], cwd=tmp, error=FetchError,
                   what=f"apt-get download {name}={version} failed",
                   hint=f"check the name and version against the apt sources: apt-cache policy {pkg} "
                        f"(apt-cache madison {pkg} lists every version); run apt-get update if the lists are old")
        files = sorted(p for p in tmp.iterdir() if p.is_file() and not p.is_symlink())
        if len(files) != 1 or not files[0].name.endswith(".deb"):
            raise FetchError(f"apt-get download {name}={version} gave {len(files)} files, expected one .deb",
                             f"check the package with apt-cache policy {pkg}")
        with open(files[0], "rb") as src:
            _copy(iter(lambda: src.read(CHUNK), b""), out, h, f"copying {files[0].name}", files[0].stat().st_size)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


def download(url: str, dest: Path, expected: str, *, hint: str = SOURCE_HINT, home: Path | None = None) -> None:
    """Fetch ``url`` (http/https/file/path, ``pypi:NAME==VERSION`` or ``apt:NAME=VERSION``) to ``dest`` via
    ``dest.part``, checking sha256. ``hint``: what to do when the network fails (fits the verb).
    Written through a :class:`Root` of ``dest``'s directory (beneath the cache ``home``'s fd when
    given): a link planted as ``dest.part``, or at a directory on the way, is never written through."""
    name, part = dest.name, dest.name + ".part"
    root = Root.under(home, dest.parent, "the cache", create=True) if home else \
        Root.open(dest.parent, "the download directory", create=True)
    with root:
        h = hashlib.sha256()
        parsed = urllib.parse.urlparse(url)
        try:
            root.unlink(part, sync=False)  # a leftover (or a link planted there) goes as itself
            fd = root.open_file(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as out:
                if parsed.scheme in ("http", "https"):
                    _fetch_http(url, out, h, hint)
                elif parsed.scheme == "pypi":
                    _fetch_pypi(url[len("pypi:"):], dest.parent, out, h)
                elif parsed.scheme == "apt":
                    _fetch_apt(url[len("apt:"):], dest.parent, out, h)
                else:
                    _fetch_local(url, parsed, out, h)
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                root.unlink(part)
            raise
        got = h.hexdigest()
        if got != expected:
            root.unlink(part)
            raise FetchError(
                f"sha256 mismatch for {url}: expected {expected}, got {got}; the download was deleted",
                "the file changed upstream or is corrupt: check source.sha256 (sha256sum FILE) and the URL",
                details={"url": url, "expected": expected, "actual": got},
            )
        root.replace(part, name)
