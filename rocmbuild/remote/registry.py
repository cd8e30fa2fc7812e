"""The OCI distribution API for one repository (``oci://HOST[:PORT]/REPO``), spoken with
``requests``: authentication (Basic, and Bearer tokens from the registry's token service), the
origin rules for credentials, retries, bounded reads, blobs and manifests. The cache's layout on
top of it is :mod:`.oci`'s.

Decisions: HTTP for a loopback host or an ``insecure`` cache, else HTTPS (``ca_bundle`` for a
private CA, whatever ``REQUESTS_CA_BUNDLE`` says: :class:`~.http.PinnedSession`); every request
goes to the registry's own origin (an upload ``Location`` elsewhere is refused, nothing sent) and
a token realm gets the credentials only on the registry's host or over https from an https
registry (docs/caches.md, "Where the credentials go"); every blob read is bounded and checked
against its digest; uploads are monolithic (POST then PUT), a blob the registry already has is
not sent again, and an upload is retried whole (:func:`~.http.retrying`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any
from urllib.parse import urljoin, urlparse

import requests

from rocmbuild.config import CacheConfig
from rocmbuild.errors import FetchError, InputError
from rocmbuild.remote import http
from rocmbuild.remote.http import Retry

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
TIMEOUT = (30, 300)
MAX_SMALL = 64 << 20  # a config blob (the artifact's manifest) or a signature blob
MAX_MANIFEST = 4 << 20  # an OCI manifest (the distribution registry's own limit)
MAX_TOKEN = 1 << 20  # a token service's answer
_TOKEN = re.compile(r"^[\x21-\x7e]{1,16384}$")  # what an HTTP header may carry


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
        self.session = http.pin(cfg, http.PinnedSession())  # ca_bundle wins over REQUESTS_CA_BUNDLE
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
        token: object = (doc.get("token") or doc.get("access_token")) if isinstance(doc, dict) else None
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
