"""A bundle's download from a binary cache: shown as progress, resumable, retried with backoff,
checked against its sha256 (docs/caches.md, "Downloads").

:func:`pull` writes a blob as ``name`` in a :class:`~rocmbuild.fs.root.Root` through a partial file
``.<name>.<sha256[:16]>.part`` beside it, then renames it. The caller gives ``open_body(offset)``,
which answers with a :class:`Body`: the bytes from ``offset`` on (an HTTP ``Range`` request
answered 206), or from the start (the server ignored the range, or a ``file://`` source).

Decisions:
* **Progress** is a ``download`` phase of the one progress display (:mod:`rocmbuild.progress`):
  a bar with MiB done of the total on a terminal, a line per 10 % and heartbeats off one, JSON
  events with ``--json``, nothing with ``-q``.
* **Retries**: a connection that drops or breaks off mid-body, a timeout, a 5xx or a 429 is
  tried again (:func:`rocmbuild.remote.http.retrying`: ``ROCMBUILD_DOWNLOAD_RETRIES`` times,
  default 3, backoff 0.5 s, 1 s, 2 s...), each new try asking only for the bytes not yet here.
  After the last, one error (exit 3) says how far it got and that the next run resumes.
* **Resume**: the partial file is kept when the download fails or is stopped (SIGINT, SIGTERM),
  and a later :func:`pull` of the same blob into the same root continues from its size. Its name
  holds the expected digest, so bytes of another blob are never continued (a partial for another
  digest of the same name is removed). A 206 whose ``Content-Range`` does not start where asked,
  and a 416, start the file over.
* **The digest** is computed while the bytes are written (the partial's existing bytes are read
  once when a run resumes them). A mismatch after a resumed download starts over once from zero
  (the kept bytes may be what was wrong); a mismatch of a whole fresh download removes the
  partial and raises (exit 3): nothing is renamed, nothing half-imported.
* **Bounded**: a blob whose size is declared (an OCI layer's, a ``file://`` file's) is read to
  that size and no further; a server that offers another size or sends more is refused at once
  (exit 3) and the partial removed. Else the size the server declares (``Content-Length``,
  ``Content-Range``) bounds it the same way.
* **A full disk** (``ENOSPC``, ``EDQUOT``) mid-download is exit 3 (``BuildFilesystemError``:
  "no space left on the device", with the free space), and the partial is removed.
* The partial is ``flock``-ed while written; a second pull of the same blob into the same root
  while the first runs (callers hold the artifact's key lock, so only a direct caller can) writes
  a partial of its own, named by its pid, and resumes nothing.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import requests
import urllib3

from rocmbuild import progress
from rocmbuild.sources import net
from rocmbuild.errors import NO_SPACE, FetchError, from_os_error
from rocmbuild.remote import http
from rocmbuild.remote.http import Retry
from rocmbuild.fs.root import Root

CHUNK = 1 << 20
OVERSIZE_HINT = "the cache serves something else than the artifact's bundle: push it again, or tell whoever runs it"


class Oversize(FetchError):
    """The server sent (or offers) more bytes than the blob's declared size: the partial goes (exit 3)."""

_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


@dataclass
class Body:
    """The bytes of a blob from ``start`` on (0: the whole blob), and its size when known."""

    start: int
    total: int | None
    chunks: Iterable[bytes]
    close: Callable[[], None] = lambda: None


def range_headers(offset: int) -> dict[str, str]:
    """The header that asks for the bytes from ``offset`` on (none for the whole blob)."""
    return {"Range": f"bytes={offset}-"} if offset > 0 else {}


def http_open(get: Callable[[dict[str, str]], requests.Response], offset: int) -> Body:
    """``get(headers)`` (a streamed GET, its errors raised by the caller; 200, 206 and 416 let
    through) with a ``Range`` from ``offset``; a 416 (the kept bytes are not a prefix the server
    knows) asks again for the whole blob."""
    resp = get(range_headers(offset))
    if resp.status_code == 416 and offset > 0:
        resp.close()
        offset = 0
        resp = get({})
    return http_body(resp, offset)


