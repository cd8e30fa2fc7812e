"""Housekeeping, for real: ``cache list`` and ``cache gc`` over a private copy of the session's
built artifacts, real applies and rollbacks on fake-torch venvs, real failed builds, real
processes in build trees; downloads against a real local HTTP server that fails, refuses or 500s.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocmbuild.sources import archive
from rocmbuild.store import cache, housekeeping
from rocmbuild.errors import FetchError
from tests.support.cli import rb
from tests.support.recipes import write_fixture_recipe
from tests.support.snapshots import full_listing, snapshot

OLD = time.time() - 90 * 86400


def _json(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def _ok(proc) -> dict:
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return _json(proc)


@pytest.fixture
def own_home(txn_world, tmp_path, monkeypatch):
    """A private copy of the session's home (gc removes things), sealed again by `cache verify`;
    without the targets and uses other tests recorded in the session's home."""
    home = tmp_path / "own-home"
    world = {a.path.name for a in txn_world.artifacts.values()}

    def ignore(d: str, names: list[str]) -> list[str]:
        gone = [n for n in names if n in ("known-targets", ".used", "state")]
        if Path(d).resolve() == (txn_world.home / "artifacts").resolve():  # only the world's own artifacts
            gone += [n for n in names if n == "imported" or (len(n) == 64 and n not in world)]
        return gone

    shutil.copytree(txn_world.home, home, symlinks=True, ignore=ignore)
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))
    assert rb("cache", "verify").returncode == 0
    return home


@pytest.fixture
def env350(target_env):
    return lambda: target_env("3.5.0", compile_version="3.5.1")


def _by_recipe(listing: dict) -> dict:
    return {a["recipe"]: a for a in listing["artifacts"]}


def _age(home: Path, *keys: str) -> None:
    """Make the artifacts ``keys`` look unused for 90 days (their last-use stamps)."""
    for key in keys:
        stamp = home / "artifacts" / ".used" / key
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
        os.utime(stamp, (OLD, OLD))


def _version(env) -> str:
    return _ok(rb("status", "--env", env.prefix, "--json"))["torch"]["runtime_version"]


# --------------------------------------------------------------------------------------------
# cache list


def test_cache_list_shows_every_artifact_with_the_targets_using_it(txn_world, own_home, env350):
    env = env350()
    a = _ok(rb("apply", txn_world.recipe("mini"), "--env", env.prefix, "--json"))
    b = _ok(rb("apply", txn_world.recipe("mini-fix"), "--env", env.prefix, "--json"))
    d = _ok(rb("cache", "list", "--json"))
    arts = _by_recipe(d)
    assert set(arts) == {"mini", "mini-fix", "mini-develop"} and d["verb"] == "cache"
    for name, art in txn_world.artifacts.items():
        got = arts[name]
        assert got["key"] == art.key and got["commit"] == art.manifest.commit and got["kind"] == "built"
        assert got["version"] == art.manifest.version and got["last_used"] and got["created"]
        assert got["size"] >= sum(f.size for f in art.manifest.files if f.size)
    prefix = str(env.prefix)
    assert arts["mini-fix"]["targets"] == [{"prefix": prefix, "state_dir": f"{prefix}/.rocmbuild",
                                           "txn": b["txn"], "role": "in-effect"}]
    assert [(t["txn"], t["role"]) for t in arts["mini"]["targets"]] == [(a["txn"], "rollback")]
    assert arts["mini-develop"]["targets"] == []
    assert d["total_bytes"] == sum(x["size"] for x in d["artifacts"])
    assert [t["prefix"] for t in d["targets"]] == [prefix] and d["targets"][0]["exists"] is True
    text = rb("cache", "list")
    assert text.returncode == 0, text.stderr
    # in words: why each target uses the artifact
    assert f"used by {prefix}: applied by txn {b['txn'][:4]} and in effect (what it loads now)" in text.stdout
    assert (f"used by {prefix}: applied by txn {a['txn'][:4]}, in effect under a newer apply "
            "(`rollback` returns to it)") in text.stdout
    assert "3 artifact(s)" in text.stdout and "1 known target(s)" in text.stdout


