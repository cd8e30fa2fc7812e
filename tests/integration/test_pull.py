"""A bundle's download from a binary cache, against real servers: resumed after a connection cut
mid-blob (a proxy in front of a real docker-registry, and a static web server), one line and
nothing half-imported when it never completes, SIGTERM to a real ``rocmbuild build`` in the
middle of a trickled download (exit 143, no partial artifact, the lock released, no process
left, the next run resumes), and eight machines pulling one key from the real registry at once.

The servers are tests/support/flaky.py (a thread on 127.0.0.1, ended in teardown) and the
``oci_registry`` fixture (a real docker-registry process). Each "machine" is its own
ROCMBUILD_HOME; the recipe is pinned to a commit, so computing its key needs no network.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocmbuild.store import bundle
from rocmbuild.config import CacheConfig
from rocmbuild.errors import FetchError
from rocmbuild.remote import open_cache
from rocmbuild.fs.root import Root
from tests.support import flaky
from tests.support.cli import REPO, kill_group, rb
from tests.support.pushed import build_signed_mini


@pytest.fixture
def world(tmp_path, monorepo):
    """A pinned recipe built and pushed (signed) by a builder home into ``file://<tmp>/cache``;
    this test's config trusts the builder's key. Returns what the tests need."""
    recipe, secret, public, builder, built = build_signed_mini(tmp_path, monorepo)
    cache_dir = tmp_path / "cache"
    _trust(public)
    return {"recipe": recipe, "secret": secret, "public": public, "builder": builder, "built": built,
            "key": built["key"], "cache_dir": cache_dir}


def _trust(public: str, caches: tuple[str, ...] = ()) -> None:
    from rocmbuild import config

    path = config.user_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f'[[caches]]\nurl = "{u}"\n' for u in caches] + [f'[trust]\npublic_keys = ["{public}"]\n']
    path.write_text("\n".join(lines))


def _push(world, url: str) -> dict:
    r = rb("push", world["key"][:16], "--to", url, "--sign-key", str(world["secret"]), "--json", env=world["builder"])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _tree_hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _resumed(seen: list[flaky.Seen]) -> list[int]:
    """The offsets of the ``Range: bytes=N-`` requests among ``seen``."""
    return [int(s.range.removeprefix("bytes=").rstrip("-")) for s in seen if s.range]


@pytest.fixture
def served(world):
    """The pushed cache directory behind a flaky static web server (stopped in teardown)."""
    _push(world, f"file://{world['cache_dir']}")
    server = flaky.start(root=world["cache_dir"])
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("backend", ["oci", "http"])
def test_a_connection_cut_mid_blob_is_resumed_with_a_range_request(world, oci_registry, tmp_path, backend):
    if backend == "oci":
        sha = _push(world, oci_registry.url())["bundle_sha256"]
        server = flaky.start(upstream=f"http://{oci_registry.host}", faults=flaky.Faults(target=f"sha256:{sha}"))
        url = f"oci://{server.host}/rocmbuild/cache"
    else:
        sha = _push(world, f"file://{world['cache_dir']}")["bundle_sha256"]
        server = flaky.start(root=world["cache_dir"])
        url = server.url
    try:
        size = (world["cache_dir"] / f"{world['key']}.tar.gz").stat().st_size if backend == "http" else \
            oci_registry.blob(sha).stat().st_size
        server.faults.drop_after, server.faults.drops = size // 3, 1
        with Root.open(tmp_path / "pulled", "pulled", create=True) as dest:
            got = open_cache(CacheConfig(url)).fetch(world["key"], dest)
        gets = server.seen()
        assert [s.status for s in gets] == [200, 206], gets
        assert _resumed(gets) == [size // 3]  # the second asked only for what was missing
        assert server.sent() == size  # about one bundle pulled in all: exactly one here
        assert hashlib.sha256(Path(got.bundle).read_bytes()).hexdigest() == sha
        assert sorted(os.listdir(tmp_path / "pulled")) == sorted(
            f"{world['key']}{s}" for s in (".tar.gz", ".tar.gz.sha256", ".manifest.json", ".sig"))  # no .part left
        art = bundle.import_bundle(got.bundle, home=tmp_path / "machine", sha256=sha)
        assert art.key == world["key"]
        assert _tree_hashes(art.path / "tree") == _tree_hashes(Path(world["built"]["artifact"]) / "tree")
    finally:
        server.stop()


def test_a_download_that_never_completes_is_one_line_then_resumed_by_the_next_run(world, served, tmp_path, monkeypatch):
    key, size = world["key"], (world["cache_dir"] / f"{world['key']}.tar.gz").stat().st_size
    served.faults.drop_after, served.faults.drops = size // 4, 100  # every answer cut after size // 4 bytes
    monkeypatch.setenv("ROCMBUILD_DOWNLOAD_RETRIES", "1")
    with Root.open(tmp_path / "pulled", "pulled", create=True) as dest:
        with pytest.raises(FetchError, match="broke off after") as e:
            open_cache(CacheConfig(served.url)).fetch(key, dest)
    assert e.value.exit_code == 3 and "tried 2 times" in e.value.message and "resumes" in e.value.message
    [part] = os.listdir(tmp_path / "pulled")  # the bytes that arrived are kept, under a .part name only
    assert part.endswith(".part") and (tmp_path / "pulled" / part).stat().st_size == 2 * (size // 4)
    assert _resumed(served.seen()) == [size // 4]  # the retry resumed (and was cut again)

    # the CLI: --require-cache is exit 3 with one line, nothing under artifacts/ for the key
    home = tmp_path / "home-a"
    _trust(world["public"], (served.url,))
    r = rb("build", str(world["recipe"]), "--require-cache", "--json",
           env={"ROCMBUILD_HOME": str(home), "ROCMBUILD_DOWNLOAD_RETRIES": "1"})
    assert r.returncode == 3 and "broke off after" in json.loads(r.stdout)["error"]["message"], r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(lines) == 1 and "broke off after" in lines[0] and "not building (--require-cache)" in lines[0]
    assert not (home / "artifacts" / "imported").exists()
    assert not [p for p in (home / "artifacts").iterdir() if p.name.startswith(".tmp-")]
    kept = home / "downloads" / f"{key}.part"
    [part] = kept.iterdir()
    assert part.name == f".{key}.tar.gz.{_sha(world)[:16]}.part" and part.stat().st_size == 2 * (size // 4)

    # the server heals: the next run resumes from the kept bytes and substitutes
    served.faults.drops = 0
    before = served.sent()
    r = rb("build", str(world["recipe"]), "--require-cache", "--json", env={"ROCMBUILD_HOME": str(home)})
    res = json.loads(r.stdout)
    assert r.returncode == 0 and res["substituted"]["url"] == served.url, r.stderr
    assert served.sent() - before == size - 2 * (size // 4) and served.seen()[-1].range == f"bytes={2 * (size // 4)}-"
    events = [json.loads(ln) for ln in r.stderr.splitlines() if ln.startswith("{")]
    assert {"event": "phase", "phase": "download", "state": "done"}.items() <= \
        next(e for e in events if e.get("phase") == "download" and e.get("state") == "done").items()
    assert any(e["event"] == "progress" and e["phase"] == "download" and e["percent"] == 100.0 for e in events)
    assert not kept.exists()


def _sha(world) -> str:
    return (world["cache_dir"] / f"{world['key']}.tar.gz.sha256").read_text().split()[0]


def _wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_sigterm_mid_download_exits_143_leaves_no_artifact_and_the_next_run_resumes(world, served, tmp_path):
    key, size = world["key"], (world["cache_dir"] / f"{world['key']}.tar.gz").stat().st_size
    home = tmp_path / "home-b"
    _trust(world["public"], (served.url,))
    served.faults.trickle, served.faults.delay = max(16, size // 100), 0.05  # about 5 s for the whole bundle
    served.faults.slow.set()
    env = {**os.environ, "PYTHONPATH": str(REPO), "ROCMBUILD_HOME": str(home)}
    argv = [sys.executable, "-m", "rocmbuild", "build", str(world["recipe"]), "--require-cache", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                            start_new_session=True)
    kept = home / "downloads" / f"{key}.part" / f".{key}.tar.gz.{_sha(world)[:16]}.part"
    try:
        _wait_for(lambda: kept.exists() and kept.stat().st_size >= size // 5, 60,
                  "the partial download to grow")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 143, err
    d = json.loads(out)
    assert d["exit_code"] == 143 and d["error"]["type"] == "Interrupted" and "SIGTERM received" in err
    with pytest.raises(ProcessLookupError):  # no process left in its group
        os.killpg(proc.pid, 0)
    adir = home / "artifacts"
    assert not (adir / "imported").exists() and not [p for p in adir.iterdir() if p.name.startswith(".tmp-")]
    lock = adir / f".{key}.lock"
    assert not lock.exists() or lock.read_bytes() == b""  # released: the holder record was cleared
    got = kept.stat().st_size
    assert 0 < got < size and [p.name for p in kept.parent.iterdir()] == [kept.name]

    served.faults.slow.clear()
    before = served.sent()
    start = time.monotonic()
    r = rb("build", str(world["recipe"]), "--require-cache", "--json", env={"ROCMBUILD_HOME": str(home)})
    assert r.returncode == 0 and json.loads(r.stdout)["substituted"]["url"] == served.url, r.stderr
    assert "lock" not in r.stderr.lower() and time.monotonic() - start < 60  # it did not wait for a lock
    assert served.seen()[-1].range == f"bytes={got}-" and served.sent() - before == size - got
    assert not kept.parent.exists()
    [art] = (adir / "imported").iterdir()
    assert art.name == key and _tree_hashes(art / "tree") == _tree_hashes(Path(world["built"]["artifact"]) / "tree")


def test_eight_machines_pull_one_key_from_the_registry_at_once(world, oci_registry, tmp_path):
    url = oci_registry.url()
    sha = _push(world, url)["bundle_sha256"]
    _trust(world["public"], (url,))
    homes = [tmp_path / f"machine-{i}" for i in range(8)]
    procs = []
    for home in homes:
        env = {**os.environ, "PYTHONPATH": str(REPO), "ROCMBUILD_HOME": str(home)}
        procs.append(subprocess.Popen([sys.executable, "-m", "rocmbuild", "build", str(world["recipe"]),
                                       "--require-cache", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=REPO, start_new_session=True))
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            kill_group(p)
    assert [p.returncode for p in procs] == [0] * 8, [e for _, e in outs]
    results = [json.loads(o) for o, _ in outs]
    assert {r["substituted"]["url"] for r in results} == {url}
    assert {r["substituted"]["bundle_sha256"] for r in results} == {sha}
    reference = _tree_hashes(Path(world["built"]["artifact"]) / "tree")
    for home, res in zip(homes, results, strict=True):
        imported = home / "artifacts" / "imported"
        assert [p.name for p in imported.iterdir()] == [world["key"]]  # exactly one artifact per machine
        assert res["artifact"] == str(imported / world["key"])
        assert _tree_hashes(imported / world["key"] / "tree") == reference
        assert not (home / "downloads" / f"{world['key']}.part").exists()


def test_four_pulls_of_one_key_on_one_home_download_it_once(world, oci_registry, tmp_path):
    sha = _push(world, oci_registry.url())["bundle_sha256"]
    proxy = flaky.start(upstream=f"http://{oci_registry.host}", faults=flaky.Faults(target=f"sha256:{sha}"))
    try:
        url = f"oci://{proxy.host}/rocmbuild/cache"
        _trust(world["public"], (url,))
        home = tmp_path / "one-machine"
        env = {**os.environ, "PYTHONPATH": str(REPO), "ROCMBUILD_HOME": str(home)}
        argv = [sys.executable, "-m", "rocmbuild", "build", str(world["recipe"]), "--require-cache", "--wait", "--json"]
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                                  start_new_session=True) for _ in range(4)]
        try:
            outs = [p.communicate(timeout=300) for p in procs]
        finally:
            for p in procs:
                kill_group(p)
        assert [p.returncode for p in procs] == [0] * 4, [e for _, e in outs]
        assert {json.loads(o)["artifact"] for o, _ in outs} == {str(home / "artifacts" / "imported" / world["key"])}
        assert [p.name for p in (home / "artifacts" / "imported").iterdir()] == [world["key"]]
        assert len(proxy.seen()) == 1 and proxy.sent() == oci_registry.blob(sha).stat().st_size  # pulled once
    finally:
        proxy.stop()


def test_kept_bytes_that_are_wrong_start_the_download_over_once(world, served, tmp_path):
    key, size = world["key"], (world["cache_dir"] / f"{world['key']}.tar.gz").stat().st_size
    dest_dir = tmp_path / "pulled"
    dest_dir.mkdir()
    planted = dest_dir / f".{key}.tar.gz.{_sha(world)[:16]}.part"
    planted.write_bytes(b"\0" * (size // 2))  # not a prefix of the bundle
    stale = dest_dir / f".{key}.tar.gz.{'0' * 16}.part"  # a partial of another push of the key
    stale.write_bytes(b"old")
    with Root.open(dest_dir, "pulled") as dest:
        got = open_cache(CacheConfig(served.url)).fetch(key, dest)
    assert hashlib.sha256(Path(got.bundle).read_bytes()).hexdigest() == _sha(world)
    gets = served.seen()
    assert [(s.status, s.range) for s in gets] == [(206, f"bytes={size // 2}-"), (200, None)]
    assert served.sent() == size - size // 2 + size
    assert not planted.exists() and not stale.exists()
