"""A registry's credentials go only to the origin they were configured for (issue 26, class 2).

Against the real docker-registry behind htpasswd (the ``oci_registry_auth`` fixture) seen through
a recording proxy that rewrites the upload ``Location`` to another origin (``localhost`` on
another port, itself a recording forwarder to the same registry); and a fake registry on
127.0.0.1 whose Bearer challenge names a token service on another host, another scheme or no
scheme at all. The recorders (tests/support/recorder.py) prove what reached the other origin:
nothing.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
import requests

from tests.support import recorder, registry
from tests.support.cli import rb

CREDS = {"LAB_REG_USER": registry.USER, "LAB_REG_TOKEN": registry.PASSWORD}


def _config(url: str, public: str | None = None) -> None:
    from rocmbuild import config

    path = config.user_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f'[[caches]]\nurl = "{url}"\nusername_env = "LAB_REG_USER"\npassword_env = "LAB_REG_TOKEN"\n'
    if public:
        text += f'\n[trust]\npublic_keys = ["{public}"]\n'
    path.write_text(text)


@pytest.fixture
def secret(tmp_path):
    out = tmp_path / "keys" / "lab-1.secret"
    out.parent.mkdir()
    return out, json.loads(rb("key", "generate", "lab-1", "--out", str(out), "--json").stdout)["public_key"]


def test_an_upload_location_on_another_origin_is_refused_and_gets_nothing(txn_home, oci_registry_auth, secret):
    upstream = f"http://{oci_registry_auth.host}"
    other = recorder.start(upstream=upstream, name="localhost")  # another origin, the same registry behind it

    def elsewhere(location: str) -> str:
        u = urlsplit(location)
        return f"{other.url}{u.path}?{u.query}"

    front = recorder.start(upstream=upstream, relocate=elsewhere)
    try:
        url = f"oci://{front.host}/rocmbuild/cache"
        _config(url, secret[1])
        key = txn_home.artifacts["mini"].key
        r = rb("push", key[:16], "--to", url, "--sign-key", str(secret[0]), "--json", env=CREDS)
        d = json.loads(r.stdout)
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert "another origin" in d["error"]["message"] and other.host in d["error"]["message"]
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr
        assert other.sent() == []  # not one request, so no credentials either
        assert any(s.authorization and s.authorization.startswith("Basic ") for s in front.sent())
        tags = requests.get(f"{upstream}/v2/rocmbuild/cache/tags/list", auth=(registry.USER, registry.PASSWORD),
                            timeout=10)
        assert tags.status_code == 404 or key not in (tags.json().get("tags") or [])  # nothing tagged
    finally:
        front.stop()
        other.stop()


def _fake_registry(realm: str):
    def answer(method: str, path: str, headers: dict):
        if headers.get("Authorization") == "Bearer good-token":
            return 200, {"Content-Type": "application/json"}, b'{"name": "rocmbuild/cache", "tags": []}'
        return 401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="fake"'}, b"{}"

    return answer


def _token(method: str, path: str, headers: dict):
    return 200, {"Content-Type": "application/json"}, b'{"token": "good-token"}'


@pytest.mark.parametrize("realm,said", [
    ("http://localhost:{port}/token", "plain HTTP to another host"),
    ("https://localhost:{port}/token", "another host, named over plain HTTP"),
    ("ftp://127.0.0.1:{port}/token", "not an http(s) URL"),
    ("127.0.0.1:{port}/token", "not an http(s) URL"),
])
def test_a_token_realm_on_another_host_or_scheme_gets_no_credentials(realm, said):
    tokens = recorder.start(answer=_token, name="localhost")
    port = tokens.server.server_address[1]
    fake = recorder.start(answer=_fake_registry(realm.format(port=port)))
    try:
        url = f"oci://{fake.host}/rocmbuild/cache"
        _config(url)
        r = rb("cache", "list", "--remote", url, "--json", env=CREDS)
        d = json.loads(r.stdout)
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert said in d["error"]["message"] and "internal error" not in r.stderr
        assert tokens.sent() == []
        assert all(s.authorization is None for s in fake.sent())
    finally:
        fake.stop()
        tokens.stop()


def test_a_token_service_on_the_registrys_own_host_gets_them_and_works():
    tokens = recorder.start(answer=_token)  # 127.0.0.1, another port: a token service beside the registry
    fake = recorder.start(answer=_fake_registry(f"{tokens.url}/token"))
    try:
        url = f"oci://{fake.host}/rocmbuild/cache"
        _config(url)
        r = rb("cache", "list", "--remote", url, "--json", env=CREDS)
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert json.loads(r.stdout)["artifacts"] == []
        [asked] = tokens.sent()
        assert asked.authorization and asked.authorization.startswith("Basic ")
        assert fake.sent()[-1].authorization == "Bearer good-token"
    finally:
        fake.stop()
        tokens.stop()


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"token": "a\\r\\nX-Evil: 1"}', b"[" * 4000])
def test_a_token_service_answering_nonsense_is_one_clear_line(body):
    tokens = recorder.start(answer=lambda m, p, h: (200, {"Content-Type": "application/json"}, body))
    fake = recorder.start(answer=_fake_registry(f"{tokens.url}/token"))
    try:
        url = f"oci://{fake.host}/rocmbuild/cache"
        _config(url)
        r = rb("cache", "list", "--remote", url, "--json", env=CREDS)
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert "without a usable token" in json.loads(r.stdout)["error"]["message"]
    finally:
        fake.stop()
        tokens.stop()


def test_a_token_service_that_refuses_the_connection_is_one_line(monkeypatch):
    closed = registry.free_port()  # nothing listens there
    fake = recorder.start(answer=_fake_registry(f"http://127.0.0.1:{closed}/token"))
    try:
        url = f"oci://{fake.host}/rocmbuild/cache"
        _config(url)
        r = rb("cache", "list", "--remote", url, "--json", env={**CREDS, "ROCMBUILD_DOWNLOAD_RETRIES": "0"})
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert "cannot reach" in json.loads(r.stdout)["error"]["message"] and "internal error" not in r.stderr
    finally:
        fake.stop()


def test_an_upload_started_without_a_location_is_one_line(txn_home, secret):
    def answer(method: str, path: str, headers: dict):
        if method == "POST" and path.endswith("/blobs/uploads/"):
            return 202, {}, b""
        return 404, {}, b'{"errors": []}'

    fake = recorder.start(answer=answer)
    try:
        url = f"oci://{fake.host}/rocmbuild/cache"
        key = txn_home.artifacts["mini"].key
        r = rb("push", key[:16], "--to", url, "--sign-key", str(secret[0]), "--json")
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert "no Location header" in json.loads(r.stdout)["error"]["message"] and "internal error" not in r.stderr
    finally:
        fake.stop()
