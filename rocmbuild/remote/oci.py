"""An OCI registry as a binary cache (``oci://HOST[:PORT]/REPO``), spoken with ``requests`` over
the OCI distribution API (docs/caches.md has the layout).

Per artifact key, in the repository ``REPO``:
* tag ``<key>``: an OCI image manifest (``artifactType`` ``application/vnd.rocmbuild.artifact.v1``)
  whose config blob is the artifact's manifest (exact bytes, ``application/vnd.rocmbuild.manifest.v1+json``)
  and whose one layer is the bundle (``application/vnd.rocmbuild.bundle.v1.tar+gzip``): the
  layer's digest *is* the bundle's sha256;
* tag ``<key>.sig``: a manifest with the empty config and one layer, the signature file
  (``application/vnd.rocmbuild.signature.v1+json``). A tag, not an OCI referrer: the referrers API
  is OCI 1.1 and many registries in use (the CNCF distribution registry 2.x, Debian's
  docker-registry) do not serve it; a tag works on every registry and is pushed *before* the
  key's tag, so whoever sees the key sees its signature.

Why not the ``oras`` package (tried, 0.2.x): its every request goes through a retry decorator
that retries *any* exception five times, sleeping 3 + 3**n seconds (about two minutes before an
error), including a refused connection and failed authentication (reported as a bare
``ValueError``), not tunable, deaf to ``ROCMBUILD_DOWNLOAD_RETRIES``; and ``download_blob`` does
not check the blob's digest. The API needed here is small (ping, manifests, blobs, monolithic
uploads, tags list, Basic and Bearer token auth), so it is spoken directly.

Decisions: HTTP for a loopback host or an ``insecure`` cache, else HTTPS (``ca_bundle`` for a
private CA); every request goes to the registry's own origin (an upload ``Location`` elsewhere
is refused, nothing sent) and a token realm gets the credentials only on the registry's host or
over https from an https registry (docs/caches.md, "Where the credentials go"); every blob read is checked against its digest while it streams; the bundle's
download (:mod:`.download`) resumes with a ``Range`` request, which the distribution API serves
on blobs; uploads are
monolithic (POST then PUT), and a blob the registry already has is not sent again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

import requests

from rocmbuild.config import CacheConfig
from rocmbuild.errors import FetchError, InputError
from rocmbuild.remote import Entry, Fetched, bundle_manifest, check_key, side_files
from rocmbuild.remote import download, http
from rocmbuild.remote.http import Retry
from rocmbuild.fs.root import Root

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.rocmbuild.artifact.v1"
CONFIG_TYPE = "application/vnd.rocmbuild.manifest.v1+json"
BUNDLE_TYPE = "application/vnd.rocmbuild.bundle.v1.tar+gzip"
SIG_TYPE = "application/vnd.rocmbuild.signature.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
TIMEOUT = (30, 300)
MAX_SMALL = 64 << 20  # a config blob (the artifact's manifest) or a signature blob
MAX_MANIFEST = 4 << 20  # an OCI manifest (the distribution registry's own limit)
MAX_SIG = 64 << 10  # a signature blob (about 400 bytes)
MAX_BUNDLE = 1 << 40  # a bundle layer: 1 TiB, more than any library set
MAX_TOKEN = 1 << 20  # a token service's answer
_TAG = re.compile(r"^[0-9a-f]{64}$")
_TOKEN = re.compile(r"^[\x21-\x7e]{1,16384}$")  # what an HTTP header may carry


def _descriptor(media_type: str, data_digest: str, size: int) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": f"sha256:{data_digest}", "size": size}


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', rest))


class Registry:
    """The requests of the distribution API for one repository, with auth and retries."""

    def __init__(self, cfg: CacheConfig) -> None:
        u = urlparse(cfg.url)
        self.repo = u.path.strip("/")
        if not u.hostname or not self.repo:
            raise InputError(f"{cfg.url}: an oci:// cache names a host and a repository", "e.g. oci://registry.lab:5000/rocmbuild")
        plain = http.is_loopback(u.hostname) or cfg.insecure
        self.cfg, self.host = cfg, u.netloc
        self.base = f"{'http' if plain else 'https'}://{u.netloc}/v2/"
        self.session = requests.Session()
        self.session.headers["Accept-Encoding"] = http.ACCEPT_ENCODING
        if cfg.ca_bundle:
            self.session.verify = cfg.ca_bundle
        self.origin = http.origin(self.base)
        self.auth: dict[str, str] = {}
        self.creds = http.credentials(cfg, self.host)

    def url(self, path: str) -> str:
        return urljoin(self.base, f"{self.repo}/{path}")

    def _realm(self, realm: str) -> str:
        """The token service a Bearer challenge names, if the credentials may go there: on the
        registry's own host (https, or http where the registry's plain-HTTP rule allows it), or
        over https on another host when the registry itself answered over https (the challenge
        naming it was TLS-authenticated: Docker Hub's auth.docker.io, GitLab's /jwt/auth)."""
        r, reg = urlparse(realm), urlparse(self.base)
        shown = realm.split("?")[0][:200]
        if r.scheme not in ("http", "https") or not r.hostname:
            raise FetchError(f"{self.cfg.url}: the registry names its token service {shown!r}, which is not an "
                             "http(s) URL; no credentials were sent", "the registry's auth setup is broken: tell "
                             "whoever runs it (its token realm)", details={"realm": shown})
        same_host = r.hostname.lower() == (reg.hostname or "").lower()
        if r.scheme == "https" and (same_host or reg.scheme == "https"):
            return realm
        if r.scheme == "http" and same_host and (http.is_loopback(r.hostname) or self.cfg.insecure):
            return realm
        why = ("plain HTTP to another host" if r.scheme == "http" else
               "another host, named over plain HTTP (anyone on the way could have named it)")
        raise FetchError(f"{self.cfg.url}: the registry names its token service {shown}: {why}; "
                         "the registry's credentials were not sent there",
                         "a token service on another host is used only over https and only when the registry "
                         "itself is reached over https; tell whoever runs the registry, or use its own host",
                         details={"realm": shown, "registry": self.base})

    def _authenticate(self, resp: requests.Response) -> None:
        scheme, params = _challenge(resp.headers.get("WWW-Authenticate", ""))
        if self.creds is None and scheme != "bearer":
            raise http.auth_error(self.cfg, resp.url, resp.status_code, False)
        if scheme == "basic" and self.creds is not None:  # (without creds it was refused above)
            basic = base64.b64encode(f"{self.creds[0]}:{self.creds[1]}".encode()).decode()
            self.auth = {"Authorization": f"Basic {basic}"}
            return
        if scheme != "bearer" or "realm" not in params:
            raise http.auth_error(self.cfg, resp.url, resp.status_code, self.creds is not None)
        realm = self._realm(params["realm"])
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        query.setdefault("scope", f"repository:{self.repo}:pull,push")
        try:
            got = self.session.get(realm, params=query, auth=self.creds, timeout=TIMEOUT, stream=True)
            body = http.read_capped(got, MAX_TOKEN, self.cfg, "read the registry's token") if got.ok else b""
        except requests.RequestException as exc:
            raise Retry(http.network_error(self.cfg, realm.split("?")[0], exc)) from exc
        if not got.ok:
            raise http.auth_error(self.cfg, resp.url, got.status_code, self.creds is not None)
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            doc = None
        token = (doc.get("token") or doc.get("access_token")) if isinstance(doc, dict) else None
        if not isinstance(token, str) or not _TOKEN.match(token):
            raise FetchError(f"{self.cfg.url}: the registry's token service ({realm.split('?')[0][:200]}) answered "
                             "without a usable token", "the registry's auth setup is broken: tell whoever runs it",
                             details={"realm": realm.split("?")[0][:200]})
        self.auth = {"Authorization": f"Bearer {token}"}

    def request(self, method: str, url: str, *, action: str, ok: tuple[int, ...] = (200,), **kw) -> requests.Response:
        """One request (authenticated on a 401, once); 5xx and dropped connections raise
        :class:`Retry`; any other answer outside ``ok`` (and not 404) raises at once."""
        if http.origin(url) != self.origin:
            there = "{}://{}:{}".format(*http.origin(url))
            raise FetchError(f"{self.cfg.url}: the registry asked rocmbuild to {action} at {there}, another "
                             f"origin than its own ({self.base}); nothing was sent there, credentials least of all",
                             "the registry (or a proxy in front of it) names a wrong host in its Location: fix its "
                             "external URL (distribution: http.host), then run again",
                             details={"url": there, "registry": self.base})
        kw.setdefault("timeout", TIMEOUT)
        for attempt in (0, 1):
            headers = {**kw.pop("headers", {}), **self.auth}
            try:
                resp = self.session.request(method, url, headers=headers, **kw)
            except requests.RequestException as exc:
                raise Retry(http.network_error(self.cfg, url, exc)) from exc
            kw["headers"] = {k: v for k, v in headers.items() if k != "Authorization"}
            if resp.status_code in (401, 403) and attempt == 0 and not self.auth:
                resp.close()
                self._authenticate(resp)
                continue
            break
        if resp.status_code in (401, 403):
            raise http.auth_error(self.cfg, url, resp.status_code, self.creds is not None)
        if resp.status_code >= 500 or resp.status_code == 429:
            resp.close()
            raise Retry(http.status_error(self.cfg, url, resp, action))
        if resp.status_code not in ok and resp.status_code != 404:
            resp.close()
            raise http.status_error(self.cfg, url, resp, action)
        return resp

    def call(self, method: str, path: str, *, action: str, ok: tuple[int, ...] = (200,), **kw) -> requests.Response:
        return http.retrying(lambda: self.request(method, self.url(path), action=action, ok=ok, **dict(kw)))

    # -- blobs -------------------------------------------------------------------------------
    def read(self, resp: requests.Response, action: str, cap: int = MAX_SMALL) -> bytes:
        """``resp``'s body, read as it streams and refused past ``cap`` bytes (exit 3)."""
        try:
            return http.read_capped(resp, cap, self.cfg, action)
        except requests.RequestException as exc:
            raise Retry(http.network_error(self.cfg, resp.url, exc)) from exc

    def small_blob(self, digest: str, action: str, cap: int = MAX_SMALL) -> bytes:
        """A manifest's config or the signature, read (at most :data:`MAX_SMALL` bytes, as it
        streams) and checked against its digest."""
        resp = self.call("GET", f"blobs/{digest}", action=action, stream=True)
        if resp.status_code == 404:
            resp.close()
            raise FetchError(f"{self.cfg.url}: the registry lost blob {digest[:19]}", "push the artifact again")
        data = self.read(resp, action, cap)
        if hashlib.sha256(data).hexdigest() != digest.removeprefix("sha256:"):
            raise FetchError(f"{self.cfg.url}: blob {digest[:19]}... does not match its digest",
                             "the registry's copy is damaged: push the artifact again")
        return data

    def has_blob(self, hexdigest: str) -> bool:
        return self.call("HEAD", f"blobs/sha256:{hexdigest}", action="check a blob").status_code == 200

    def put_blob(self, hexdigest: str, data_of, size: int) -> None:
        """Upload a blob (monolithic), unless the registry has it. ``data_of()`` opens its bytes
        (again on a retry)."""
        if self.has_blob(hexdigest):
            return

        def attempt() -> None:
            start = self.request("POST", self.url("blobs/uploads/"), action="start an upload", ok=(202,))
            if not start.headers.get("Location"):
                start.close()
                raise FetchError(f"{self.cfg.url}: the registry started an upload (HTTP {start.status_code}) "
                                 "without saying where to send it (no Location header)",
                                 "the registry is not OCI-conformant: tell whoever runs it")
            loc = urljoin(self.url("blobs/uploads/"), start.headers["Location"])
            sep = "&" if "?" in loc else "?"
            with data_of() as body:
                self.request("PUT", f"{loc}{sep}digest=sha256:{hexdigest}", action="upload a blob", ok=(201,),
                             data=body, headers={"Content-Type": "application/octet-stream",
                                                 "Content-Length": str(size)})

        http.retrying(attempt)

    def get_manifest(self, tag: str) -> dict[str, Any] | None:
        resp = self.call("GET", f"manifests/{tag}", action="read a manifest", headers={"Accept": MANIFEST_TYPE},
                         stream=True)
        if resp.status_code == 404:
            resp.close()
            return None
        try:
            doc = json.loads(self.read(resp, "read a manifest", MAX_MANIFEST))
            return doc if isinstance(doc, dict) else None
        except (ValueError, RecursionError):
            return None

    def put_manifest(self, tag: str, doc: dict[str, Any]) -> None:
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        self.call("PUT", f"manifests/{tag}", action="tag the artifact", ok=(201,), data=data,
                  headers={"Content-Type": MANIFEST_TYPE})


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def __enter__(self) -> bytes:
        return self.data

    def __exit__(self, *exc) -> None:
        pass


