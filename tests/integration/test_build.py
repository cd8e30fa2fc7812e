"""build.build on the real fixture project: real cmake, make/ninja, cc; real artifacts."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rocmbuild.fs import disk
from rocmbuild.proc import runner
from rocmbuild.builder import pipeline as build
from rocmbuild.store import cache
from rocmbuild.store.artifact import Manifest, read_soname
from rocmbuild.errors import EXIT_BUILD, EXIT_INPUT, BuildError, RequirementError
from rocmbuild.home import cache_home
from rocmbuild import recipe
from tests.support.builds import do_build, make_checkout, make_recipe


@pytest.mark.parametrize("generator", ["Unix Makefiles", "Ninja"])
def test_build_end_to_end_with_both_generators(tmp_path, generator):
    r = make_recipe(tmp_path, generator)
    art, home, key = do_build(r, make_checkout(tmp_path))
    assert art.path == home / "artifacts" / key and not art.cached
    m = art.manifest
    assert m.version == "3.5.1" and m.expect_version == "3.5.1" and m.commit == "a" * 40
    (lib,) = m.libraries
    assert lib.file == "lib/libMIOpen.so.1.0"
    assert lib.soname == "libMIOpen.so.1"
    assert lib.chain == ("libMIOpen.so", "libMIOpen.so.1", "libMIOpen.so.1.0")
    assert set(lib.links) == {"lib/libMIOpen.so", "lib/libMIOpen.so.1"}
    real = art.file(lib.file)
    assert real.is_file() and read_soname(real) == "libMIOpen.so.1"
    by_path = {f.path: f for f in m.files}
    assert by_path["lib/libMIOpen.so.1"].type == "link" and by_path["lib/libMIOpen.so.1"].target == "libMIOpen.so.1.0"
    assert by_path["share/miopen/db/gfx1151.db.txt"].sha256 == hashlib.sha256(b"fixture perf db\n").hexdigest()
    assert by_path[lib.file].size == real.stat().st_size and len(by_path[lib.file].sha256) == 64
    # the manifest on disk is the same manifest
    assert Manifest.from_json(disk.read_json(art.path / "manifest.json")) == m
    # the build tree is gone after success; the log is kept; no temp dirs remain
    assert not (home / "build" / key).exists()
    log = cache.log_path(home, key)
    assert log.is_file() and log.parent == home / "logs" / r.name and log.name.endswith(f"-{key[:16]}.log")
    assert (home / "logs" / r.name / "latest.log").resolve() == log
    assert not list((home / "artifacts").glob(".tmp-*"))
    assert art.intact() == []


def test_cache_lookup_and_changed_artifact_is_not_reused(tmp_path):
    r = make_recipe(tmp_path)
    art, home, key = do_build(r, make_checkout(tmp_path))
    hit = cache.lookup(key, home)
    assert hit is not None and hit.cached and hit.manifest == art.manifest
    # someone writes a cached file in place: it must never be reused
    f = art.file("share/miopen/db/gfx1151.db.txt")
    os.chmod(f, 0o644)
    f.write_text("tampered\n")
    assert cache.lookup(key, home) is None
    assert not (home / "artifacts" / key).exists()


def test_key_depends_on_inputs(tmp_path):
    home = cache_home()
    r1 = make_recipe(tmp_path)
    r2 = make_recipe(tmp_path, defines={"MIOPEN_FIXTURE_PAD_MB": 1})
    k1 = cache.cache_key(cache.inputs(r1, commit="a" * 40, home=home))
    assert k1 == cache.cache_key(cache.inputs(r1, commit="a" * 40, home=home))
    assert k1 != cache.cache_key(cache.inputs(r1, commit="b" * 40, home=home))
    assert k1 != cache.cache_key(cache.inputs(r2, commit="a" * 40, home=home))
    assert k1 != cache.cache_key(cache.inputs(recipe.apply_overrides(r1, recipe.Overrides(defines=("X=1",))),
                                              commit="a" * 40, home=home))


def test_tool_versions_are_remembered(tmp_path, mocker):
    home = cache_home()
    r = make_recipe(tmp_path)
    first = cache.inputs(r, commit=None, home=home)
    assert "cmake version" in first.tools.cmake
    spy = mocker.spy(runner, "capture")
    assert cache.inputs(r, commit=None, home=home) == first
    assert spy.call_count == 0  # no `cc --version` again: nothing is started on a cache hit


def test_compile_error_exit_3_with_tail_and_log_no_artifact(tmp_path):
    r = make_recipe(tmp_path, defines={"MIOPEN_FIXTURE_FAIL": True})
    with pytest.raises(BuildError) as ei:
        do_build(r, make_checkout(tmp_path))
    err = ei.value
    assert err.exit_code == EXIT_BUILD
    assert "build failed" in err.message
    assert "MIOPEN_FIXTURE_FAIL is set" in err.message  # the tail of the output
    assert "cmake --build" in err.message  # the command
    log = Path(err.details["log"])
    assert log.is_file() and "MIOPEN_FIXTURE_FAIL is set" in log.read_text()
    home = cache_home()
    assert [p.name for p in (home / "artifacts").iterdir() if not p.name.endswith(".lock")] == []


def test_configure_error_names_the_step(tmp_path):
    r = make_recipe(tmp_path)
    co = make_checkout(tmp_path)
    (co.source_dir / "CMakeLists.txt").write_text("this is not cmake(\n")
    with pytest.raises(BuildError) as ei:
        do_build(r, co)
    assert "configure failed" in ei.value.message


def test_missing_data_dir_is_a_build_error(tmp_path):
    r = make_recipe(tmp_path)
    r = recipe.parse(r.path.read_text().replace('data = ["share/miopen/db"]', 'data = ["share/nope"]'), r.path)
    with pytest.raises(BuildError) as ei:
        do_build(r, make_checkout(tmp_path))
    assert "share/nope" in ei.value.message


def test_missing_launcher_is_a_clear_error(tmp_path, monkeypatch):
    r = recipe.apply_overrides(make_recipe(tmp_path), recipe.Overrides(launcher="sccache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RequirementError) as ei:
        build.check_launcher(r)
    assert ei.value.exit_code == EXIT_INPUT and "sccache" in ei.value.message


CTRL_C_SCRIPT = """
import signal
import sys
# Ctrl-C must raise KeyboardInterrupt here even when this test inherited SIGINT as ignored (a job
# started with `&` from a non-interactive shell): Python installs its handler only if not ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
from types import SimpleNamespace
from rocmbuild.builder import pipeline as build
from rocmbuild.store import cache
from rocmbuild import recipe
from rocmbuild.fs import disk
from rocmbuild.home import cache_home
from rocmbuild.swap import statedir
r = recipe.load(sys.argv[1])
src = Path(sys.argv[2])
co = SimpleNamespace(root=src, source_dir=src, url="file:///unused", ref="develop", commit="c" * 40,
                     version="3.5.1", patches=(), cherry_picks=(), tarball_sha256=None, fixes=())
