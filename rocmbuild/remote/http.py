"""What the HTTP caches share: the session (rocmbuild.sources.net's, retrying GETs with backoff), a
retry loop for the requests urllib3 does not retry (uploads), credentials, TLS, and every failure
said in words (exit 3) with a hint that names what to do.

Decisions:
* plain ``http://`` (and ``oci://`` over HTTP) only to a loopback host (127.0.0.0/8, ::1,
  localhost) or a cache the config marks ``insecure = true``; anything else is HTTPS, verified
  against the system's CAs or the cache's ``ca_bundle``, which wins over ``REQUESTS_CA_BUNDLE``
  and ``CURL_CA_BUNDLE`` (:class:`PinnedSession`; the proxies still come from the environment);
* credentials come from the environment variables the cache's ``username_env``/``password_env``
  name (both set, or neither used), else from Docker's ``$DOCKER_CONFIG/config.json`` (default
  ``~/.docker/config.json``) ``auths`` entry for the host (``auth``: base64 ``user:password``;
  credential helpers are not run);
* an upload is retried as a whole (``ROCMBUILD_DOWNLOAD_RETRIES`` times, the same backoff) on a
  dropped connection or a 5xx; a 4xx is never retried.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import time
import zlib
from pathlib import Path
from typing import Callable, TypeVar
from urllib.parse import urlparse

import requests

from rocmbuild.sources import net
from rocmbuild.config import CacheConfig
from rocmbuild.errors import FetchError, InputError

T = TypeVar("T")
ACCEPT_ENCODING = "gzip, deflate"  # what read_capped inflates (bounded); never br or zstd
RETRY_HINT = "the cache or the network failed: run the command again later (requests are retried with backoff)"


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def origin(url: str) -> tuple[str, str, int | None]:
    """``url``'s origin as the web defines it: (scheme, host, port), the default port filled in."""
    u = urlparse(url)
    scheme = u.scheme.lower()
    try:
        port = u.port
    except ValueError:  # a port that is not a number: an origin nothing else has
        return scheme, (u.hostname or "").lower(), -1
    return scheme, (u.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def check_plain_http(cfg: CacheConfig, host: str) -> None:
    if not (is_loopback(host) or cfg.insecure):
        raise InputError(f"{cfg.url}: plain HTTP to {host}, which is not this machine",
                         "use https (or oci:// over HTTPS), or mark the cache `insecure = true` in its [[caches]] "
                         "entry if the network is yours")


class PinnedSession(requests.Session):
    """A session whose ``ca_bundle`` (a cache's pinned CA) is the one TLS is verified against,
    whatever ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` say: requests' ``merge_environment_settings``
    puts those in place of ``Session.verify``, so the pinned bundle is put back after it, for
    every request and every redirect it follows. ``trust_env`` stays on: the proxies
    (``HTTPS_PROXY``, ``NO_PROXY``) still come from the environment. Without a ``ca_bundle``,
    requests' own rule holds (the environment's bundle, else certifi's)."""

    ca_bundle: str | None = None

    def merge_environment_settings(self, url, proxies, stream, verify, cert):
        settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if self.ca_bundle:
            settings["verify"] = self.ca_bundle
        return settings


def pin(cfg: CacheConfig, s: PinnedSession) -> PinnedSession:
    """``s`` verifying TLS against ``cfg.ca_bundle`` (when set; it must be a readable file, else
    exit 2), asking for the encodings :func:`read_capped` inflates."""
    s.headers["Accept-Encoding"] = ACCEPT_ENCODING
    if cfg.ca_bundle:
        if not os.access(cfg.ca_bundle, os.R_OK) or not os.path.isfile(cfg.ca_bundle):
            raise InputError(f"{cfg.url}: its ca_bundle {cfg.ca_bundle} is not a readable file",
                             "point ca_bundle in its [[caches]] entry at the PEM file of the CA that signed the "
                             "cache's certificate")
        s.ca_bundle = s.verify = cfg.ca_bundle
    return s


def session(cfg: CacheConfig) -> requests.Session:
    """The retrying session of rocmbuild.sources.net, pinned to the cache's ``ca_bundle``."""
    return pin(cfg, net.session(PinnedSession))  # type: ignore[arg-type]


def docker_config() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def _docker_auth(host: str) -> tuple[str, str] | None:
    try:
        auths = json.loads(docker_config().read_text()).get("auths", {})
    except (OSError, ValueError, AttributeError):
        return None
    for name in (host, f"https://{host}", f"http://{host}", f"https://{host}/v2/", f"http://{host}/v2/"):
        entry = auths.get(name) if isinstance(auths, dict) else None
        if isinstance(entry, dict) and isinstance(entry.get("auth"), str):
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return None
            return user, password
    return None


def credentials(cfg: CacheConfig, host: str) -> tuple[str, str] | None:
    """(user, password) for ``host``: the config's env vars, else Docker's config, else None."""
    if cfg.username_env and cfg.password_env:
        user, password = os.environ.get(cfg.username_env), os.environ.get(cfg.password_env)
        if user and password:
            return user, password
    return _docker_auth(host)


def auth_error(cfg: CacheConfig, url: str, status: int, had_credentials: bool) -> FetchError:
    host = urlparse(url).netloc
    if cfg.username_env and cfg.password_env:
        how = f"set {cfg.username_env} and {cfg.password_env} (the variables its [[caches]] entry names)"
    else:
        how = (f"add username_env and password_env to the [[caches]] entry of {cfg.url} in the config and set "
               "those variables")
    said = "refused the credentials given" if had_credentials else "needs credentials"
    what = "denied access" if status == 403 else said
    return FetchError(f"{cfg.url}: the registry {what} (HTTP {status})",
                      f"{how}, or run `docker login {host}`", details={"url": url, "status": status})


def status_error(cfg: CacheConfig, url: str, resp: requests.Response, action: str) -> FetchError:
    code = resp.status_code
    again = f" after {net.retries() + 1} tries" if code >= 500 and net.retries() else ""
    return FetchError(f"{cfg.url}: cannot {action}: the server answered HTTP {code} {resp.reason or ''}".rstrip()
                      + again, RETRY_HINT if code >= 500 else "check the cache URL and what the server allows",
                      details={"url": url, "status": code})


def network_error(cfg: CacheConfig, url: str, exc: BaseException) -> FetchError:
    tries = net.retries() + 1
    return FetchError(f"{cfg.url}: cannot reach the cache: {net.why(exc)} (tried {tries} time{'s' if tries > 1 else ''})",
                      RETRY_HINT, details={"url": url, "tries": tries})


def read_capped(resp: requests.Response, cap: int, cfg: CacheConfig, action: str) -> bytes:
    """``resp``'s body (a gzip or deflate one inflated piece by piece with zlib's ``max_length``,
    never further than the cap: a bomb costs ``cap`` bytes), refused (exit 3) as soon as it passes
    ``cap`` bytes: a declared or a served length past the cap is never read whole."""
    try:
        declared = int(resp.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0
    encoding = resp.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
        resp.close()
        raise FetchError(f"{cfg.url}: cannot {action}: the answer is encoded as {encoding[:40]!r}, which rocmbuild "
                         "did not ask for", "tell whoever runs the cache", details={"url": resp.url})
    inflate = zlib.decompressobj(zlib.MAX_WBITS | 32) if encoding not in ("", "identity") else None
    buf = bytearray()
    try:
        if declared <= cap:
            for chunk in resp.raw.stream(64 << 10, decode_content=False):
                while chunk and len(buf) <= cap:  # inflated no further than the cap, piece by piece
                    buf += inflate.decompress(chunk, cap + 1 - len(buf)) if inflate else chunk
                    chunk = inflate.unconsumed_tail if inflate else b""
                if len(buf) > cap:
                    break
    except zlib.error as exc:
        raise FetchError(f"{cfg.url}: cannot {action}: the answer's {encoding} encoding is damaged ({exc})",
                         RETRY_HINT, details={"url": resp.url}) from None
    finally:
        resp.close()
    if declared > cap or len(buf) > cap:
        limit = (f"{cap >> 20} MiB" if cap >= 1 << 20 and not cap % (1 << 20) else
                 f"{cap >> 10} KiB" if cap >= 1 << 10 and not cap % (1 << 10) else f"{cap} bytes")
        raise FetchError(f"{cfg.url}: cannot {action}: the answer is larger than {limit} "
                         f"({max(declared, len(buf))} bytes or more), more than such a file can be",
                         "the cache serves something else than rocmbuild's files: check its URL, or tell "
                         "whoever runs it", details={"url": resp.url, "cap": cap})
    return bytes(buf)


class Retry(Exception):
    """Raised inside :func:`retrying`'s function: this attempt failed in a way worth another."""

    def __init__(self, error: FetchError) -> None:
        super().__init__(error.message)
        self.error = error


def retrying(fn: Callable[[], T]) -> T:
    """``fn()``, again after a backoff (0.5 s, 1 s, 2 s...) while it raises :class:`Retry`."""
    n = net.retries()
    for attempt in range(n + 1):
        try:
            return fn()
        except Retry as r:
            if attempt == n:
                raise r.error from None
            time.sleep(min(30.0, net.BACKOFF * (2 ** attempt)))
    raise AssertionError("unreachable")
