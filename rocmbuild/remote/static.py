"""The plain caches: a directory (``file:///DIR``) and a static web server (``https://HOST/PATH``,
or ``http://`` to a loopback host or an ``insecure`` one) serving such a directory.

Per key: ``<key>.tar.gz`` (the bundle), ``<key>.manifest.json`` (its manifest's exact bytes),
``<key>.sig`` (the signature, :mod:`.trust`) and ``<key>.tar.gz.sha256`` (``sha256sum`` format),
written in that order: the ``.sha256`` file is the commit mark, and an entry without it is a miss.

Decisions:
* a push into a directory writes through a :class:`~rocmbuild.root.Root` (no symlink followed);
  the bundle is claimed with ``linkat`` of a fully written temp file, so of two pushes of one key
  at once exactly one places its bundle and its side files and the other uploads nothing (both
  succeed); an entry a killed push left without its ``.sha256`` is finished by the next push of
  the same bytes;
* a web server is read-only here (publish by pushing to its directory with ``file://``); its
  listing reads the server's directory index (the ``<key>.tar.gz.sha256`` links in it).
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import requests

from rocmbuild.build import net
from rocmbuild.config import CacheConfig
from rocmbuild.errors import InputError
from rocmbuild.remote import Entry, Fetched, bundle_manifest, check_key, side_files
from rocmbuild.remote import download, http
from rocmbuild.root import Root

_SHA = re.compile(r"\s*([0-9a-fA-F]{64})\b")
_LISTED = re.compile(r"([0-9a-f]{64})\.tar\.gz\.sha256")
MAX_SIDE = 64 << 20


def names(key: str) -> dict[str, str]:
    return {"bundle": f"{key}.tar.gz", "sha256": f"{key}.tar.gz.sha256", "manifest": f"{key}.manifest.json",
            "sig": f"{key}.sig"}


def parse_sha(text: str) -> str | None:
    m = _SHA.match(text)
    return m.group(1).lower() if m else None


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

    @staticmethod
    def _read(root: Root, name: str) -> bytes | None:
        st = root.lstat(name)
        if st is None:
            return None
        if st.st_size > MAX_SIDE:
            raise InputError(f"{root.show(name)} is {st.st_size} bytes: not a cache file", "remove it")
        return root.read_bytes(name)

    def _entry(self, root: Root, key: str) -> Entry | None:
        n = names(key)
        side, manifest = self._read(root, n["sha256"]), self._read(root, n["manifest"])
        sha = parse_sha(side.decode(errors="replace")) if side is not None else None
        st = root.lstat(n["bundle"])
        if sha is None or manifest is None or st is None:
            return None
        return Entry(self.url, key, manifest, sha, st.st_size, self._read(root, n["sig"]))

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
            fd = root.open_file(names(key)["bundle"])
            try:
                bundle = download.pull(dest_root, names(key)["bundle"], lambda offset: download.file_body(fd, offset),
                                       e.bundle_sha256, url=self.url, key=key, size=e.size)
            finally:
                os.close(fd)
        return side_files(dest_root, e, bundle)

    def push(self, key: str, bundle: Path, sha256: str, signature: bytes | None) -> bool:
        n = names(check_key(key))
        with self._root(create=True) as root:
            if self._entry(root, key) is not None:
                return False
            if not self._claim(root, key, bundle, sha256):
                return False
            root.write_atomic(n["manifest"], bundle_manifest(bundle))
            if signature is not None:
                root.write_atomic(n["sig"], signature)
            root.write_atomic(n["sha256"], f"{sha256}  {n['bundle']}\n".encode())
        return True

    def _claim(self, root: Root, key: str, bundle: Path, sha256: str) -> bool:
        """Place the bundle under its name unless another push did; True: this push owns the entry
        (or finishes one a killed push left with the same bytes)."""
        final, tmp = names(key)["bundle"], f".{key}.tar.gz.{os.getpid()}.part"
        with open(bundle, "rb") as src:
            root.copy_in(src.fileno(), tmp, mode=0o644, sha256=sha256)
        try:
            with root.parent(tmp) as (dfd, tname):
                os.link(tname, final, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                os.fsync(dfd)
            return True
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
            return root.sha256(final) == sha256 and self._read(root, names(key)["sha256"]) is None
        finally:
            root.unlink(tmp)

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

    def _get(self, s: requests.Session, name: str) -> bytes | None:
        url = self.base + name
        try:
            resp = s.get(url, timeout=(30, 60), auth=self._auth())
        except requests.RequestException as exc:
            raise http.network_error(self.cfg, url, exc) from exc
        if resp.status_code in (404, 410):
            return None
        if resp.status_code in (401, 403):
            raise http.auth_error(self.cfg, url, resp.status_code, self._auth() is not None)
        if not resp.ok:
            raise http.status_error(self.cfg, url, resp, "read the cache")
        return resp.content

    def _stream(self, s: requests.Session, url: str, headers: dict[str, str]) -> requests.Response:
        """A streamed GET of ``url`` (200, 206 or 416). The session already retried a refused
        connection and a 5xx with backoff (rocmbuild.build.net): those are final here."""
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
        side = self._get(s, n["sha256"])
        sha = parse_sha(side.decode(errors="replace")) if side is not None else None
        manifest = self._get(s, n["manifest"]) if sha else None
        if sha is None or manifest is None:
            return None
        return Entry(self.url, key, manifest, sha, None, self._get(s, n["sig"]))

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

    def push(self, key: str, bundle: Path, sha256: str, signature: bytes | None) -> bool:
        raise InputError(f"{self.url}: a web server cache is read-only here",
                         "push to the directory it serves (file:///DIR), or to an oci:// registry")

    def list(self) -> list[Entry]:
        with http.session(self.cfg) as s:
            index = self._get(s, "")
            keys = sorted(set(_LISTED.findall((index or b"").decode(errors="replace"))))
            return [e for k in keys if (e := self._entry(s, k)) is not None]


