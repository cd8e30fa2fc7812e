"""The configure / build / install argv lists (pure)."""

from __future__ import annotations

from pathlib import Path

from rocmbuild.builder import cmake
from rocmbuild.builder.pipeline import parse_progress
from rocmbuild.recipe import Build


def test_typed_defines():
    assert cmake.define_arg("MIOPEN_USE_MLIR", False) == "-DMIOPEN_USE_MLIR:BOOL=OFF"
    assert cmake.define_arg("BUILD_TESTING", True) == "-DBUILD_TESTING:BOOL=ON"
    assert cmake.define_arg("GPU_TARGETS", ("gfx1151", "gfx1100")) == "-DGPU_TARGETS:STRING=gfx1151;gfx1100"
    assert cmake.define_arg("CMAKE_PREFIX_PATH", "/opt/rocm") == "-DCMAKE_PREFIX_PATH:STRING=/opt/rocm"
    assert cmake.define_arg("N", 3) == "-DN:STRING=3"


def test_configure_argv_is_a_list_with_prefix_and_launcher():
    b = Build(generator="Ninja", build_type="Release", defines=(("A", True), ("B", "x")),
              install_prefix="/opt/x", launcher="ccache")
    argv = cmake.configure_argv(b, Path("/src"), Path("/bld"), "/usr/bin/ccache")
    assert argv[:7] == ["cmake", "-S", "/src", "-B", "/bld", "-G", "Ninja"]
    assert "-DCMAKE_INSTALL_PREFIX:PATH=/opt/x" in argv
    assert "-DCMAKE_BUILD_TYPE:STRING=Release" in argv
    for var in cmake.LAUNCHER_VARIABLES:
        assert f"-D{var}:FILEPATH=/usr/bin/ccache" in argv
    assert argv[-2:] == ["-DA:BOOL=ON", "-DB:STRING=x"]


def test_build_and_install_argv():
    b = Build(jobs=5, targets=("MIOpen",))
    assert cmake.build_argv(b, Path("/bld")) == ["cmake", "--build", "/bld", "--parallel", "5", "--target", "MIOpen"]
    assert cmake.install_argv(Path("/bld")) == ["cmake", "--install", "/bld"]
    assert cmake.build_env(Build(env=(("CXX", "clang++"),)), Path("/d")) == {"CXX": "clang++", "DESTDIR": "/d"}


def test_jobs_zero_means_all_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 12)
    assert cmake.jobs(Build(jobs=0)) == 12
    assert cmake.jobs(Build(jobs=2)) == 2


def test_progress_lines():
    assert parse_progress("[ 45%] Building C object CMakeFiles/MIOpen.dir/src/miopen.c.o") == (45, 100)
    assert parse_progress("[100%] Linking C shared library libMIOpen.so") == (100, 100)
    assert parse_progress("[12/300] Building CXX object src/x.cpp.o") == (12, 300)
    assert parse_progress("-- Configuring done") is None
