"""The plain caches: a directory (``file:///DIR``) and a static web server (``https://HOST/PATH``,
or ``http://`` to a loopback host or an ``insecure`` one) serving such a directory.

Per key: ``<key>.tar.gz`` (the bundle), ``<key>.manifest.json`` (its manifest's exact bytes),
``<key>.sig`` (the signature, :mod:`.trust`) and ``<key>.tar.gz.sha256`` (``sha256sum`` format),
written in that order: the ``.sha256`` file is the commit mark, and an entry without it is a miss.

Decisions:
* a push into a directory writes through a :class:`~rocmbuild.fs.root.Root` (no symlink followed),
  holding the key's push lock: a POSIX record lock (``fcntl``, which NFS serves too) on
  ``.<key>.push-lock`` in the directory, released by the kernel when a pusher dies, so no stale
  claim can block the key. Under it the push looks again: an entry already complete (its
  ``.sha256`` there) is left as it is and the push uploads nothing; else it writes the whole
  entry (bundle, manifest, signature, then the ``.sha256`` mark), replacing what a killed push
  left. So of two pushes of one key at once exactly one places the entry, bundle and signature
  of that one pusher, and the other is told who signed what is there (issue 26, class 5). The
  lock file gets the directory's group and other write bits: in a cache a fleet's users share,
  each must open it for writing (``lockf``), whoever made it first;
  ``force`` (``push --force``) replaces a complete entry: its ``.sha256`` mark is removed first
  (a reader sees a miss until the new entry is whole); a partial bundle a killed push left
  (``.<key>.tar.gz.<pid>.part``) is removed by the next push of the key, under the lock;
* a web server is read-only here (publish by pushing to its directory with ``file://``); its
  listing reads the server's directory index (the ``<key>.tar.gz.sha256`` links in it).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import time
from contextlib import contextmanager
from typing import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

import requests

from rocmbuild.sources import net
from rocmbuild.config import CacheConfig
from rocmbuild.errors import FetchError, InputError, LockedError
from rocmbuild.remote import Entry, Fetched, bundle_manifest, check_key, side_files
from rocmbuild.remote import download, http
from rocmbuild.fs.root import Root

_SHA = re.compile(r"\s*([0-9a-fA-F]{64})\b")
_LISTED = re.compile(r"([0-9a-f]{64})\.tar\.gz\.sha256")
MAX_SIDE = 64 << 20  # a manifest's exact bytes
MAX_SHA = 4096  # a ``.sha256`` file: one line
MAX_SIG = 64 << 10  # a signature file (about 400 bytes; trust.py reads at most 4 KiB of it)
CAPS = {"manifest": MAX_SIDE, "sha256": MAX_SHA, "sig": MAX_SIG}


def names(key: str) -> dict[str, str]:
    return {"bundle": f"{key}.tar.gz", "sha256": f"{key}.tar.gz.sha256", "manifest": f"{key}.manifest.json",
            "sig": f"{key}.sig"}


def parse_sha(text: str) -> str | None:
    m = _SHA.match(text)
    return m.group(1).lower() if m else None


PUSH_LOCK_WAIT = 1800.0  # seconds a push waits for another push of its key (a slow 1 GiB upload included)


class FileCache:
    def __init__(self, cfg: CacheConfig) -> None:
        u = urlparse(cfg.url)
        if u.netloc not in ("", "localhost") or not u.path.startswith("/"):
            raise InputError(f"{cfg.url}: a file:// cache names an absolute directory", "e.g. file:///srv/rocmbuild-cache")
        self.cfg, self.url, self.dir = cfg, cfg.url, unquote(u.path)

    def _root(self, create: bool = False) -> Root:
        if not create and not os.path.isdir(self.dir):
            raise InputError(f"{self.url}: no such directory {self.dir}", "check the cache URL (a push creates it)")
        return Root.open(self.dir, f"cache {self.url}", create=create)

    def _open(self, root: Root, name: str) -> int | None:
        """An fd of the regular file ``name`` (None: absent). Opened without following a link and
        without blocking (a FIFO planted there would hang a plain open), then checked with
        ``fstat``: a link, a FIFO, a device or a directory is refused (exit 3)."""
        try:
            fd = root.open_file(name, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            what = "a symbolic link" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            raise self._refused(root, name, what) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise self._refused(root, name, "not a regular file (a FIFO, a device or a directory)")
        return fd

    def _refused(self, root: Root, name: str, what: str) -> FetchError:
        return FetchError(f"{self.url}: {root.show(name)} is {what}, not a cache file; nothing was read from it",
                          "remove it from the cache directory (a push writes regular files only), then push again",
                          details={"path": root.show(name)})

    def _read(self, root: Root, name: str, cap: int = MAX_SIDE) -> bytes | None:
        fd = self._open(root, name)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            data = f.read(cap + 1)
        if len(data) > cap:
            raise self._refused(root, name, f"more than {cap} bytes")
        return data

    def _entry(self, root: Root, key: str) -> Entry | None:
        n = names(key)
        side = self._read(root, n["sha256"], MAX_SHA)
        manifest = self._read(root, n["manifest"], MAX_SIDE)
        sha = parse_sha(side.decode(errors="replace")) if side is not None else None
        fd = self._open(root, n["bundle"])
        if fd is None:
            return None
        size = os.fstat(fd).st_size
        os.close(fd)
        if sha is None or manifest is None:
            return None
        return Entry(self.url, key, manifest, sha, size, self._read(root, n["sig"], MAX_SIG))

    def lookup(self, key: str) -> Entry | None:
        if not os.path.isdir(self.dir):
            return None  # nothing pushed yet: a miss (listing it is an error)
        with self._root() as root:
            return self._entry(root, check_key(key))

    def fetch(self, key: str, dest_root: Root) -> Fetched:
        with self._root() as root:
            e = self._entry(root, check_key(key))
            if e is None:
                raise InputError(f"{self.url}: no artifact {key[:16]}", "see `rocmbuild cache list --remote URL`")
            fd = self._open(root, names(key)["bundle"])
            if fd is None:
                raise FetchError(f"{self.url}: the bundle of {key[:16]} went away", "run the command again")
            try:
                bundle = download.pull(dest_root, names(key)["bundle"], lambda offset: download.file_body(fd, offset),
                                       e.bundle_sha256, url=self.url, key=key, size=e.size)
            finally:
                os.close(fd)
        return side_files(dest_root, e, bundle)

    def push(self, key: str, bundle: Path, sha256: str, signature: bytes | None, force: bool = False) -> bool:
        """Place the whole entry under the key's push lock (module notes); False: the cache
        already held a complete entry (nothing written)."""
        n = names(check_key(key))
        with self._root(create=True) as root, self._push_lock(root, key):
            if not force and self._entry(root, key) is not None:
                return False
            root.unlink(n["sha256"])  # the commit mark first: a reader sees a miss until the entry is whole
            for left in root.listdir():  # a killed push's partial (named by its pid): no one else writes it now
                if left.startswith(f".{key}.tar.gz.") and left.endswith(".part"):
                    root.unlink(left)
            tmp = f".{key}.tar.gz.{os.getpid()}.part"
            try:
                with open(bundle, "rb") as src:
                    root.copy_in(src.fileno(), tmp, mode=0o644, sha256=sha256)
                root.replace(tmp, n["bundle"])
            finally:
                root.unlink(tmp)
            root.write_atomic(n["manifest"], bundle_manifest(bundle))
            if signature is not None:
                root.write_atomic(n["sig"], signature)
            else:
                root.unlink(n["sig"])
            root.write_atomic(n["sha256"], f"{sha256}  {n['bundle']}\n".encode())
        return True

    @contextmanager
    def _push_lock(self, root: Root, key: str) -> Iterator[None]:
        """The key's push lock (``.<key>.push-lock``, a regular file opened without following a
        link), waited for with one line when another push holds it."""
        name = f".{key}.push-lock"
        try:
            fd = root.open_file(name, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
        except PermissionError:
            raise FetchError(f"{self.url}: cannot open the push lock {root.show(name)} for writing (another user "
                             "made it, without write access for you): nothing was pushed",
                             f"make it writable for the users who push here (chmod g+w or o+w {root.show(name)}), "
                             "or remove it while no push runs") from None
        except OSError as exc:
            raise self._refused(root, name, "a symbolic link" if exc.errno == errno.ELOOP
                                else (exc.strerror or str(exc))) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self._refused(root, name, "not a regular file (a FIFO, a device or a directory)")
            shared = os.fstat(root.fd).st_mode & 0o022  # who else may push here: they must open it to write
            if st.st_uid == os.geteuid() and (st.st_mode & shared) != shared:
                os.fchmod(fd, (st.st_mode & 0o777) | shared)  # lockf needs it open for writing
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                from rocmbuild import ui

                ui.info(f"{self.url}: another push of {key[:16]} is under way: waiting for it "
                        f"(at most {PUSH_LOCK_WAIT / 60:.0f} minutes)")
                self._wait_for(fd, root.show(name))
            yield
        finally:
            os.close(fd)  # releases the lock

    def _wait_for(self, fd: int, shown: str) -> None:
        """Wait for the push lock, at most :data:`PUSH_LOCK_WAIT` seconds: a push still going after
        that (or a process that holds the lock and does nothing) ends this one with exit 5."""
        deadline = time.monotonic() + PUSH_LOCK_WAIT
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                raise LockedError(f"{self.url}: another push has held {shown} for {PUSH_LOCK_WAIT / 60:.0f} minutes: "
                                  "nothing was pushed", "run the push again once the other one has ended (see which "
                                  "process holds it: fuser or lsof on that file)", details={"lock": shown})
            time.sleep(0.5)

    def list(self) -> list[Entry]:
        with self._root() as root:
            keys = [m.group(1) for name in root.listdir() if (m := re.fullmatch(_LISTED, name))]
            return [e for k in keys if (e := self._entry(root, k)) is not None]


class HttpCache:
    def __init__(self, cfg: CacheConfig) -> None:
        u = urlparse(cfg.url)
        if u.scheme == "http":
            http.check_plain_http(cfg, u.hostname or "")
        self.cfg, self.url, self.base = cfg, cfg.url, cfg.url.rstrip("/") + "/"

    def _get(self, s: requests.Session, name: str, cap: int) -> bytes | None:
        url = self.base + name
        try:
            resp = s.get(url, timeout=(30, 60), auth=self._auth(), stream=True)
        except requests.RequestException as exc:
            raise http.network_error(self.cfg, url, exc) from exc
        if resp.status_code in (404, 410):
            return None
        if resp.status_code in (401, 403):
            raise http.auth_error(self.cfg, url, resp.status_code, self._auth() is not None)
        if not resp.ok:
            raise http.status_error(self.cfg, url, resp, "read the cache")
        try:
            return http.read_capped(resp, cap, self.cfg, f"read {name}")
        except requests.RequestException as exc:
            raise http.network_error(self.cfg, url, exc) from exc

    def _stream(self, s: requests.Session, url: str, headers: dict[str, str]) -> requests.Response:
        """A streamed GET of ``url`` (200, 206 or 416). The session already retried a refused
        connection and a 5xx with backoff (rocmbuild.sources.net): those are final here."""
        try:
            resp = s.get(url, stream=True, timeout=net.TIMEOUT, auth=self._auth(), headers=headers)
        except requests.RequestException as exc:
            raise http.network_error(self.cfg, url, exc) from exc
        if resp.status_code in (200, 206, 416):
            return resp
        resp.close()
        if resp.status_code in (401, 403):
            raise http.auth_error(self.cfg, url, resp.status_code, self._auth() is not None)
        raise http.status_error(self.cfg, url, resp, "download the bundle")

    def _auth(self) -> tuple[str, str] | None:
        return http.credentials(self.cfg, urlparse(self.url).netloc)

    def _entry(self, s: requests.Session, key: str) -> Entry | None:
        n = names(key)
        side = self._get(s, n["sha256"], MAX_SHA)
        sha = parse_sha(side.decode(errors="replace")) if side is not None else None
        manifest = self._get(s, n["manifest"], MAX_SIDE) if sha else None
        if sha is None or manifest is None:
            return None
        return Entry(self.url, key, manifest, sha, None, self._get(s, n["sig"], MAX_SIG))

    def lookup(self, key: str) -> Entry | None:
        with http.session(self.cfg) as s:
            return self._entry(s, check_key(key))

    def fetch(self, key: str, dest_root: Root) -> Fetched:
        with http.session(self.cfg) as s:
            e = self._entry(s, check_key(key))
            if e is None:
                raise InputError(f"{self.url}: no artifact {key[:16]}", "see `rocmbuild cache list --remote URL`")
            url = self.base + names(key)["bundle"]
            bundle = download.pull(dest_root, names(key)["bundle"],
                                   lambda offset: download.http_open(lambda h: self._stream(s, url, h), offset),
                                   e.bundle_sha256, url=self.url, key=key)
        return side_files(dest_root, e, bundle)

    def push(self, key: str, bundle: Path, sha256: str, signature: bytes | None, force: bool = False) -> bool:
        raise InputError(f"{self.url}: a web server cache is read-only here",
                         "push to the directory it serves (file:///DIR), or to an oci:// registry")

    def list(self) -> list[Entry]:
        with http.session(self.cfg) as s:
            index = self._get(s, "", MAX_SIDE)
            keys = sorted(set(_LISTED.findall((index or b"").decode(errors="replace"))))
            return [e for k in keys if (e := self._entry(s, k)) is not None]


