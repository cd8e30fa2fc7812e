"""An HTTP server for download tests, on 127.0.0.1 (a free port), in a thread: it serves a
directory (with ``Range: bytes=N-`` answered 206, which Python's own ``http.server`` does not do)
or forwards to an upstream server (a real registry), and does to the bodies of the paths that
end with ``target`` what the test asks:

* ``drop_after = N``, ``drops = K``: the next K such bodies stop after N bytes and the connection
  is cut (the client sees fewer bytes than ``Content-Length`` promised);
* ``slow`` (an Event; set: trickle): such a body is sent ``trickle`` bytes at a time, ``delay``
  seconds apart, until ``slow`` is cleared.

Every request is recorded (:class:`Seen`: method, path, its ``Range``, status, body bytes sent);
``sent(target)`` sums the body bytes of the target's answers. ``stop()`` (teardown) ends it.
"""

from __future__ import annotations

import http.server
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

_RANGE = re.compile(r"^bytes=(\d+)-$")
_FORWARD = ("Content-Type", "Content-Length", "Content-Range", "Docker-Content-Digest", "WWW-Authenticate",
            "Accept-Ranges", "Location")


@dataclass
class Seen:
    method: str
    path: str
    range: str | None
    status: int = 0
    sent: int = 0


@dataclass
class Faults:
    target: str = ".tar.gz"
    drop_after: int | None = None
    drops: int = 0
    trickle: int = 1024
    delay: float = 0.05
    slow: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: "_Server"

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, *, body: bool) -> None:
        faults = self.server.faults
        seen = Seen(self.command, self.path, self.headers.get("Range"))
        with faults.lock:
            faults.seen.append(seen)
        if self.server.upstream:
            status, headers, chunks = self._forwarded()
        else:
            status, headers, chunks = self._from_dir()
        seen.status = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self._body(seen, chunks)

    def _from_dir(self):
        path = Path(self.server.root, self.path.split("?")[0].lstrip("/"))
        if not path.is_file():
            return 404, {"Content-Length": "0"}, iter(())
        data = path.read_bytes()
        m = _RANGE.match(self.headers.get("Range") or "")
        if m and int(m.group(1)) >= len(data):
            return 416, {"Content-Range": f"bytes */{len(data)}", "Content-Length": "0"}, iter(())
        start = int(m.group(1)) if m else 0
        headers = {"Content-Length": str(len(data) - start), "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        if m:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        return (206 if m else 200), headers, iter([data[start:]])

    def _forwarded(self):
        keep = {k: v for k, v in self.headers.items() if k.lower() in ("range", "accept", "authorization")}
        resp = requests.request(self.command, self.server.upstream + self.path, headers=keep, stream=True,
                                allow_redirects=False, timeout=30)
        headers = {k: resp.headers[k] for k in _FORWARD if k in resp.headers}
        if resp.status_code == 416:
            headers["Content-Length"] = "0"
            return 416, headers, iter(())
        return resp.status_code, headers, resp.iter_content(64 << 10)

    def _body(self, seen: Seen, chunks) -> None:
        faults = self.server.faults
        targeted = self.path.split("?")[0].endswith(faults.target) and seen.status in (200, 206)
        limit = None
        with faults.lock:
            if targeted and faults.drop_after is not None and faults.drops > 0:
                faults.drops -= 1
                limit = faults.drop_after
        try:
            for chunk in chunks:
                for piece in self._pieces(chunk, targeted):
                    if limit is not None and seen.sent + len(piece) > limit:
                        piece = piece[:limit - seen.sent]
                        self.wfile.write(piece)
                        seen.sent += len(piece)
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    self.wfile.write(piece)
                    self.wfile.flush()
                    seen.sent += len(piece)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _pieces(self, chunk: bytes, targeted: bool):
        faults = self.server.faults
        while chunk:
            if targeted and faults.slow.is_set() and not faults.stopping.is_set():
                piece, chunk = chunk[:faults.trickle], chunk[faults.trickle:]
                time.sleep(faults.delay)
            else:
                piece, chunk = chunk, b""
            yield piece


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path | None, upstream: str | None, faults: Faults) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root, self.upstream, self.faults = root, upstream, faults


@dataclass
class FlakyServer:
    server: _Server
    thread: threading.Thread

    @property
    def faults(self) -> Faults:
        return self.server.faults

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.host}/"

    def seen(self, target: str | None = None) -> list[Seen]:
        t = target if target is not None else self.faults.target
        with self.faults.lock:
            return [s for s in self.faults.seen if s.path.split("?")[0].endswith(t) and s.method == "GET"]

    def sent(self, target: str | None = None) -> int:
        return sum(s.sent for s in self.seen(target))

    def stop(self) -> None:
        self.faults.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def start(*, root: Path | None = None, upstream: str | None = None, faults: Faults | None = None) -> FlakyServer:
    """Serve ``root`` (a directory) or forward to ``upstream`` (``http://HOST:PORT``)."""
    server = _Server(root, upstream.rstrip("/") if upstream else None, faults or Faults())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return FlakyServer(server, thread)
