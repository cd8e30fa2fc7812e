"""An HTTP server that records what it was sent, for the credential tests: on 127.0.0.1 (or
``localhost``, a second origin), a free port, in a thread; ended by ``stop()`` in teardown.

It either forwards every request (any method, its body too) to an ``upstream`` server (a real
docker-registry), optionally rewriting the ``Location`` of its answers (``relocate``: a registry
that names another origin for an upload), or answers with ``answer(method, path, headers)`` ->
``(status, headers, body)`` (a fake registry or token endpoint; a body that is an iterator of
chunks is sent without a length until the client hangs up, counted in ``streamed``; a
``Content-Length`` the answer gives is sent as given, whatever the body). Every request is recorded as a
:class:`Sent` (method, path, its ``Authorization`` header), before anything is answered.
"""

from __future__ import annotations

import http.server
import threading
from dataclasses import dataclass, field
from typing import Callable

import requests

Answer = Callable[[str, str, dict], "tuple[int, dict, bytes]"]
_KEEP = ("content-type", "content-length", "accept", "authorization", "range")
_BACK = ("Content-Type", "Content-Length", "Content-Range", "Docker-Content-Digest", "WWW-Authenticate",
         "Location", "Range", "Docker-Upload-UUID")


@dataclass
class Sent:
    method: str
    path: str
    authorization: str | None


@dataclass
class _State:
    upstream: str | None
    answer: Answer | None
    relocate: Callable[[str], str] | None
    sent: list[Sent] = field(default_factory=list)
    streamed: int = 0  # bytes of endless bodies written
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args) -> None:
        pass

    def _any(self) -> None:
        st = self.server.state
        with st.lock:
            st.sent.append(Sent(self.command, self.path, self.headers.get("Authorization")))
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if st.answer is not None:
            status, headers, data = st.answer(self.command, self.path, dict(self.headers))
        else:
            keep = {k: v for k, v in self.headers.items() if k.lower() in _KEEP}
            resp = requests.request(self.command, st.upstream + self.path, headers=keep, data=body,
                                    allow_redirects=False, timeout=30)
            status, data = resp.status_code, resp.content
            headers = {k: resp.headers[k] for k in _BACK if k in resp.headers}
            if "Location" in headers and st.relocate is not None:
                headers["Location"] = st.relocate(headers["Location"])
        endless = not isinstance(data, bytes)
        if endless:  # an iterator of chunks: no length, the body ends when the connection does
            headers = {**headers, "Connection": "close"}
            self.close_connection = True
        else:
            headers = {"Content-Length": str(len(data) if self.command != "HEAD" else
                                             headers.get("Content-Length", len(data))), **headers}
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            return
        try:
            for chunk in (data if endless else [data]):
                self.wfile.write(chunk)
                if endless:
                    self.server.state.streamed += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, state: _State) -> None:
        super().__init__((host, 0), _Handler)
        self.state = state


@dataclass
class Recorder:
    server: _Server
    thread: threading.Thread
    name: str

    @property
    def host(self) -> str:
        """``NAME:PORT`` as a client names it (``127.0.0.1`` or ``localhost``)."""
        return f"{self.name}:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def sent(self) -> list[Sent]:
        with self.server.state.lock:
            return list(self.server.state.sent)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def empty_registry(method: str, path: str, headers: object) -> tuple[int, dict[str, str], bytes]:
    """An ``answer`` for :func:`start`: an OCI registry whose cache repository has no tags."""
    return 200, {"Content-Type": "application/json"}, b'{"name": "rocmbuild/cache", "tags": []}'


def start(*, upstream: str | None = None, answer: Answer | None = None,
          relocate: Callable[[str], str] | None = None, name: str = "127.0.0.1") -> Recorder:
    """Forward to ``upstream`` (``http://HOST:PORT``) or answer with ``answer``; listen on 127.0.0.1,
    named ``name`` by the client (``localhost`` makes it another origin than ``127.0.0.1``)."""
    server = _Server("127.0.0.1", _State(upstream.rstrip("/") if upstream else None, answer, relocate))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return Recorder(server, thread, name)