def _layer(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    layers = doc.get("layers") if doc else None
    first = layers[0] if isinstance(layers, list) and layers and isinstance(layers[0], dict) else None
    return first if first and str(first.get("digest", "")).startswith("sha256:") else None


class OciCache:
    def __init__(self, cfg: CacheConfig) -> None:
        self.cfg, self.url, self.reg = cfg, cfg.url, Registry(cfg)

    def lookup(self, key: str) -> Entry | None:
        doc = self.reg.get_manifest(check_key(key))
        layer, config = _layer(doc), (doc or {}).get("config")
        if layer is None or not isinstance(config, dict) or not str(config.get("digest", "")).startswith("sha256:"):
            return None
        size = self._size(key, layer, MAX_BUNDLE, "bundle")
        self._size(key, config, MAX_SMALL, "manifest")
        manifest = self.reg.small_blob(config["digest"], "read the artifact's manifest")
        sig_layer = _layer(self.reg.get_manifest(f"{key}.sig"))
        if sig_layer:
            self._size(key, sig_layer, MAX_SIG, "signature")
        sig = self.reg.small_blob(sig_layer["digest"], "read the signature", MAX_SIG) if sig_layer else None
        return Entry(self.url, key, manifest, layer["digest"].removeprefix("sha256:"), size, sig)

    def _size(self, key: str, descriptor: dict[str, Any], cap: int, what: str) -> int:
        """A descriptor's ``size``: a whole number of bytes up to ``cap``, else refused (exit 3)."""
        size = descriptor.get("size")
        if type(size) is not int or not 0 <= size <= cap:
            shown = json.dumps(size)[:40] if size is None or isinstance(size, (int, float, str, bool)) else type(size).__name__
            raise FetchError(f"{self.url}: artifact {key[:16]} declares its {what} as {shown} bytes, which is not a "
                             f"size rocmbuild takes (a whole number up to {cap})",
                             "the registry's copy is damaged or forged: push the artifact again from the builder",
                             details={"key": key, "size": shown})
        return size

    def fetch(self, key: str, dest_root: Root) -> Fetched:
        e = self.lookup(key)
        if e is None:
            raise InputError(f"{self.url}: no artifact {key[:16]}", "see `rocmbuild cache list --remote URL`")
        blob = self.reg.url(f"blobs/sha256:{e.bundle_sha256}")

        def get(headers: dict[str, str]) -> requests.Response:
            resp = self.reg.request("GET", blob, action="download the bundle", ok=(200, 206, 416), stream=True,
                                    headers=headers)
            if resp.status_code == 404:
                resp.close()
                raise FetchError(f"{self.url}: the registry lost the bundle of {key[:16]}", "push it again")
            return resp

        bundle = download.pull(dest_root, f"{key}.tar.gz", lambda offset: download.http_open(get, offset),
                               e.bundle_sha256, url=self.url, key=key, size=e.size or None)
        return side_files(dest_root, e, bundle)

    def push(self, key: str, bundle: Path, sha256: str, signature: bytes | None) -> bool:
        check_key(key)
        if self.reg.get_manifest(key) is not None:
            return False
        manifest = bundle_manifest(bundle)
        mdigest = hashlib.sha256(manifest).hexdigest()
        self.reg.put_blob(mdigest, lambda: _Bytes(manifest), len(manifest))
        size = bundle.stat().st_size
        self.reg.put_blob(sha256, lambda: open(bundle, "rb"), size)
        if signature is not None:
            self._push_signature(key, signature)
        info = Entry(self.url, key, manifest, sha256, size, None).info()
        annotations = {"dev.rocmbuild.key": key, "dev.rocmbuild.recipe": str(info["recipe"]),
                       "dev.rocmbuild.version": str(info["version"]),
                       "dev.rocmbuild.gpu-targets": ",".join(info["gpu_targets"] or [])}
        self.reg.put_manifest(key, {"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": ARTIFACT_TYPE,
                                    "config": _descriptor(CONFIG_TYPE, mdigest, len(manifest)),
                                    "layers": [_descriptor(BUNDLE_TYPE, sha256, size)], "annotations": annotations})
        return True

    def _push_signature(self, key: str, signature: bytes) -> None:
        empty, sdigest = hashlib.sha256(EMPTY).hexdigest(), hashlib.sha256(signature).hexdigest()
        self.reg.put_blob(empty, lambda: _Bytes(EMPTY), len(EMPTY))
        self.reg.put_blob(sdigest, lambda: _Bytes(signature), len(signature))
        self.reg.put_manifest(f"{key}.sig", {"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "artifactType": SIG_TYPE,
                                             "config": _descriptor(EMPTY_TYPE, empty, len(EMPTY)),
                                             "layers": [_descriptor(SIG_TYPE, sdigest, len(signature))]})

    def tags(self) -> list[str]:
        out: list[str] = []
        path: str | None = "tags/list?n=1000"
        while path:
            resp = self.reg.call("GET", path, action="list the tags", stream=True)
            if resp.status_code == 404:
                resp.close()
                return []
            try:
                doc = json.loads(self.reg.read(resp, "list the tags", MAX_SMALL))
            except (ValueError, RecursionError):
                doc = None
            tags = doc.get("tags") if isinstance(doc, dict) else None
            if not isinstance(doc, dict) or not isinstance(tags, (list, type(None))):
                doc = None
            if doc is None:
                raise FetchError(f"{self.url}: the registry's tag list is not the JSON object the distribution API "
                                 "answers", "check the cache URL (is it a registry?), or tell whoever runs it")
            out += [t for t in (tags or []) if isinstance(t, str)]
            nxt = resp.links.get("next", {}).get("url")
            path = urljoin(self.reg.url("tags/list"), nxt).removeprefix(self.reg.url("")) if nxt else None
        return out

    def list(self) -> list[Entry]:
        return [e for t in sorted(self.tags()) if _TAG.match(t) and (e := self.lookup(t)) is not None]