def test_last_use_is_recorded_on_a_cache_hit(txn_world, own_home):
    key = txn_world.artifacts["mini"].key
    _age(own_home, key)
    before = _by_recipe(_ok(rb("cache", "list", "--json")))["mini"]["last_used"]
    assert before.startswith(time.strftime("%Y", time.gmtime(OLD)))
    _ok(rb("build", txn_world.recipe("mini"), "--json"))  # a cache hit
    after = _by_recipe(_ok(rb("cache", "list", "--json")))["mini"]["last_used"]
    assert after > before and (own_home / "artifacts" / ".used" / key).stat().st_mtime > time.time() - 60


def test_disk_bytes_counts_a_hard_link_once(tmp_path):
    d = tmp_path / "tree"
    d.mkdir()
    (d / "a").write_bytes(os.urandom(64 * 1024))
    os.link(d / "a", d / "b")
    one = housekeeping.disk_bytes(d)
    (d / "b").unlink()
    shutil.copy(d / "a", d / "c")
    assert housekeeping.disk_bytes(d) > one >= 64 * 1024


# --------------------------------------------------------------------------------------------
# cache gc: artifacts


def test_gc_keeps_what_the_rollback_needs_and_removes_the_rest(txn_world, own_home, env350):
    env = env350()
    stock = snapshot(env.prefix)
    _ok(rb("apply", txn_world.recipe("mini"), "--env", env.prefix, "--json"))
    _ok(rb("apply", txn_world.recipe("mini-fix"), "--env", env.prefix, "--json"))
    keys = {n: a.key for n, a in txn_world.artifacts.items()}
    # the default keeps whatever was used in the last 30 days: nothing goes
    d = _ok(rb("cache", "gc", "--json"))
    assert d["keep_days"] == 30 and not [c for c in d["removed"] if c["kind"] == "artifact"]
    # --dry-run removes nothing, and says what it would
    before = full_listing(own_home)
    dry = _ok(rb("cache", "gc", "--keep-days", "0", "--dry-run", "--json"))
    assert full_listing(own_home) == before
    assert [c["key"] for c in dry["removed"] if c["kind"] == "artifact"] == [keys["mini-develop"]]
    assert dry["dry_run"] is True and dry["freed_bytes"] >= dry["removed"][0]["bytes"] > 0
    # the real one: mini-develop (used by nothing) goes; what the target uses stays
    d = _ok(rb("cache", "gc", "--keep-days", "0", "--json"))
    assert [c["key"] for c in d["removed"] if c["kind"] == "artifact"] == [keys["mini-develop"]]
    assert d["freed_bytes"] == dry["freed_bytes"]
    kept = {k["key"]: k["reason"] for k in d["kept"]}
    assert "in-effect" in kept[keys["mini-fix"]] and "rollback" in kept[keys["mini"]]
    assert not (own_home / "artifacts" / keys["mini-develop"]).exists()
    assert (own_home / "artifacts" / keys["mini"] / "manifest.json").is_file()
    assert not list((own_home / "artifacts").glob(".gc-*"))
    assert _ok(rb("cache", "verify", "--json"))["checked"] == 2  # what stayed is intact
    # the rollbacks still work after gc, and then nothing needs the artifacts any more
    _ok(rb("rollback", "--env", env.prefix, "--json"))
    assert _version(env) == "3.5.1"
    _ok(rb("rollback", "--env", env.prefix, "--json"))
    assert _version(env) == "3.5.0" and snapshot(env.prefix).keys() >= stock.keys()
    # both applies are undone, and each can come back (`rollback --to` a rollback): still kept
    left = _by_recipe(_ok(rb("cache", "list", "--json")))
    assert [t["role"] for t in left["mini"]["targets"]] == [t["role"] for t in left["mini-fix"]["targets"]] == ["redo"]
    d = _ok(rb("cache", "gc", "--keep-days", "0", "--json"))
    assert not [c for c in d["removed"] if c["kind"] == "artifact"]
    # a target that no longer exists protects nothing
    shutil.rmtree(env.prefix)
    d = _ok(rb("cache", "gc", "--keep-days", "0", "--json"))
    assert sorted(c["key"] for c in d["removed"] if c["kind"] == "artifact") == sorted([keys["mini"], keys["mini-fix"]])
    assert any("no longer exist" in n for n in d["notes"])
    assert _ok(rb("cache", "list", "--json"))["artifacts"] == []
    assert "freed" in rb("cache", "gc", "--keep-days", "0").stdout


