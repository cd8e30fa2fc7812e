"""A cache's ``ca_bundle`` is honoured whatever ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` say
(issue 26, class 7).

A real HTTPS server on 127.0.0.1 (tests/support/tls.py), its certificate signed by a private CA
made here; the environment points at another CA's bundle. Through the real CLI (a static
``https://`` cache holding an entry pushed with ``file://``) and through the OCI backend's
session (an ``oci://`` cache on a loopback host is spoken over plain HTTP, so its TLS is tested
on its session against the same server).
"""

from __future__ import annotations

import json

import pytest
import requests

from rocmbuild.config import CacheConfig
from rocmbuild.errors import InputError
from rocmbuild.remote.oci import Registry
from tests.support import tls
from tests.support.cli import rb


@pytest.fixture
def cas(tmp_path):
    """(the cache's private CA, another CA the environment names)."""
    return tls.make_ca(tmp_path / "pki", "lab-ca"), tls.make_ca(tmp_path / "pki", "elsewhere-ca")


def _config(url: str, ca_bundle, public: str | None = None) -> None:
    from rocmbuild import config

    path = config.user_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f'[[caches]]\nurl = "{url}"\nca_bundle = "{ca_bundle}"\n'
    if public:
        text += f'\n[trust]\npublic_keys = ["{public}"]\n'
    path.write_text(text)


def _env(other) -> dict[str, str]:
    return {"REQUESTS_CA_BUNDLE": str(other.pem), "CURL_CA_BUNDLE": str(other.pem), "ROCMBUILD_DOWNLOAD_RETRIES": "0"}


def test_the_pinned_ca_bundle_is_used_though_the_environment_names_another(txn_home, tmp_path, cas):
    lab, other = cas
    www = tmp_path / "www"
    secret = tmp_path / "lab-1.secret"
    public = json.loads(rb("key", "generate", "lab-1", "--out", str(secret), "--json").stdout)["public_key"]
    key = txn_home.artifacts["mini"].key
    pushed = rb("push", key[:16], "--to", f"file://{www}", "--sign-key", str(secret), "--json")
    assert pushed.returncode == 0, pushed.stderr
    server = tls.serve(www, lab, tmp_path / "pki")
    try:
        _config(server.url, lab.pem, public)
        r = rb("cache", "list", "--remote", server.url, "--json", env=_env(other))
        assert r.returncode == 0, (r.stdout, r.stderr)
        [row] = json.loads(r.stdout)["artifacts"]
        assert (row["key"], row["signer"], row["trusted"]) == (key, "lab-1", True)
    finally:
        server.stop()


def test_a_server_the_environment_trusts_but_the_pinned_ca_did_not_sign_is_refused(txn_home, tmp_path, cas):
    lab, other = cas
    server = tls.serve(tmp_path / "www", other, tmp_path / "pki")  # signed by the CA the environment names
    try:
        _config(server.url, lab.pem)
        r = rb("cache", "list", "--remote", server.url, "--json", env=_env(other))
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert "cannot reach the cache" in json.loads(r.stdout)["error"]["message"]
        assert "internal error" not in r.stderr
        # without the pin, the environment's bundle is what requests uses (its rule, kept)
        _config(server.url, "")
        plain = rb("cache", "list", "--remote", server.url, "--json", env=_env(other))
        assert plain.returncode == 0, (plain.stdout, plain.stderr)
    finally:
        server.stop()


def test_the_oci_session_is_pinned_too(tmp_path, cas, monkeypatch):
    lab, other = cas
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(other.pem))
    monkeypatch.setenv("CURL_CA_BUNDLE", str(other.pem))
    good, bad = tls.serve(tmp_path / "www", lab, tmp_path / "pki"), tls.serve(tmp_path / "www", other, tmp_path / "pki")
    try:
        reg = Registry(CacheConfig("oci://registry.lab:5000/rocmbuild", ca_bundle=str(lab.pem)))
        assert reg.session.get(good.url, timeout=10).status_code == 200
        with pytest.raises(requests.exceptions.SSLError):
            reg.session.get(bad.url, timeout=10)
        # a redirect (a directory without its slash) is followed and verified against the pinned bundle
        (tmp_path / "www" / "sub").mkdir()
        followed = reg.session.get(good.url + "sub", timeout=10)
        assert followed.ok and followed.history and followed.history[0].status_code == 301
    finally:
        good.stop()
        bad.stop()


def test_a_ca_bundle_that_is_not_a_file_is_exit_2(tmp_path):
    with pytest.raises(InputError, match="not a readable file") as e:
        Registry(CacheConfig("oci://registry.lab:5000/rocmbuild", ca_bundle=str(tmp_path / "missing.pem")))
    assert e.value.exit_code == 2