home = cache_home()
inp = cache.inputs(r, commit=co.commit, home=home)
try:
    build.build(r, co, home=home, key=cache.cache_key(inp), inp=inp)
except KeyboardInterrupt:
    sys.exit(130)
"""


def _processes_with(marker: str) -> list[int]:
    """Processes with ``marker`` as an argument and their cwd in this test's home (other suites
    running on the machine have slow steps of their own)."""
    home = str(cache_home().resolve())
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
                cwd = os.readlink(d / "cwd")
            except OSError:
                continue
            if marker.encode() in cmd and cwd.startswith(home):
                pids.append(int(d.name))
    return pids


def test_ctrl_c_stops_the_build_cleanly(tmp_path):
    """A real SIGINT mid-build: exit 130, no compiler or build step left running, no artifact."""
    import signal
    import subprocess
    import sys
    import time

    r = make_recipe(tmp_path, defines={"MIOPEN_FIXTURE_SLOW": True})
    co = make_checkout(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT, str(r.path), str(co.source_dir)],
                            cwd=Path(__file__).parents[2], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _processes_with("271") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_with("271"), "the slow build step never started"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        time.sleep(0.2)
        assert _processes_with("271") == []  # no orphaned build step
    finally:  # whatever failed, no tree of this test outlives it
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for pid in _processes_with("271"):
            os.kill(pid, signal.SIGKILL)
    home = cache_home()
    assert not list((home / "artifacts").glob(".tmp-*"))
    assert [p for p in (home / "artifacts").iterdir() if not p.name.startswith(".")] == []


def test_jobs_and_launcher_do_not_change_the_key(tmp_path):
    home = cache_home()
    r = make_recipe(tmp_path)
    k = cache.cache_key(cache.inputs(r, commit="a" * 40, home=home))
    other = recipe.apply_overrides(r, recipe.Overrides(jobs=7, launcher="ccache"))
    assert cache.cache_key(cache.inputs(other, commit="a" * 40, home=home)) == k
