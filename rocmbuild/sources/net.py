"""HTTP downloads: one ``requests`` session that retries with backoff, and network failures said
in words (never urllib3's text).

Decisions:
* Retries are urllib3's ``Retry`` mounted through requests' ``HTTPAdapter``: connection errors,
  read timeouts and the answers 429, 500, 502, 503 and 504 are tried again, ``RETRIES`` times
  (3; ``$ROCMBUILD_DOWNLOAD_RETRIES`` overrides, 0 turns retrying off) with an exponential
  backoff (0 s, 1 s, 2 s, ...: ``BACKOFF`` 0.5, at most 30 s a wait). A ``Retry-After`` header is
  honoured up to 60 s: a server asking for an hour does not hang a provisioning run.
* Only GET is sent, so every retry is safe. A body that breaks off mid-stream is not resumed:
  the download fails (exit 3) and the next run fetches it again.
* Every failure is a :class:`~rocmbuild.errors.FetchError` (exit 3: the network or the server,
  "retry later") whose message says what happened in words (refused, no such host, timed out,
  "answered HTTP 503 after 4 tries"), with the hint the caller gives for its verb; the raw
  exception stays in ``__cause__`` for ``--debug``. A 404 is a FetchError too, unless the caller
  asks for ``None`` instead (:func:`get_text` with ``missing_ok``: a ``.sha256`` nobody published).
"""

from __future__ import annotations

import os
import socket
from typing import Iterator

import requests
from requests.adapters import HTTPAdapter
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

from rocmbuild.errors import FetchError

RETRIES = 3
BACKOFF = 0.5
RETRY_STATUS = (429, 500, 502, 503, 504)
TIMEOUT = (30, 300)  # connect, read (seconds)
MAX_RETRY_AFTER = 60.0


class _Retry(Retry):
    """urllib3's Retry with the server's ``Retry-After`` capped (see the module notes)."""

    def get_retry_after(self, response: BaseHTTPResponse) -> float | None:
        after = super().get_retry_after(response)
        return None if after is None else min(after, MAX_RETRY_AFTER)


def retries() -> int:
    try:
        return max(0, int(os.environ.get("ROCMBUILD_DOWNLOAD_RETRIES", RETRIES)))
    except ValueError:
        return RETRIES


def session(cls: type[requests.Session] = requests.Session) -> requests.Session:
    """A session (of ``cls``) whose http and https adapters retry as the module notes say."""
    n = retries()
    policy = _Retry(total=n, connect=n, read=n, status=n, other=0, backoff_factor=BACKOFF, backoff_max=30,
                    status_forcelist=RETRY_STATUS, allowed_methods=frozenset({"GET"}), raise_on_status=False)
    s = cls()
    adapter = HTTPAdapter(max_retries=policy)
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    return s


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it carries (causes, contexts, urllib3's ``reason``, args)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [x for x in (e.__cause__, e.__context__, getattr(e, "reason", None), *e.args)
                 if isinstance(x, BaseException)]


def why(exc: BaseException) -> str:
    """What went wrong, in words (no library's repr)."""
    found = list(_chain(exc))
    if any(isinstance(e, socket.gaierror) for e in found):
        return "the host name could not be resolved"
    if any(isinstance(e, ConnectionRefusedError) for e in found):
        return "the connection was refused (nothing listens there)"
    if any(isinstance(e, (TimeoutError, socket.timeout, requests.Timeout)) for e in found):
        return "the server did not answer in time"
    if any(isinstance(e, requests.exceptions.SSLError) for e in found):
        return "the TLS handshake failed (certificate or proxy)"
    if any(isinstance(e, ConnectionResetError) for e in found):
        return "the connection was reset"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "the download broke off"
    return "the connection failed"


def network_error(url: str, exc: BaseException, hint: str) -> FetchError:
    tries = retries() + 1
    return FetchError(f"cannot download {url}: {why(exc)} (tried {tries} time{'s' if tries > 1 else ''})",
                      hint, details={"url": url, "tries": tries})


def status_error(url: str, resp: requests.Response, hint: str) -> FetchError:
    code = resp.status_code
    again = f" after {retries() + 1} tries" if code in RETRY_STATUS and retries() else ""
    reason = f" {resp.reason}" if resp.reason else ""
    return FetchError(f"cannot download {url}: the server answered HTTP {code}{reason}{again}",
                      hint if code in RETRY_STATUS else "check the URL (source.archive, --source or --artifact)",
                      details={"url": url, "status": code})


def open_stream(s: requests.Session, url: str, hint: str) -> requests.Response:
    """A streamed 200 answer for ``url`` (the caller closes it), or a FetchError."""
    try:
        resp = s.get(url, stream=True, timeout=TIMEOUT)
    except requests.RequestException as exc:
        raise network_error(url, exc, hint) from exc
    if not resp.ok:
        resp.close()
        raise status_error(url, resp, hint)
    return resp


def get_text(url: str, hint: str, *, missing_ok: bool = False, timeout=(30, 60)) -> str | None:
    """The body of ``url`` as text; ``None`` for a 404/410 when ``missing_ok``."""
    with session() as s:
        try:
            resp = s.get(url, timeout=timeout)
        except requests.RequestException as exc:
            raise network_error(url, exc, hint) from exc
        if missing_ok and resp.status_code in (404, 410):
            return None
        if not resp.ok:
            raise status_error(url, resp, hint)
        return resp.text
