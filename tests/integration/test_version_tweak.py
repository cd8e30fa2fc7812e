"""MIOpen's version tweak carries the source (builder/tweak.py): the configure line of a MIOpen
recipe sets ``GIT`` so that ``rocm_setup_version``'s ``${GIT} describe ...`` prints the commit, and
a real cmake run of a project doing what rocm-cmake's ROCMSetupVersion does writes that tweak into
its version.h. Two sources (another commit, a patch) never get the same tweak.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from rocmbuild.builder import cmake, retry, tweak
from rocmbuild.recipe.model import Build
from tests.integration.test_cli_build import run_json, write_recipe

# what rocm-cmake's rocm_setup_version does with GIT, in our own words: the cache variable from
# find_program, `describe --dirty --long --match [0-9]*`, retried with --always, into version.h
PROJECT = """
cmake_minimum_required(VERSION 3.16)
project(TweakProbe NONE)
find_program(GIT NAMES git)
execute_process(COMMAND ${GIT} describe --dirty --long --match [0-9]* WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                OUTPUT_VARIABLE out OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  execute_process(COMMAND ${GIT} describe --dirty --long --match [0-9]* --always WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                  OUTPUT_VARIABLE out OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
endif()
file(WRITE ${CMAKE_BINARY_DIR}/version.h "#define MIOPEN_VERSION_TWEAK ${out}\\n")
# what MIOpen's CMakeLists does with it: a cache entry, computed once, then kept
set(MIOPEN_USER_DB_SUFFIX "HIP.2_17_0_${out}" CACHE PATH "Filename suffix for the user find-db files")
file(WRITE ${CMAKE_BINARY_DIR}/suffix.txt "${MIOPEN_USER_DB_SUFFIX}")
"""


def test_the_tweak_names_the_source():
    c1, c2 = "a" * 40, "b" * 40
    assert tweak.version_tweak(c1, None) == "a" * 12
    assert tweak.version_tweak(c2, None) != tweak.version_tweak(c1, None)
    patched = tweak.version_tweak(c1, None, ["1" * 64])
    assert patched.startswith("a" * 12 + "-") and patched != tweak.version_tweak(c1, None, ["2" * 64])
    assert tweak.version_tweak(c1, None, cherry_pick=["rocm-7.2.0"]) not in (patched, "a" * 12)
    assert tweak.version_tweak(None, "C" * 64) == "c" * 12  # a tarball: its sha256
    assert tweak.version_tweak(None, None) is None  # unresolved: no define
    with pytest.raises(ValueError):
        tweak.define("x; rm -rf ~")


def test_a_real_cmake_run_takes_the_tweak_from_the_configure_line(tmp_path):
    src, bld = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(PROJECT)
    t = tweak.version_tweak("0123456789abcdef" * 2 + "01234567", None, ["f" * 64])
    argv = cmake.configure_argv(Build(generator="Unix Makefiles"), src, bld, tweak=t)
    assert tweak.define(t) in argv
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (bld / "version.h").read_text() == f"#define MIOPEN_VERSION_TWEAK {t}\n"
    # without it, a tree that is no repository gets an empty tweak (every such build shares a dir)
    plain = cmake.configure_argv(Build(generator="Unix Makefiles"), src, tmp_path / "b2")
    env = {"GIT_DIR": "/dev/null", "PATH": "/usr/bin:/bin"}
    assert subprocess.run(plain, capture_output=True, text=True, env=env).returncode == 0
    assert (tmp_path / "b2/version.h").read_text() == "#define MIOPEN_VERSION_TWEAK \n"


def test_a_kept_tree_configured_with_another_tweak_takes_the_new_suffix(tmp_path):
    """A retry's copied tree (same commit, other patches): MIOpen's cached MIOPEN_USER_DB_SUFFIX is
    dropped with the old tweak, so the new library's user find-db names carry the new one. Found
    on the real MIOpen 2.17 build (docs/miopen.md), where a reconfigure with another GIT left the
    suffix as it was."""
    src, bld = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(PROJECT)
    build = Build(generator="Unix Makefiles")
    for t in (tweak.version_tweak("a" * 40, None), tweak.version_tweak("a" * 40, None, ["1" * 64])):
        argv = cmake.configure_argv(build, src, bld, tweak=t)
        retry.reconcile(bld, argv, {})
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert (bld / "version.h").read_text() == f"#define MIOPEN_VERSION_TWEAK {t}\n"
        assert (bld / "suffix.txt").read_text() == f"HIP.2_17_0_{t}"
    # the same tweak again keeps the cache entry (nothing to recompute)
    before = (bld / "CMakeCache.txt").read_text()
    retry.reconcile(bld, argv, {})
    assert (bld / "CMakeCache.txt").read_text() == before


def test_plan_json_carries_the_commit_in_the_configure_line(tmp_path, monorepo, capsys):
    recipe = write_recipe(tmp_path, monorepo.url)
    code, plan = run_json(capsys, "plan", str(recipe))
    assert code == 0
    configure = plan["commands"]["configure"]
    expected = f"-DGIT:STRING=/bin/sh;-c;echo {monorepo.c_develop[:12]};rocmbuild-tweak"
    assert expected in configure, json.dumps(configure)
    # the key is unchanged by it: the tweak is made of what the key hashes already
    assert not any(d[0] == "GIT" for d in plan["cache"]["inputs"]["defines"])


def test_a_recipe_that_sets_git_itself_keeps_it(tmp_path, monorepo, capsys):
    recipe = write_recipe(tmp_path, monorepo.url)
    code, plan = run_json(capsys, "plan", str(recipe), "-D", "GIT=/usr/bin/git")
    assert code == 0
    configure = plan["commands"]["configure"]
    assert "-DGIT:STRING=/usr/bin/git" in configure and not any("rocmbuild-tweak" in a for a in configure)

