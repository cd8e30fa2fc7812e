"""Binary caches against real servers: a real OCI registry (docker-registry, with and without
htpasswd auth), a ``file://`` directory and a static web server on 127.0.0.1.

Pushes run the real CLI (``rocmbuild push KEY``) on an artifact of the session's ``txn_world``;
lookups and fetches go through rocmbuild.remote into a Root; the fetched bundle is imported
with rocmbuild.store.bundle to prove the round trip. Keys and trust: Ed25519 keys, a signature
by a key not trusted here, a signature that does not cover a changed manifest, a blob corrupted
in the registry's storage dir.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from rocmbuild.store import bundle
from rocmbuild.config import CacheConfig
from rocmbuild.errors import FetchError
from rocmbuild.remote import open_cache, trust
from rocmbuild.fs.root import Root
from tests.support import registry
from tests.support.cli import REPO, rb


@pytest.fixture
def keys(tmp_path):
    """(secret key file, public key text) of lab-1, made by the CLI."""
    out = tmp_path / "keys" / "lab-1.secret"
    out.parent.mkdir()
    d = json.loads(rb("key", "generate", "lab-1", "--out", str(out), "--json").stdout)
    return out, d["public_key"]


def _trust(public: str) -> None:
    from rocmbuild import config

    path = config.user_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[trust]\npublic_keys = ["{public}"]\n')


def _push(key: str, url: str, secret, env=None) -> dict:
    r = rb("push", key[:16], "--to", url, "--sign-key", str(secret), "--json", env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _round_trip(url: str, art, secret, public, tmp_path, *, push_url: str | None = None) -> None:
    _trust(public)
    first = _push(art.key, push_url or url, secret)
    assert first["uploaded"] is True and first["signer"] == "lab-1" and first["key"] == art.key
    again = _push(art.key, push_url or url, secret)
    assert again["uploaded"] is False and again["bundle_sha256"] is None  # nothing exported, nothing sent

    listed = json.loads(rb("cache", "list", "--remote", url, "--json").stdout)
    [row] = listed["artifacts"]
    assert (row["key"], row["recipe"], row["signer"], row["trusted"]) == (art.key, "mini", "lab-1", True)
    assert row["bundle_sha256"] == first["bundle_sha256"]

    cache = open_cache(CacheConfig(url))
    assert cache.lookup("0" * 64) is None  # a miss is not an error
    entry = cache.lookup(art.key)
    assert trust.check(url, art.key, entry.manifest, entry.bundle_sha256, entry.signature,
                       trust.trusted_keys([public])) == "lab-1"
    with Root.open(tmp_path / "pulled", "pulled", create=True) as dest:
        got = cache.fetch(art.key, dest)
    imported = bundle.import_bundle(got.bundle, home=tmp_path / "other-machine", sha256=entry.bundle_sha256)
    assert imported.key == art.key and imported.manifest == art.manifest


def test_oci_round_trip(txn_home, oci_registry, keys, tmp_path):
    _round_trip(oci_registry.url(), txn_home.artifacts["mini"], *keys, tmp_path)
    import requests

    tags = requests.get(f"http://{oci_registry.host}/v2/rocmbuild/cache/tags/list", timeout=10).json()["tags"]
    key = txn_home.artifacts["mini"].key
    assert sorted(tags) == [key, f"{key}.sig"]


def test_file_round_trip(txn_home, keys, tmp_path):
    _round_trip(f"file://{tmp_path / 'cache'}", txn_home.artifacts["mini"], *keys, tmp_path)


def test_static_web_server_round_trip_over_loopback_http(txn_home, static_http, keys, tmp_path):
    _round_trip(static_http.url, txn_home.artifacts["mini"], *keys, tmp_path, push_url=f"file://{static_http.root}")


def test_key_generate_writes_0600_never_overwrites_and_prints_name_base64(tmp_path, keys):
    secret, public = keys
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert trust.PublicKey.parse(public).name == "lab-1" and trust.SecretKey.read(secret).public().text() == public
    before = secret.read_bytes()
    r = rb("key", "generate", "lab-2", "--out", str(secret))
    assert r.returncode == 2 and "never overwritten" in r.stderr and secret.read_bytes() == before


def test_without_credentials_a_401_names_the_env_vars_to_set(txn_home, oci_registry_auth, keys, tmp_path):
    url = oci_registry_auth.url()
    from rocmbuild import config

    config.user_file().parent.mkdir(parents=True, exist_ok=True)
    config.user_file().write_text(f'[[caches]]\nurl = "{url}"\nusername_env = "LAB_REG_USER"\n'
                                  'password_env = "LAB_REG_TOKEN"\n')
    r = rb("cache", "list", "--remote", url, "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 3 and "HTTP 401" in d["error"]["message"]
    assert "LAB_REG_USER" in d["error"]["hint"] and "LAB_REG_TOKEN" in d["error"]["hint"]
    creds = {"LAB_REG_USER": registry.USER, "LAB_REG_TOKEN": registry.PASSWORD}
    assert _push(txn_home.artifacts["mini"].key, url, keys[0], env=creds)["uploaded"] is True
    wrong = rb("cache", "list", "--remote", url, "--json", env={**creds, "LAB_REG_TOKEN": "nope"})
    assert wrong.returncode == 3 and "refused the credentials" in json.loads(wrong.stdout)["error"]["message"]
    # Docker's config.json is honoured too
    docker = tmp_path / "docker-config"
    docker.mkdir(exist_ok=True)
    import base64

    auth = base64.b64encode(f"{registry.USER}:{registry.PASSWORD}".encode()).decode()
    (docker / "config.json").write_text(json.dumps({"auths": {oci_registry_auth.host: {"auth": auth}}}))
    ok = rb("cache", "list", "--remote", url, "--json")
    assert ok.returncode == 0 and len(json.loads(ok.stdout)["artifacts"]) == 1


def test_a_corrupted_blob_in_the_registry_is_caught_by_its_digest(txn_home, oci_registry, keys, tmp_path):
    art = txn_home.artifacts["mini"]
    sha = _push(art.key, oci_registry.url(), keys[0])["bundle_sha256"]
    blob = oci_registry.blob(sha)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    blob.write_bytes(bytes(data))
    cache = open_cache(CacheConfig(oci_registry.url()))
    with Root.open(tmp_path / "pulled", "pulled", create=True) as dest:
        with pytest.raises(FetchError, match="does not match its digest") as e:
            cache.fetch(art.key, dest)
    assert e.value.exit_code == 3 and os.listdir(tmp_path / "pulled") == []  # nothing half-written


def test_a_signature_by_an_untrusted_key_or_over_another_manifest_is_refused(txn_home, keys, tmp_path):
    art = txn_home.artifacts["mini"]
    url = f"file://{tmp_path / 'cache'}"
    _push(art.key, url, keys[0])
    other = trust.SecretKey.generate("intruder")
    entry = open_cache(CacheConfig(url)).lookup(art.key)
    trusted = trust.trusted_keys([other.public().text()])
    with pytest.raises(trust.UntrustedError, match="signed by 'lab-1', which is not a trusted key"):
        trust.check(url, art.key, entry.manifest, entry.bundle_sha256, entry.signature, trusted)
    assert trust.check(url, art.key, entry.manifest, entry.bundle_sha256, entry.signature, trusted,
                       allow_unsigned=True) is None
    mine = trust.trusted_keys([keys[1]])
    with pytest.raises(trust.UntrustedError, match="does not cover"):
        trust.check(url, art.key, entry.manifest + b" ", entry.bundle_sha256, entry.signature, mine)
    with pytest.raises(trust.UntrustedError, match="is not signed"):
        trust.check(url, art.key, entry.manifest, entry.bundle_sha256, None, mine)
    # an impostor key under the trusted name: its signature does not verify
    impostor = trust.SecretKey("lab-1", trust.SecretKey.generate("x").seed)
    forged = trust.sign(impostor, art.key, entry.manifest, entry.bundle_sha256)
    with pytest.raises(trust.UntrustedError, match="with another key than the one trusted here") as e:
        trust.check(url, art.key, entry.manifest, entry.bundle_sha256, forged, mine)
    assert "[trust] public_keys" in e.value.hint and "does not cover" not in e.value.message  # not "tampered"
    _trust(other.public().text())
    row = json.loads(rb("cache", "list", "--remote", url, "--json").stdout)["artifacts"][0]
    assert row["signer"] == "lab-1" and row["trusted"] is False


def test_push_of_a_recipe_not_built_here_exits_2_with_a_hint(tmp_path, keys, monorepo):
    from tests.support.recipes import write_fixture_recipe

    recipe = write_fixture_recipe(tmp_path / "recipes", "unbuilt", url=monorepo.url, ref="rocm-7.1.0")
    r = rb("push", str(recipe), "--to", f"file://{tmp_path / 'c'}", "--sign-key", str(keys[0]), "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 2 and "not built" in d["error"]["message"] and "rocmbuild build" in d["error"]["hint"]
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("backend", ["oci", "file"])
def test_two_concurrent_pushes_of_one_key_both_succeed_with_one_copy(txn_home, oci_registry, keys, tmp_path, backend):
    art = txn_home.artifacts["mini"]
    url = oci_registry.url() if backend == "oci" else f"file://{tmp_path / 'cache'}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "rocmbuild", "push", art.key, "--to", url, "--sign-key", str(keys[0]), "--json"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    results = [json.loads(o) for o, _ in outs]
    assert {r["key"] for r in results} == {art.key} and any(r["uploaded"] for r in results)
    entries = open_cache(CacheConfig(url)).list()
    assert [e.key for e in entries] == [art.key]
    if backend == "file":
        assert sorted(p.name for p in (tmp_path / "cache").iterdir() if p.name.endswith(".tar.gz")) == [f"{art.key}.tar.gz"]
    else:
        layers = [b for b in oci_registry.blobs() if b.parent.name == entries[0].bundle_sha256]
        assert len(layers) == 1
