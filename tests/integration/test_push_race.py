"""Two pushes of one key at once, signed by two keys: one entry wins whole, the loser is told, and
a stuck entry is fixed with ``push --force`` (issue 26, class 5).

Against the real registry (docker-registry on 127.0.0.1, tests/support/registry.py) and a
``file://`` directory: two real ``rocmbuild push`` processes started together, several trials each.
The entry left is checked the way a fleet machine checks it (rocmbuild.remote.trust), once with
both keys trusted (it names the winner) and once with the loser's key only (refused: the winner
signed it); an OCI entry's ``.sig`` tag (what older releases read) carries the winner's signature
too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests

from rocmbuild.config import CacheConfig
from rocmbuild.remote import open_cache, trust
from tests.support.cli import REPO, kill_group, rb

TRIALS = 3


@pytest.fixture
def keys(tmp_path):
    """name -> (secret key file, public key text), for lab-1 and lab-2."""
    out = {}
    (tmp_path / "keys").mkdir()
    for name in ("lab-1", "lab-2"):
        f = tmp_path / "keys" / f"{name}.secret"
        out[name] = f, json.loads(rb("key", "generate", name, "--out", str(f), "--json").stdout)["public_key"]
    return out


def _url(backend: str, oci_registry, tmp_path, trial: int) -> str:
    return oci_registry.url(f"race/t{trial}") if backend == "oci" else f"file://{tmp_path / f'cache-{trial}'}"


def _both(key: str, url: str, keys) -> dict[str, dict]:
    """Two pushes of ``key`` started together, one signed by each key: name -> its JSON."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = {name: subprocess.Popen([sys.executable, "-m", "rocmbuild", "push", key, "--to", url, "--sign-key",
                                     str(secret), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=env, cwd=REPO, start_new_session=True)
             for name, (secret, _) in keys.items()}
    out = {}
    try:
        for name, p in procs.items():
            stdout, stderr = p.communicate(timeout=180)
            assert p.returncode == 0, (name, stdout, stderr)
            out[name] = {**json.loads(stdout), "stderr": stderr}
    finally:
        for p in procs.values():
            kill_group(p)
    return out


