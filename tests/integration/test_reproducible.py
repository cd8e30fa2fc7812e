"""Reproducible builds and ``build --check``: real git, cmake, compilers, two homes.

The fixture library is built with debug info (``RelWithDebInfo``: the build's absolute paths
would be in it) and with ``MIOPEN_FIXTURE_STAMP`` (``__DATE__ __TIME__`` and ``__FILE__`` in the
library), from a commit with a fixed committer time.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from rocmbuild.store import cache
from tests.support.cli import rb
from tests.support.recipes import write_fixture_recipe

#: the stamped commit's committer time, and how __DATE__ " " __TIME__ spell it (UTC)
COMMIT_DATE = "2001-02-03T04:05:06+00:00"
STAMPED = "Feb  3 2001 04:05:06"


def stamp_commit(repo: Path) -> str:
    """An empty commit on develop with a fixed committer time; its sha."""
    env = {**os.environ, "GIT_COMMITTER_DATE": COMMIT_DATE, "GIT_AUTHOR_DATE": COMMIT_DATE}
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "stamped"], cwd=repo, env=env, check=True,
                   timeout=60)
    return subprocess.run([*git, "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def recipe(tmp_path: Path, url: str, **kw) -> Path:
    return write_fixture_recipe(tmp_path / "recipes", url=url, generator="Ninja", build_type="RelWithDebInfo",
                                defines={"MIOPEN_FIXTURE_PAD_MB": 0, "MIOPEN_FIXTURE_STAMP": True}, **kw)


def build(recipe_path: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    return rb("build", recipe_path, *args, "--json", env={"ROCMBUILD_HOME": str(home)}, timeout=300)


def hashes(tree: Path) -> dict[str, str]:
    """path -> sha256 of every file (a link: its text) below ``tree``."""
    out = {}
    for dirpath, _dirs, files in os.walk(tree):
        for name in files:
            p = Path(dirpath, name)
            rel = p.relative_to(tree).as_posix()
            out[rel] = "link:" + os.readlink(p) if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def call(lib: Path, name: str) -> str:
    fn = getattr(ctypes.CDLL(str(lib)), name)
    fn.restype = ctypes.c_char_p
    return fn().decode()


@pytest.mark.parametrize("launcher", ["auto", "none"])
def test_two_homes_build_the_same_bytes(tmp_path, monorepo, launcher):
    commit = stamp_commit(monorepo.path)
    r = recipe(tmp_path, monorepo.url, launcher=launcher)
    homes = [tmp_path / "home-a", tmp_path / "elsewhere" / "much-longer-home-b"]
    out = []
    for home in homes:
        proc = build(r, home)
        assert proc.returncode == 0, proc.stderr
        out.append(json.loads(proc.stdout))
    assert out[0]["key"] == out[1]["key"] and out[0]["commit"] == commit
    trees = [Path(o["artifact"]) / "tree" for o in out]
    a, b = hashes(trees[0]), hashes(trees[1])
    assert "lib/libMIOpen.so.1.0" in a and "share/miopen/db/gfx1151.db.txt" in a
    assert a == b, {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    lib = trees[0] / "lib" / "libMIOpen.so.1.0"
    data = lib.read_bytes()
    assert b".debug_info" in data  # the debug info that would name the build's paths is there
    for home, tree in zip(homes, trees, strict=True):
        for f in tree.rglob("*"):
            if f.is_file() and not f.is_symlink():
                assert str(home).encode() not in f.read_bytes(), f  # no absolute path of either home
    assert call(lib, "miopenFixtureBuilt") == STAMPED  # SOURCE_DATE_EPOCH: the commit's time, not now
    assert not call(lib, "miopenFixtureSourceFile").startswith("/")


def test_check_of_a_reproducible_build_is_identical(tmp_path, monorepo):
    stamp_commit(monorepo.path)
    r = recipe(tmp_path, monorepo.url)
    home = tmp_path / "home"
    built = json.loads(build(r, home).stdout)
    art = Path(built["artifact"])
    before = {p: (p.lstat().st_ino, p.lstat().st_mtime_ns) for p in art.rglob("*")}
    proc = build(r, home, "--check")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["verb"] == "build" and d["ok"] is True and d["identical"] is True and d["differences"] == []
    assert d["key"] == built["key"] and d["artifact"] == str(art) and d["compared"] >= 5
    assert Path(d["log"]).is_file()
    # the check's log is the recipe's newest, where `rocmbuild log RECIPE` and latest.log look
    assert Path(d["log"]).parent == home / "logs" / built["recipe"]
    assert (home / "logs" / built["recipe"] / "latest.log").resolve() == Path(d["log"]).resolve()
    assert {p: (p.lstat().st_ino, p.lstat().st_mtime_ns) for p in art.rglob("*")} == before  # never touched
    assert not list((home / "build").glob(".check-*"))  # the rebuild is removed
    assert cache.lookup(built["key"], home) is not None
    text = rb("build", r, "--check", env={"ROCMBUILD_HOME": str(home)}, timeout=300)
    assert text.returncode == 0 and "identical" in text.stdout


def test_check_reports_the_differing_file_of_a_non_reproducible_build(tmp_path, monorepo):
    """``reproducible = false`` and debug info: the rebuild's other build tree is in its debug info."""
    stamp_commit(monorepo.path)
    r = recipe(tmp_path, monorepo.url, reproducible=False, launcher="none")
    home = tmp_path / "home"
    built = json.loads(build(r, home).stdout)
    art = Path(built["artifact"])
    cached_lib = art / "tree" / "lib" / "libMIOpen.so.1.0"
    cached_sha = hashlib.sha256(cached_lib.read_bytes()).hexdigest()
    proc = build(r, home, "--check")
    assert proc.returncode == 3, proc.stderr
    d = json.loads(proc.stdout)
    assert d["ok"] is False and d["identical"] is False and d["exit_code"] == 3
    assert d["error"]["type"] == "NotReproducible" and d["error"]["hint"]
    by_path = {x["path"]: x for x in d["differences"]}
    lib = by_path["lib/libMIOpen.so.1.0"]
    assert lib["cached"]["sha256"] == cached_sha and lib["cached"]["size"] == cached_lib.stat().st_size
    assert len(lib["rebuilt"]["sha256"]) == 64 and lib["rebuilt"]["sha256"] != cached_sha
    assert isinstance(lib["rebuilt"]["size"], int)
    assert "share/miopen/db/gfx1151.db.txt" not in by_path  # what is the same is not reported
    assert "lib/libMIOpen.so.1.0" in proc.stderr  # the message names the file
    assert not list((home / "build").glob(".check-*"))
    assert hashlib.sha256(cached_lib.read_bytes()).hexdigest() == cached_sha
    assert cache.lookup(built["key"], home) is not None  # still served


