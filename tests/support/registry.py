"""A real OCI registry for tests: Debian's ``docker-registry`` (the CNCF distribution registry 2.8)
on 127.0.0.1 with a free port and a temp storage dir, optionally behind htpasswd basic auth.

:func:`start` writes its YAML config, starts ``docker-registry serve CONFIG`` in a process group
of its own, waits until ``/v2/`` answers, and returns a :class:`RegistryServer` whose ``stop()``
kills the group (the fixture calls it in teardown). :func:`static_server` serves a directory
over plain HTTP on 127.0.0.1 (``http.server`` in a thread) for the static cache.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import requests

EXE = "docker-registry"
USER, PASSWORD = "fleet", "s3cret-token"


def missing() -> str | None:
    """Why the registry tests cannot run (None: they can)."""
    if shutil.which(EXE) is None:
        return "docker-registry is not installed (apt-get install docker-registry; .ci/run installs it)"
    if shutil.which("htpasswd") is None:
        return "htpasswd is not installed (apt-get install apache2-utils; .ci/run installs it)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RegistryServer:
    proc: subprocess.Popen
    port: int
    storage: Path
    log: Path
    auth: bool

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, repo: str = "rocmbuild/cache") -> str:
        return f"oci://{self.host}/{repo}"

    def blobs(self) -> list[Path]:
        """Every blob's data file in the storage dir."""
        return sorted(self.storage.rglob("blobs/sha256/*/*/data"))

    def blob(self, hexdigest: str) -> Path:
        return self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


def _config(storage: Path, port: int, htpasswd: Path | None) -> str:
    auth = (f"auth:\n  htpasswd:\n    realm: rocmbuild-test\n    path: {htpasswd}\n") if htpasswd else ""
    return (f"version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{port}\n  secret: rocmbuild-test-secret\n{auth}")


def start(where: Path, *, auth: bool = False) -> RegistryServer:
    where.mkdir(parents=True, exist_ok=True)
    htpasswd = None
    if auth:
        htpasswd = where / "htpasswd"
        line = subprocess.run(["htpasswd", "-Bbn", USER, PASSWORD], check=True, capture_output=True, text=True).stdout
        htpasswd.write_text(line.strip() + "\n")
    port, storage, log = free_port(), where / "storage", where / "registry.log"
    storage.mkdir(exist_ok=True)
    cfg = where / "config.yml"
    cfg.write_text(_config(storage, port, htpasswd))
    with open(log, "wb") as out:
        proc = subprocess.Popen([EXE, "serve", str(cfg)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    server = RegistryServer(proc, port, storage, log, auth)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            if requests.get(f"http://{server.host}/v2/", timeout=1).status_code in (200, 401):
                return server
        except requests.RequestException:
            pass
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"docker-registry did not answer within 20 s: {log.read_text()[-2000:]}")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest's output clean
        pass


@dataclass
class StaticServer:
    server: http.server.ThreadingHTTPServer
    thread: threading.Thread
    root: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def static_server(root: Path) -> StaticServer:
    """``root`` over plain HTTP on 127.0.0.1 (a free port), directory listings included."""
    root.mkdir(parents=True, exist_ok=True)
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return StaticServer(server, thread, root)