def _legacy_sig(oci_registry, repo: str, key: str) -> bytes:
    """The signature under the ``<key>.sig`` tag, as a release before the embedded one reads it."""
    base = f"http://{oci_registry.host}/v2/{repo}"
    doc = requests.get(f"{base}/manifests/{key}.sig", timeout=10,
                       headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
    return requests.get(f"{base}/blobs/{doc['layers'][0]['digest']}", timeout=10).content


@pytest.mark.parametrize("backend", ["oci", "file"])
def test_two_pushes_signed_by_two_keys_leave_one_whole_entry_and_the_loser_is_told(
        txn_home, oci_registry, keys, tmp_path, backend):
    key = txn_home.artifacts["mini"].key
    both = trust.trusted_keys([keys["lab-1"][1], keys["lab-2"][1]])
    for trial in range(TRIALS):
        url = _url(backend, oci_registry, tmp_path, trial)
        res = _both(key, url, keys)
        winners = [n for n, r in res.items() if r["uploaded"]]
        assert len(winners) == 1, (trial, res)
        [winner], [loser] = winners, [n for n in res if n not in winners]
        assert res[winner]["signer"] == winner and res[loser]["held_by"] == winner, (trial, res)
        assert f"signed by {winner}" in res[loser]["stderr"] and "nothing uploaded" in res[loser]["stderr"]
        e = open_cache(CacheConfig(url)).lookup(key)
        assert trust.check(url, key, e.manifest, e.bundle_sha256, e.signature, both) == winner
        with pytest.raises(trust.UntrustedError, match=f"signed by '{winner}', which is not a trusted key"):
            trust.check(url, key, e.manifest, e.bundle_sha256, e.signature, trust.trusted_keys([keys[loser][1]]))
        assert e.bundle_sha256 == res[winner]["bundle_sha256"]
        if backend == "oci":
            assert _legacy_sig(oci_registry, f"race/t{trial}", key) == e.signature
        else:
            assert (tmp_path / f"cache-{trial}" / f"{key}.sig").read_bytes() == e.signature


def _stick(backend: str, url: str, key: str, oci_registry, secret_1) -> None:
    """Make the entry lab-2 pushed stuck: lab-1's signature beside it, over another bundle."""
    forged = trust.sign(trust.SecretKey.read(secret_1), key, b"another manifest", "0" * 64)
    if backend == "file":
        with open(url.removeprefix("file://") + f"/{key}.sig", "wb") as f:
            f.write(forged)
        return
    cache = open_cache(CacheConfig(url))
    doc = cache.reg.get_manifest(key)
    del doc["annotations"]["dev.rocmbuild.signature"]  # a manifest as an older release pushed it
    cache.reg.put_manifest(key, doc)
    cache._push_signature(key, forged)  # noqa: SLF001 - the .sig tag an older release read


@pytest.mark.parametrize("backend", ["oci", "file"])
def test_a_stuck_entry_is_named_and_replaced_by_push_force(txn_home, oci_registry, keys, tmp_path, backend):
    key = txn_home.artifacts["mini"].key
    url = _url(backend, oci_registry, tmp_path, 0)
    secret_1, public_1 = keys["lab-1"]
    first = rb("push", key[:16], "--to", url, "--sign-key", str(keys["lab-2"][0]), "--json")
    assert first.returncode == 0 and json.loads(first.stdout)["uploaded"], first.stderr
    _stick(backend, url, key, oci_registry, secret_1)
    fleet = trust.trusted_keys([public_1])
    e = open_cache(CacheConfig(url)).lookup(key)
    with pytest.raises(trust.UntrustedError, match="does not cover"):
        trust.check(url, key, e.manifest, e.bundle_sha256, e.signature, fleet)

    again = rb("push", key[:16], "--to", url, "--sign-key", str(secret_1), "--json")
    d = json.loads(again.stdout)
    assert again.returncode == 0 and d["uploaded"] is False and d["held_by"] == "lab-1", again.stderr
    assert "push --force" in again.stderr  # its signature is not good: the way out is named

    forced = rb("push", key[:16], "--to", url, "--sign-key", str(secret_1), "--force", "--json")
    f = json.loads(forced.stdout)
    assert forced.returncode == 0 and f["uploaded"] is True and f["signer"] == "lab-1", forced.stderr
    e = open_cache(CacheConfig(url)).lookup(key)
    assert trust.check(url, key, e.manifest, e.bundle_sha256, e.signature, fleet) == "lab-1"
    if backend == "oci":
        assert _legacy_sig(oci_registry, "race/t0", key) == e.signature
    # and now a plain push of the same builder says it is there, with nothing to fix
    done = rb("push", key[:16], "--to", url, "--sign-key", str(secret_1), "--json")
    assert json.loads(done.stdout)["held_by"] == "lab-1" and "--force" not in done.stderr


def test_a_push_lock_held_for_ever_ends_the_push_with_exit_5(tmp_path, mocker):
    """A process that holds a key's push lock and never lets go (a hung push, or anyone who can
    open the shared file) no longer makes a push wait for ever: after PUSH_LOCK_WAIT it is a
    LockedError (exit 5) naming the lock, and nothing was pushed."""
    import subprocess
    import time

    from rocmbuild.errors import LockedError
    from rocmbuild.remote import static

    key = "ab" * 32
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    lock = cache_dir / f".{key}.push-lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
                               "fcntl.lockf(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n",
                               str(lock)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        mocker.patch.object(static, "PUSH_LOCK_WAIT", 1.0)
        cache = open_cache(CacheConfig(f"file://{cache_dir}"))
        start = time.monotonic()
        with pytest.raises(LockedError) as err, cache._root() as root, cache._push_lock(root, key):
            pytest.fail("the lock was taken while another process held it")
        assert time.monotonic() - start < 10 and err.value.exit_code == 5
        assert ".push-lock" in err.value.message and "nothing was pushed" in err.value.message
        assert sorted(p.name for p in cache_dir.iterdir()) == [lock.name]
    finally:
        kill_group(holder)