def test_gc_removes_no_artifact_while_a_target_journal_is_unreadable(txn_world, own_home, env350):
    env = env350()
    _ok(rb("apply", txn_world.recipe("mini"), "--env", env.prefix, "--json"))
    (Path(env.prefix) / ".rocmbuild" / "journal" / "0099-20260101T000000Z.json").write_text("{not json")
    d = _ok(rb("cache", "gc", "--keep-days", "0", "--json"))
    assert not [c for c in d["removed"] if c["kind"] == "artifact"]
    assert d["notes"] and "cannot be read" in d["notes"][0]
    assert len(_ok(rb("cache", "list", "--json"))["artifacts"]) == 3


def test_gc_leaves_an_artifact_whose_key_is_locked(txn_world, own_home):
    key = txn_world.artifacts["mini-develop"].key
    with cache.key_lock(own_home, key, wait=False):  # another run's build of this key
        d = _ok(rb("cache", "gc", "--keep-days", "0", "--json"))
    assert key not in [c["key"] for c in d["removed"]]
    assert any(k["key"] == key and "locked" in k["reason"] for k in d["kept"])
    assert (own_home / "artifacts" / key / "manifest.json").is_file()


def test_one_gc_at_a_time(own_home):
    from rocmbuild.fs.disk import FileLock

    with FileLock(own_home / ".gc.lock", what="gc"):
        r = rb("cache", "gc", "--json")
    assert r.returncode == 5 and _json(r)["error"]["type"] == "LockedError"


def test_gc_options_belong_to_gc(own_home):
    r = rb("cache", "list", "--keep-days", "3", "--json")
    assert r.returncode == 2 and "cache gc" in _json(r)["error"]["message"]
    r = rb("cache", "gc", "--keep-days", "-1", "--json")
    assert r.returncode == 2 and "--keep-days" in _json(r)["error"]["message"]


# --------------------------------------------------------------------------------------------
# cache gc: build trees, temp dirs, downloads, quarantine


def _attempt(tree: Path, status: str, ended: str | None = "2020-01-01T00:00:00+00:00") -> Path:
    tree.mkdir(parents=True, exist_ok=True)
    (tree / "obj.o").write_bytes(b"\0" * 4096)
    (tree / housekeeping.ATTEMPT).write_text(json.dumps(
        {"recipe": "mini", "commit": "a" * 40, "key": tree.name, "status": status,
         "started": "2020-01-01T00:00:00+00:00", "ended": ended}))
    return tree


