"""Retries reuse the work: a build whose previous attempt (same recipe, same commit) failed starts
from a copy of that attempt's build tree, and recompiles nothing that did not change.

The fixture fails the way the real MIOpen build did: at the final link, "multiple definition"
(``MIOPEN_FIXTURE_DUPLICATE``), fixed by one linker flag, which changes the key. Real git, cmake,
make, ninja and gcc; the launcher is ``none`` so that no compiler cache hides a recompile.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from rocmbuild.builder import logs as build_logs
from rocmbuild.builder import retry
from rocmbuild.home import cache_home
from tests.support.cli import rb
from tests.support.recipes import write_fixture_recipe

SOURCES = 12
BROKEN = "-Wl,-O1"
FIXED = "-Wl,--allow-multiple-definition"



def _log(key: str) -> Path:
    """The newest build log of ``key`` (logs are by recipe now: logs/<recipe>/<stamp>-<key16>.log)."""
    found = build_logs.newest(cache_home(), key)
    assert found is not None, f"no log for {key}"
    return found

def _recipe(tmp_path: Path, url: str, generator: str, flags: str, ref: str = "develop") -> Path:
    path = write_fixture_recipe(tmp_path / "recipes", url=url, ref=ref, generator=generator, data=None,
                                defines={"MIOPEN_FIXTURE_EXTRA_SOURCES": SOURCES, "MIOPEN_FIXTURE_DUPLICATE": True,
                                         "CMAKE_SHARED_LINKER_FLAGS": flags})
    line = f"generator = {json.dumps(generator)}"
    path.write_text(path.read_text().replace(line, f'{line}\nlauncher = "none"'))
    assert 'launcher = "none"' in path.read_text()
    return path


def _build(recipe: Path) -> tuple[int, dict]:
    done = rb("build", recipe, "--json", timeout=300)
    return done.returncode, json.loads(done.stdout)


def _compiles(key: str) -> int:
    """How many objects the build of ``key`` compiled (cmake's progress lines in its log)."""
    log = _log(key).read_text()
    return sum(1 for line in log.splitlines() if "Building C object" in line)


def _trees() -> dict[str, dict]:
    root = cache_home() / "build"
    return {t.name: retry.read_attempt(t) for t in root.iterdir()} if root.is_dir() else {}


@pytest.mark.parametrize("generator", ["Ninja", "Unix Makefiles"])
def test_a_retry_after_a_failed_link_recompiles_nothing(tmp_path, monorepo, generator):
    recipe = _recipe(tmp_path, monorepo.url, generator, BROKEN)
    code, failed = _build(recipe)
    assert code == 3, failed
    (old_key, record), = _trees().items()
    assert "multiple definition" in _log(old_key).read_text()
    assert set(record) == {"recipe", "commit", "key", "status", "started", "ended"}
    assert record["recipe"] == "mini" and record["key"] == old_key and record["status"] == "failed"
    assert record["commit"] == monorepo.c_develop and record["ended"] is not None
    assert _compiles(old_key) == SOURCES + 3  # every object was compiled; the link failed

    recipe.write_text(recipe.read_text().replace(BROKEN, FIXED))
    code, built = _build(recipe)
    assert code == 0, built
    key = built["key"]
    assert key != old_key  # the artifact is keyed by every input, the linker flag too
    assert _compiles(key) == 0, _log(key).read_text()[-3000:]
    log = _log(key).read_text()
    assert "Linking C shared library" in log
    lib = ctypes.CDLL(str(Path(built["artifact"]) / "tree" / "lib" / "libMIOpen.so.1.0"))
    major, minor, patch = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    assert lib.miopenGetVersion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch)) == 0
    assert (major.value, minor.value) == (3, 6)
    # the new tree is removed after success; the failed attempt's tree is kept as it was
    assert _trees() == {old_key: record}


def test_the_copy_starts_no_compile_when_cmake_cache_paths_moved(tmp_path, monorepo):
    """The seeded tree names itself, not the failed one: cmake accepted it (else the configure
    fails "CMakeCache.txt directory ... is different"), and no file of the new tree names the old."""
    recipe = _recipe(tmp_path, monorepo.url, "Ninja", BROKEN)
    assert _build(recipe)[0] == 3
    (old_key, _rec), = _trees().items()
    # a second failing attempt under another key: its tree is kept, so it can be looked at
    recipe.write_text(recipe.read_text().replace(BROKEN, "-Wl,-O2"))
    code, out = _build(recipe)
    assert code == 3
    new_key = next(k for k in _trees() if k != old_key)
    tree = cache_home() / "build" / new_key
    cache = (tree / "CMakeCache.txt").read_text()
    assert f"CMAKE_CACHEFILE_DIR:INTERNAL={tree}" in cache
    assert str(cache_home() / "build" / old_key) not in cache
    assert _compiles(new_key) == 0  # only the link ran again (and failed again)
    assert _trees()[new_key]["status"] == "failed"