def http_body(resp: requests.Response, offset: int) -> Body:
    """The :class:`Body` of a streamed GET answered 200 or 206 (to ``Range: bytes=offset-``)."""
    chunks = _raw(resp)
    length = int(resp.headers.get("Content-Length") or 0) or None
    if resp.status_code == 206:
        m = _RANGE.match(resp.headers.get("Content-Range", "").strip())
        if m and int(m.group(1)) == offset:
            return Body(offset, int(m.group(3)) if m.group(3) != "*" else None, chunks, resp.close)
        resp.close()  # a range other than the one asked: start over, once more
        raise Retry(FetchError(f"{resp.url}: the server answered another byte range than the one asked",
                               http.RETRY_HINT))
    return Body(0, length, chunks, resp.close)


def _raw(resp: requests.Response) -> Iterator[bytes]:
    """The body's bytes as they arrive (``read1``: what the socket has, up to :data:`CHUNK`), never
    decoded (the digest is over the bytes the cache holds, whatever ``Content-Encoding`` says).
    A fixed-size read would wait for a whole chunk and lose it when the connection drops."""
    read1 = getattr(resp.raw, "read1", None)
    if read1 is None:  # urllib3 < 2.2
        yield from resp.raw.stream(64 << 10, decode_content=False)
        return
    while data := read1(CHUNK, decode_content=False):
        yield data


def file_body(path_fd: int, offset: int) -> Body:
    """A local file (a ``file://`` cache) from ``offset`` on."""
    size = os.fstat(path_fd).st_size
    start = offset if offset <= size else 0
    os.lseek(path_fd, start, os.SEEK_SET)
    return Body(start, size, iter(lambda: os.read(path_fd, CHUNK), b""))