def test_check_without_a_cached_artifact_is_exit_2_with_a_hint(tmp_path, monorepo):
    r = recipe(tmp_path, monorepo.url)
    home = tmp_path / "home"
    proc = build(r, home, "--check")
    assert proc.returncode == 2, proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert err["type"] == "InputError" and "no cached artifact" in err["message"]
    assert "rocmbuild build" in err["hint"]
    assert not (home / "build").exists() and not (home / "src").exists()  # nothing fetched or built


def test_a_stopped_check_leaves_no_rebuild_and_gc_collects_a_killed_one(tmp_path, mocker):
    """A stop (SIGTERM, Ctrl-C: a BaseException) mid-rebuild removes ``build/.check-<key>-<pid>``;
    ``cache gc`` removes one whose process was killed (-9)."""
    from rocmbuild.builder import pipeline, rebuild
    from rocmbuild.home import cache_home

    home, key = cache_home(), "c" * 64

    def half_build(recipe, checkout, build_dir, **kw):
        (build_dir / "CMakeFiles").mkdir(parents=True)
        raise KeyboardInterrupt

    mocker.patch.object(pipeline, "rebuild_into", side_effect=half_build)
    mocker.patch.object(pipeline, "launcher", return_value=pipeline.Launcher())
    with pytest.raises(KeyboardInterrupt):
        rebuild.rebuild(mocker.Mock(), mocker.Mock(), home=home, key=key, inp=mocker.Mock(), log=tmp_path / "log")
    assert not list((home / "build").glob(".check-*"))
    dead = subprocess.Popen(["true"])
    dead.wait()
    killed = home / "build" / f".check-{key}-{dead.pid}"
    (killed / "CMakeFiles").mkdir(parents=True)
    done = rb("cache", "gc", "--keep-days", "0", "--json")
    assert done.returncode == 0, done.stderr
    assert str(killed) in [c["path"] for c in json.loads(done.stdout)["removed"]]
    assert not killed.exists()