def test_a_tree_in_use_is_never_copied(tmp_path, monorepo):
    """A live process working in the failed tree: the retry builds from zero and leaves it alone."""
    recipe = _recipe(tmp_path, monorepo.url, "Ninja", BROKEN)
    assert _build(recipe)[0] == 3
    (old_key, record), = _trees().items()
    old_tree = cache_home() / "build" / old_key
    before = sorted((p.relative_to(old_tree).as_posix(), p.lstat().st_mtime_ns) for p in old_tree.rglob("*"))
    user = subprocess.Popen(["sleep", "60"], cwd=old_tree, start_new_session=True)
    try:
        recipe.write_text(recipe.read_text().replace(BROKEN, FIXED))
        code, built = _build(recipe)
    finally:
        os.killpg(user.pid, signal.SIGKILL)
        user.wait()
    assert code == 0, built
    assert _compiles(built["key"]) == SOURCES + 3  # from zero
    after = sorted((p.relative_to(old_tree).as_posix(), p.lstat().st_mtime_ns) for p in old_tree.rglob("*"))
    assert after == before and retry.read_attempt(old_tree) == record


def test_another_commit_does_not_start_from_the_failed_tree(tmp_path, monorepo):
    recipe = _recipe(tmp_path, monorepo.url, "Ninja", BROKEN, ref="develop")
    assert _build(recipe)[0] == 3
    recipe.write_text(recipe.read_text().replace(BROKEN, FIXED).replace('ref = "develop"', 'ref = "rocm-7.1.0"'))
    code, built = _build(recipe)
    assert code == 0, built
    assert _compiles(built["key"]) == SOURCES + 3


def test_ninja_hash_is_ninjas_own(tmp_path):
    """``retry.ninja_hash`` equals the hash real ninja wrote into ``.ninja_log`` for a command."""
    (tmp_path / "build.ninja").write_text(
        "rule w\n  command = printf 'x%.0s' 1 2 3 > $out && echo the-quick-brown-fox-$out\n"
        "build a.txt: w\nbuild bb.txt: w\nbuild longer-name-c.txt: w\n")
    subprocess.run(["ninja", "-C", str(tmp_path)], check=True, capture_output=True)
    cmds = subprocess.run(["ninja", "-C", str(tmp_path), "-t", "commands"], check=True, capture_output=True,
                          text=True).stdout.splitlines()
    logged = {c[3]: c[4] for c in (line.split("\t") for line in (tmp_path / ".ninja_log").read_text().splitlines()
                                   if not line.startswith("#"))}
    assert len(cmds) == 3 and len(logged) == 3
    for cmd in cmds:
        out = cmd.split("> ")[1].split(" ")[0]
        assert f"{retry.ninja_hash(cmd):x}" == logged[out]


def test_a_tree_whose_key_is_locked_is_never_copied(tmp_path, monorepo):
    """``cache gc`` removes a build tree under its key's lock: while another process holds that
    lock, the retry does not copy from the tree (it could vanish mid-copy); it builds from zero."""
    import sys

    recipe = _recipe(tmp_path, monorepo.url, "Ninja", BROKEN)
    assert _build(recipe)[0] == 3
    (old_key, _record), = _trees().items()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from rocmbuild.store.cache import key_lock\n"
         "with key_lock(Path(sys.argv[1]), sys.argv[2], wait=False):\n    print('held', flush=True); time.sleep(60)",
         str(cache_home()), old_key], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        recipe.write_text(recipe.read_text().replace(BROKEN, FIXED))
        code, built = _build(recipe)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    assert code == 0, built
    assert _compiles(built["key"]) == SOURCES + 3  # from zero: the locked tree was not copied


def test_a_define_removed_for_the_retry_does_not_come_back_from_the_copied_cache(tmp_path, monorepo):
    """The failed attempt's CMakeCache.txt holds its -D values; a define the retry leaves out must
    not survive in the copy (the artifact would be built from settings its key does not name)."""
    bad = write_fixture_recipe(tmp_path / "recipes", url=monorepo.url, ref="develop", generator="Ninja", data=None,
                               defines={"MIOPEN_FIXTURE_EXTRA_SOURCES": SOURCES,
                                        "CMAKE_SHARED_LINKER_FLAGS": "-Wl,--no-such-flag"})
    assert _build(bad)[0] == 3
    good = write_fixture_recipe(tmp_path / "recipes", url=monorepo.url, ref="develop", generator="Ninja", data=None,
                                defines={"MIOPEN_FIXTURE_EXTRA_SOURCES": SOURCES})
    code, built = _build(good)
    assert code == 0, built  # the linker flag is gone, not taken over from the failed tree
    assert "--no-such-flag" not in _log(built['key']).read_text()


def test_a_stop_during_the_copy_leaves_no_half_copy(tmp_path, monorepo, mocker):
    """SIGTERM/Ctrl-C (a BaseException) while the failed tree is copied: the temp copy is removed
    and the stop goes on; ``cache gc`` also collects a copy whose process died (kill -9)."""
    recipe = _recipe(tmp_path, monorepo.url, "Ninja", BROKEN)
    assert _build(recipe)[0] == 3
    (old_key, record), = _trees().items()
    root = cache_home() / "build"
    mocker.patch.object(retry, "retarget", side_effect=KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        retry.seed(root / ("f" * 64), recipe="mini", commit=record["commit"], key="f" * 64, home=cache_home())
    assert sorted(p.name for p in root.iterdir()) == [old_key]  # no .seed-* left, no new tree
    dead = subprocess.Popen(["true"])
    dead.wait()
    (root / f".seed-{'e' * 64}-{dead.pid}").mkdir()  # what a kill -9 mid-copy leaves
    done = rb("cache", "gc", "--keep-days", "0", "--json")
    assert done.returncode == 0, done.stderr
    assert any(c["path"].endswith(f".seed-{'e' * 64}-{dead.pid}") for c in json.loads(done.stdout)["removed"])
    assert not (root / f".seed-{'e' * 64}-{dead.pid}").exists()