@dataclass
class _Partial:
    """The partial file being written: its fd, the hash of its first ``n`` bytes."""

    root: Root
    name: str
    fd: int
    h: "hashlib._Hash" = field(default_factory=hashlib.sha256)
    n: int = 0
    resumed: bool = False  # some bytes were kept from an earlier try or run

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def restart(self) -> None:
        os.ftruncate(self.fd, 0)
        self.h, self.n = hashlib.sha256(), 0

    def seed(self, offset: int) -> None:
        """Make the hash cover exactly the first ``offset`` bytes (reading them when it does not)."""
        self.resumed = self.resumed or offset > 0
        if self.n == offset:
            return
        os.ftruncate(self.fd, offset)
        self.h, self.n = hashlib.sha256(), 0
        os.lseek(self.fd, 0, os.SEEK_SET)
        while self.n < offset:
            data = os.read(self.fd, min(CHUNK, offset - self.n))
            if not data:
                break
            self.h.update(data)
            self.n += len(data)

    def write(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            view = view[os.write(self.fd, view):]
        self.h.update(chunk)
        self.n += len(chunk)


def _open_partial(root: Root, name: str, sha256: str | None) -> _Partial:
    """The partial file of ``name`` (kept bytes included), locked; others for ``name`` removed."""
    stem = f".{name}."
    mine = f"{stem}{sha256[:16]}.part" if sha256 else f"{stem}{os.getpid()}.part"
    for other in root.listdir():
        if other.startswith(stem) and other.endswith(".part") and other != mine and _free(root, other):
            root.unlink(other, sync=False)
    fd = root.open_file(mine, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        mine = f"{stem}{os.getpid()}.part"  # another pull writes the shared one: a private one
        fd = root.open_file(mine, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    return _Partial(root, mine, fd)


def _free(root: Root, name: str) -> bool:
    """True when no process holds ``name``'s lock (a live pull's partial is left alone)."""
    try:
        fd = root.open_file(name, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def broke_off(url: str, key: str, part: _Partial, total: int | None, exc: BaseException) -> FetchError:
    tries = net.retries() + 1
    of = f" of {progress.size(total)}" if total else ""
    why = net.why(exc)
    if why == "the connection failed" and isinstance(exc, urllib3.exceptions.ProtocolError):
        why = "the connection was cut mid-body"
    return FetchError(f"{url}: the download of {key[:16]} broke off after {progress.size(part.n)}{of}: {why} "
                      f"(tried {tries} time{'s' if tries > 1 else ''}; what arrived is kept, and the next run "
                      "resumes it)", http.RETRY_HINT, details={"url": url, "key": key, "received": part.n,
                                                               "size": total, "tries": tries})


def pull(dest_root: Root, name: str, open_body: Callable[[int], Body], sha256: str | None, *, url: str, key: str,
         size: int | None = None, label: str = "") -> str:
    """Download into ``name`` in ``dest_root`` (see the module notes); returns the path written.
    ``size``: the blob's size when the caller knows it (an OCI layer's)."""
    from rocmbuild.remote import digest_mismatch

    part = _open_partial(dest_root, name, sha256)
    try:
        with progress.phase("download", label or f"downloading {key[:16]} from {url}") as p:
            state = {"total": size, "declared": size, "restarted": False, "sha256": sha256}
            http.retrying(lambda: _attempt(part, open_body, p, state, url=url, key=key))
            os.fsync(part.fd)
            got = part.h.hexdigest()
            if sha256 is not None and got != sha256:
                dest_root.unlink(part.name)
                raise digest_mismatch(url, key, sha256, got)
    except Oversize:
        dest_root.unlink(part.name)
        raise
    except OSError as exc:
        err = from_os_error(exc, "build", where=dest_root.show(part.name)) if exc.errno in NO_SPACE else None
        if err is None:
            raise
        dest_root.unlink(part.name)  # a partial a full disk cut is worth nothing to a resume
        err.message = f"{err.message}; the partial download of {key[:16]} was removed"
        raise err from exc
    finally:
        os.close(part.fd)
    dest_root.replace(part.name, name)
    return dest_root.show(name)


def _attempt(part: _Partial, open_body: Callable[[int], Body], p: progress.Phase, state: dict, *, url: str,
             key: str) -> None:
    """One try: ask for what is missing, append it; a drop raises :class:`Retry` (the bytes stay)."""
    offset, total = part.size(), state["total"]
    if total is not None and offset > total:
        offset = 0
    if total is None or offset < total:
        part.seed(offset)
        body = open_body(offset)
        try:
            if body.start != offset:
                part.restart()
            os.lseek(part.fd, part.n, os.SEEK_SET)
            declared = state["declared"]
            if declared is not None and body.total is not None and body.total != declared:
                raise Oversize(f"{url}: the server offers {body.total} bytes for the bundle of {key[:16]}, which is "
                               f"declared as {declared}: nothing was kept", OVERSIZE_HINT)
            total = state["total"] = body.total if declared is None and body.total is not None else total
            p.bytes(part.n, total)
            for chunk in _chunks(body.chunks, part, total, url, key):
                if total is not None and part.n + len(chunk) > total:
                    raise Oversize(f"{url}: the server sent more than the {total} bytes of the bundle of {key[:16]}: "
                                   "stopped there, nothing was kept", OVERSIZE_HINT)
                part.write(chunk)
                p.bytes(part.n, total)
        finally:
            body.close()
    else:
        part.seed(offset)
    _check_resumed(part, state, url, key)


def _chunks(chunks: Iterable[bytes], part: _Partial, total: int | None, url: str, key: str) -> Iterator[bytes]:
    try:
        yield from chunks
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
        os.fsync(part.fd)
        raise Retry(broke_off(url, key, part, total, exc)) from exc


def _check_resumed(part: _Partial, state: dict, url: str, key: str) -> None:
    """A resumed download whose digest is wrong starts over from zero, once."""
    from rocmbuild.remote import digest_mismatch

    expected = state.get("sha256")
    if expected is None or not part.resumed or state["restarted"] or part.h.hexdigest() == expected:
        return
    got = part.h.hexdigest()
    state["restarted"] = True
    part.restart()
    part.resumed = False
    raise Retry(digest_mismatch(url, key, expected, got))