def test_a_real_failed_build_dir_is_removed_and_a_busy_one_kept(txn_world, own_home, tmp_path, monorepo):
    bad = write_fixture_recipe(tmp_path / "recipes", "broken", url=monorepo.url, ref="rocm-7.1.0", jobs=1,
                               defines={"CMAKE_C_FLAGS": "-DMINI_BROKEN -include /nonexistent/header.h"})
    r = rb("build", bad, "--json")
    assert r.returncode == 3, r.stderr
    (failed,) = [p for p in (own_home / "build").iterdir() if p.name not in
                 {a.key for a in txn_world.artifacts.values()}]
    assert (failed / "CMakeCache.txt").is_file()
    builds = own_home / "build"
    recorded = _attempt(builds / ("1" * 64), "failed")
    busy = _attempt(builds / ("2" * 64), "failed")
    interrupted = _attempt(builds / ("3" * 64), "running", ended=None)
    os.utime(interrupted, (OLD, OLD))
    orphan = _attempt(builds / txn_world.artifacts["mini"].key, "succeeded")  # its artifact goes in this gc
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=busy,
                            start_new_session=True)
    try:
        dry = _ok(rb("cache", "gc", "--keep-days", "0", "--dry-run", "--json"))
        assert failed.is_dir() and recorded.is_dir()
        d = _ok(rb("cache", "gc", "--keep-days", "0", "--json"))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    gone = {c["path"]: c["reason"] for c in d["removed"] if c["kind"] == "build-dir"}
    assert {c["path"] for c in dry["removed"] if c["kind"] == "build-dir"} == set(gone)
    assert set(gone) == {str(failed), str(recorded), str(interrupted), str(orphan)}
    assert gone[str(recorded)] == "the build failed" and "interrupted" in gone[str(interrupted)]
    assert gone[str(orphan)] == "its artifact is gone"
    assert not failed.exists() and not recorded.exists() and not interrupted.exists() and not orphan.exists()
    assert busy.is_dir()
    assert any(k["path"] == str(busy) and f"pid {proc.pid}" in k["reason"] for k in d["kept"])


def test_old_downloads_temp_dirs_and_quarantined_entries_go_young_ones_stay(own_home):
    dl = own_home / "downloads"
    dl.mkdir(exist_ok=True)
    old, young, part = dl / ("a" * 64), dl / ("b" * 64), dl / "bundle-x.tar.gz.part"
    for p in (old, young, part):
        p.write_bytes(b"x" * 10000)
    os.utime(old, (OLD, OLD))
    temp = own_home / "artifacts" / f".tmp-{'c' * 64}-99999999"
    (temp / "tree").mkdir(parents=True)
    (temp / "tree" / "lib.so").write_bytes(b"y" * 5000)
    q = own_home / "artifacts" / ".quarantine" / f"{'d' * 64}-20200101T000000123456Z-4242"
    (q / "tree" / "lib").mkdir(parents=True)
    (q / "tree" / "lib" / "libMIOpen.so.1.0").write_bytes(b"z" * 5000)
    os.chmod(q / "tree" / "lib" / "libMIOpen.so.1.0", 0o444)  # sealed: read-only file,
    os.chmod(q / "tree" / "lib", 0o555)  # and even a read-only directory
    d = _ok(rb("cache", "gc", "--keep-days", "1", "--json"))
    removed = {c["path"]: c for c in d["removed"]}
    assert {str(old), str(temp), str(q)} <= set(removed)
    assert not old.exists() and not temp.exists() and not q.exists()
    assert young.exists() and part.exists()  # used today; a .part under an hour old may be live
    assert removed[str(old)]["bytes"] >= 10000 and d["freed_bytes"] >= 20000
    since = removed[str(old)]["since"]
    assert since[:10] == time.strftime("%Y-%m-%d", time.gmtime(OLD)) and removed[str(old)]["reason"] == \
        f"not used since {since}"  # with its date (issue 27)


# --------------------------------------------------------------------------------------------
# downloads: retries, and network failures said in words (exit 3)


class _Flaky(http.server.SimpleHTTPRequestHandler):
    """Serves its directory, but the first ``fail`` GETs of each path answer ``status``."""

    fail = 0
    status = 503
    hits: dict = {}

    def do_GET(self):  # noqa: N802
        n = self.hits[self.path] = self.hits.get(self.path, 0) + 1
        if n <= self.fail:
            self.send_response(self.status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *a, **k):
        pass


@pytest.fixture
def server(tmp_path):
    served = tmp_path / "www"
    served.mkdir()
    started = []

    def start(fail: int, status: int = 503):
        handler = type("H", (_Flaky,), {"fail": fail, "status": status, "hits": {}})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(served)))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}", handler.hits

    yield served, start
    for srv in started:
        srv.shutdown()
        srv.server_close()


