"""The cache is immutable and separate from every target (real envs, real `cp`, the real CLI).

Targets receive their own inode of every artifact file (a reflink or a hashed copy, never a
hardlink), so the users' old manual `cp` over one env reaches neither the cache nor another env;
a cache file changed in place (same size, mtime put back) is refused at apply (exit 3) and
quarantined before the target is touched; a bundle never stands in for a recipe's build.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from rocmbuild.store import cache
from tests.support.cli import rb
from tests.support.snapshots import inodes, snapshot

LIB = "lib/libMIOpen.so.1.0"


def _sha(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def _json(r: subprocess.CompletedProcess) -> dict:
    return json.loads(r.stdout)


@pytest.fixture
def env350(target_env):
    def make(layout: str = "conda"):
        return target_env("3.5.0", layout=layout, compile_version="3.5.1")

    return make


@pytest.fixture
def own_home(txn_world, tmp_path, monkeypatch):
    """A private copy of the session's artifacts (so this test may tamper with it), sealed again by
    `cache verify` (the copy has new inodes and ctimes)."""
    home = tmp_path / "own-home"
    shutil.copytree(txn_world.home / "artifacts", home / "artifacts", symlinks=True)
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))
    assert rb("cache", "verify").returncode == 0
    return home


def _cache_ids(art_dir: Path) -> set[tuple[int, int]]:
    return {(p.lstat().st_dev, p.lstat().st_ino) for p in (art_dir / "tree").rglob("*") if p.is_file()}


@pytest.mark.parametrize("layout", ["conda", "wheel"])
def test_staging_never_shares_an_inode_with_the_cache(txn_home, env350, layout):
    env = env350(layout)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    art = txn_home.artifacts["mini"]
    placed = {(p.lstat().st_dev, p.lstat().st_ino) for p in Path(env.prefix).rglob("*") if p.is_file()}
    assert placed and not placed & _cache_ids(art.path)
    assert _json(r)["copy_bytes"] >= art.manifest.libraries[0].size  # the install phase is one copy
    # the cache's files are read-only and what identity.json recorded at publish
    rec = art.recorded()
    for f in art.manifest.files:
        if f.type == "file":
            st = art.file(f.path).lstat()
            assert st.st_mode & 0o222 == 0 and st.st_nlink == 1
            assert rec[f.path] == {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
                                   "inode": st.st_ino}


def test_cp_over_one_env_leaves_the_other_env_and_the_cache_unchanged(txn_home, env350):
    stock = env350("conda")  # never applied: the stock 3.5.0 library
    env1, env2 = env350("conda"), env350("conda")
    for env in (env1, env2):
        assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    cached = txn_home.artifacts["mini"].file(LIB)
    before = (_sha(cached), _sha(env2.prefix / LIB), os.stat(env2.prefix / LIB).st_ino)
    # the users' old manual step, with the real cp (in place: same inode, new bytes)
    subprocess.run(["cp", str(stock.prefix / LIB), str(env1.prefix / LIB)], check=True)
    assert _sha(env1.prefix / LIB) == _sha(stock.prefix / LIB) != before[0]
    assert (_sha(cached), _sha(env2.prefix / LIB), os.stat(env2.prefix / LIB).st_ino) == before
    assert txn_home.artifacts["mini"].bytes_problems() == []


def _tamper(path: Path) -> None:
    """Change one byte in place, keep the size, put the mtime back (ctime moves: it cannot be set)."""
    st = path.stat()
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(path, "r+b") as f:
        f.write(data)
    path.chmod(st.st_mode & 0o7777)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_tampered_cache_file_is_refused_at_apply_and_quarantined(txn_world, own_home, env350):
    key = txn_world.artifacts["mini"].key
    _tamper(own_home / "artifacts" / key / "tree" / LIB)
    env = env350("conda")
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    r = rb("apply", txn_world.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 3, r.stderr
    err = _json(r)["error"]
    assert err["type"] == "FetchError" and "quarantined" in err["message"] and LIB in err["details"]["problems"][0]
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
    assert not (Path(env.prefix) / ".rocmbuild").exists()  # refused before the lock, the journal, anything
    assert not (own_home / "artifacts" / key).exists()
    (q,) = (own_home / "artifacts" / ".quarantine").iterdir()
    assert q.name.startswith(key) and Path(err["details"]["quarantined"]) == q


def test_tampered_bytes_under_a_forged_identity_are_caught_by_cache_verify(txn_world, own_home, env350):
    """The identity sidecar rewritten to match the tampered file: a sealed identity that holds
    vouches for the bytes, so the target's copy is made kernel-side without reading them (a reflink
    or copy_file_range, by design: docs/transactions.md); `cache verify` hashes every file and
    quarantines the artifact (exit 3), so it is never served again."""
    key = txn_world.artifacts["mini"].key
    adir = own_home / "artifacts" / key
    _tamper(adir / "tree" / LIB)
    side = json.loads((adir / "identity.json").read_text())
    st = (adir / "tree" / LIB).stat()
    side["files"][LIB] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
                          "inode": st.st_ino}
    (adir / "identity.json").write_text(json.dumps(side))
    r = rb("cache", "verify", "--json")
    assert r.returncode == 3, r.stderr
    (e,) = [a for a in _json(r)["artifacts"] if a["status"] == "quarantined"]
    assert LIB in e["problems"][0] and not adir.exists()
    assert cache.lookup(key, own_home) is None  # never served again


def _claiming_bundle(tmp_path: Path, txn_world) -> Path:
    """mini-fix's artifact, its manifest rewritten to claim mini's recipe and key."""
    out = tmp_path / "fix.tar.gz"
    assert rb("export", txn_world.recipe("mini-fix"), "-o", out).returncode == 0
    mini = txn_world.artifacts["mini"].manifest
    evil = tmp_path / "claims-mini.tar.gz"
    with tarfile.open(out) as tin, tarfile.open(evil, "w:gz") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read() if m.isfile() else None
            if m.name.endswith("/manifest.json"):
                man = json.loads(data)
                man.update(key=mini.key, recipe=mini.recipe, inputs=mini.inputs)
                data = json.dumps(man).encode()
                m.size = len(data)
            tout.addfile(m, io.BytesIO(data) if data is not None else None)
    return evil


def test_a_bundle_claiming_a_recipe_builds_key_is_no_cache_hit(txn_world, tmp_path, monkeypatch, env350):
    evil = _claiming_bundle(tmp_path, txn_world)
    home = tmp_path / "machine-b"
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))
    key = txn_world.artifacts["mini"].key
    env = env350("conda")
    d = _json(rb("apply", "--artifact", evil, "--env", env.prefix, "--json"))  # usable as what it is
    assert d["ok"] and d["artifact"] == str(home / "artifacts" / "imported" / key)
    assert cache.lookup(key, home) is None and cache.lookup_imported(key, home) is not None
    prov = json.loads((home / "artifacts/imported" / key / "provenance.json").read_text())
    assert prov["source"] == str(evil) and prov["bundle_sha256"] == _sha(evil) and prov["sha256_checked"] is False
    # `build mini` does not take the bundle for mini's build: it builds, and builds mini's bytes
    r = rb("build", txn_world.recipe("mini"), "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    b = _json(r)
    assert b["cached"] is False and b["key"] == key and b["artifact"] == str(home / "artifacts" / key)
    assert _sha(Path(b["artifact"]) / "tree" / LIB) == _sha(txn_world.artifacts["mini"].file(LIB))
    assert _sha(Path(b["artifact"]) / "tree" / LIB) != _sha(home / "artifacts/imported" / key / "tree" / LIB)
    # export of the imported key is allowed (the key is built now too: the built one is exported)
    assert rb("export", key[:16], "-o", tmp_path / "again.tar.gz").returncode == 0


def test_cache_verify_quarantines_a_bad_imported_entry(txn_world, tmp_path, monkeypatch):
    home = tmp_path / "machine-c"
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))
    out = tmp_path / "mini.tar.gz"
    assert rb("export", txn_world.recipe("mini"), "-o", out, env={"ROCMBUILD_HOME": str(txn_world.home)}).returncode == 0
    from rocmbuild.store import bundle

    art = bundle.import_bundle(str(out), home=home)
    d = _json(rb("cache", "verify", "--json"))
    assert d["ok"] and [e["kind"] for e in d["artifacts"]] == ["imported"]
    assert d["artifacts"][0]["provenance"]["bundle_sha256"] == _sha(out)
    _tamper(art.file(LIB))
    r = rb("cache", "verify", "--json")
    assert r.returncode == 3
    (e,) = _json(r)["artifacts"]
    assert e["status"] == "quarantined" and LIB in e["problems"][0] and Path(e["quarantined_to"]).is_dir()
    assert not art.path.exists() and cache.lookup_imported(art.key, home) is None
    assert _json(rb("cache", "verify", "--json"))["checked"] == 0