def test_a_download_that_fails_twice_is_retried_and_succeeds(server, tmp_path):
    served, start = server
    data = os.urandom(200_000)
    (served / "src.tar.gz").write_bytes(data)
    base, hits = start(fail=2, status=503)
    dest = tmp_path / "dl" / "src"
    archive.download(f"{base}/src.tar.gz", dest, hashlib.sha256(data).hexdigest())
    assert dest.read_bytes() == data and hits["/src.tar.gz"] == 3


def test_a_server_that_keeps_failing_is_exit_3_after_the_retries(server, tmp_path):
    served, start = server
    (served / "src.tar.gz").write_bytes(b"x")
    base, hits = start(fail=100, status=502)
    with pytest.raises(FetchError) as ei:
        archive.download(f"{base}/src.tar.gz", tmp_path / "dl", "0" * 64)
    assert ei.value.exit_code == 3 and hits["/src.tar.gz"] == 4
    assert "HTTP 502" in ei.value.message and "after 4 tries" in ei.value.message and "--source" in ei.value.hint
    assert not list(tmp_path.glob("dl*"))


def _refusing_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connections are refused
    return port


RAW = ("urllib3", "HTTPConnectionPool", "Max retries", "Traceback", "NewConnectionError", "object at 0x")


def test_refused_connections_are_exit_3_with_a_hint_and_no_library_text(tmp_path):
    url = f"http://127.0.0.1:{_refusing_port()}/miopen.tar.gz"
    recipe = write_fixture_recipe(tmp_path / "r", "tb", tarball=url, sha256="1" * 64, ref=None, subdir=None,
                                  libraries=None, verify=None)
    r = rb("build", recipe, "--json")
    assert r.returncode == 3, r.stderr
    err = _json(r)["error"]
    assert err["type"] == "FetchError" and "connection was refused" in err["message"] and "tried 4 times" in err["message"]
    assert "--source" in err["hint"] and "again later" in err["hint"]
    text = rb("build", recipe)
    assert text.returncode == 3
    for raw in RAW:
        assert raw not in r.stdout + r.stderr + text.stdout + text.stderr


def test_a_sha256_that_500s_is_exit_3_and_a_missing_one_exit_2(server, txn_world, target_env, tmp_path):
    served, start = server
    out = _ok(rb("export", txn_world.recipe("mini"), "-o", served / "mini.tar.gz", "--json",
                 env={"ROCMBUILD_HOME": str(txn_world.home)}))
    env = target_env("3.5.0", compile_version="3.5.1")
    before = snapshot(env.prefix)
    base, hits = start(fail=100, status=500)
    r = rb("apply", "--artifact", f"{base}/mini.tar.gz", "--env", env.prefix, "--json")
    assert r.returncode == 3, r.stderr
    err = _json(r)["error"]
    assert err["type"] == "FetchError" and "mini.tar.gz.sha256" in err["message"] and "HTTP 500" in err["message"]
    assert "--artifact" in err["hint"] and hits["/mini.tar.gz.sha256"] == 4
    assert snapshot(env.prefix) == before
    # a 404 .sha256: the publisher wrote none, an input problem (exit 2), as before
    os.unlink(out["sha256_file"])
    base, _hits = start(fail=0)
    r = rb("apply", "--artifact", f"{base}/mini.tar.gz", "--env", env.prefix, "--json")
    assert r.returncode == 2 and "--sha256" in _json(r)["error"]["hint"]
    assert snapshot(env.prefix) == before


def test_a_succeeded_build_tree_whose_artifact_stays_is_kept(txn_world, own_home):
    tree = _attempt(own_home / "build" / txn_world.artifacts["mini"].key, "succeeded")
    assert housekeeping.build_dir_reason(own_home, tree) == (None, housekeeping.parse_iso("2020-01-01T00:00:00+00:00"))
    assert housekeeping.build_dirs(own_home, time.time()) == []
    assert [c.path for c in housekeeping.build_dirs(own_home, time.time(), {tree.name})] == [str(tree)]
