"""The bundled MIOpen recipes: they parse, their defines become the typed -D strings expected,
GPU_TARGETS = "auto" resolves from a (faked) KFD topology, and `plan` on a machine without ROCm
prints the plan and names each missing requirement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmbuild.builder import cmake
from rocmbuild.cli import app as cli
from rocmbuild.errors import EXIT_INPUT, InputError
from rocmbuild.flows import build as workflow
from rocmbuild import recipe
from tests.support.machine import make_rocm_tree

BUNDLED = ("miopen-develop", "miopen-3.5.1")

EXPECTED_DEFINES = {
    "-DMIOPEN_BACKEND:STRING=HIP",
    "-DMIOPEN_USE_COMPOSABLEKERNEL:BOOL=OFF",
    "-DMIOPEN_USE_MLIR:BOOL=OFF",
    "-DBUILD_TESTING:BOOL=OFF",
    "-DMIOPEN_BUILD_DRIVER:BOOL=OFF",
}


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_recipe_parses(name):
    r = recipe.load(name)
    assert r.path.parent == recipe.bundled_dir()
    assert r.source.git == "https://github.com/ROCm/rocm-libraries.git"
    assert r.source.subdir == "projects/miopen"
    assert r.install.libraries == ("libMIOpen",)
    assert r.verify.encoding == "miopen" and r.verify.smoke == "batchnorm"
    # the compiler and half's include dir are recipe variables, resolved when built (recipe/variables.py)
    assert dict(r.build.env) == {"CXX": "${HIP_CXX}", "CC": "${HIP_CC}"}
    assert r.build.define("HALF_INCLUDE_DIR") == "${HALF_INCLUDE_DIR}"
    assert r.build.define("MIOPEN_USE_HIPBLASLT") is False  # as Debian's own MIOpen; -D ...=ON brings it back
    assert r.build.define("GPU_TARGETS") == "auto"
    (fix,) = r.source.contains  # the gfx115x fix, by name, where rocm-libraries has it
    assert fix.grep == "MIO_BN_GFX115X" and fix.path == "src/kernels" and "#1288" in fix.name


def test_develop_and_release_expectations():
    dev, rel = recipe.load("miopen-develop"), recipe.load("miopen-3.5.1")
    assert dev.source.ref == "develop" and dev.verify.version == "source"
    assert dev.build.define("MIOPEN_STANDALONE_BUILD") is False
    assert rel.verify.version == "3.5.1" and rel.source.ref != "develop"


@pytest.mark.parametrize("name", BUNDLED)
def test_version_regex_matches_upstream_line(name):
    import re

    r = recipe.load(name)
    for line in ("rocm_setup_version(VERSION 3.5.1)", "rocm_setup_version(VERSION 3.6.0)"):
        m = re.search(r.source.version.regex, line, re.MULTILINE)
        assert m and m.group(1) == line.split()[-1].rstrip(")")


@pytest.mark.parametrize("name", BUNDLED)
def test_typed_defines_with_detected_gpu(name, fake_gpu, monkeypatch, tmp_path):
    fake_gpu(110501)  # a Radeon 8060S (Strix Halo): gfx1151
    rocm = make_rocm_tree(tmp_path / "rocm")  # AMD's layout: llvm/bin/clang++ and clang, include/half/half.hpp
    (rocm / "llvm/bin/clang").write_text("")
    (rocm / "include/half").mkdir(parents=True)
    (rocm / "include/half/half.hpp").write_text("")
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    r = workflow.load_recipe(name)
    assert dict(r.build.env) == {"CXX": f"{rocm}/llvm/bin/clang++", "CC": f"{rocm}/llvm/bin/clang"}
    argv = cmake.configure_argv(r.build, Path("/src"), Path("/bld"))
    assert EXPECTED_DEFINES | {f"-DCMAKE_PREFIX_PATH:STRING={rocm}", f"-DHALF_INCLUDE_DIR:STRING={rocm}/include",
                               "-DMIOPEN_USE_HIPBLASLT:BOOL=OFF"} <= set(argv)
    assert "-DGPU_TARGETS:STRING=gfx1151" in argv
    assert "-DCMAKE_INSTALL_PREFIX:PATH=" + r.build.install_prefix in argv


def test_gpu_targets_override_and_no_gpu(fake_gpu):
    fake_gpu()  # no GPU on this machine
    with pytest.raises(InputError) as ei:
        workflow.load_recipe("miopen-develop")
    assert ei.value.exit_code == EXIT_INPUT and "--gpu-targets" in ei.value.hint
    r = workflow.load_recipe("miopen-develop", overrides=recipe.Overrides(gpu_targets="gfx1100,gfx1151"))
    assert r.build.define("GPU_TARGETS") == "gfx1100;gfx1151"


def test_plan_without_rocm_names_missing_requirements(fake_gpu, capsys, monkeypatch):
    fake_gpu()
    monkeypatch.setenv("ROCM_PATH", "/nonexistent-rocm")
    code = cli.main(["plan", "miopen-develop", "--offline", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["ok"]
    assert plan["source"]["resolved"] is False
    missing = {c["name"] for c in plan["missing"]}
    assert {"requires ${HIP_CXX}", "variable ${HIP_CXX}", "variable ${HIP_CC}"} <= missing
    assert any("hip-config.cmake" in n for n in missing)
    details = {c["name"]: c["detail"] for c in plan["missing"]}
    assert details["requires ${HIP_CXX}"].startswith("${HIP_CXX} is not resolvable here: not found")
    # an unresolvable variable is never turned into a path: the plan shows it as written, and fails
    assert plan["env"]["CXX"] == "${HIP_CXX}"
    assert plan["gpu_targets"] == "auto (unresolved)"
    assert plan["commands"]["configure"][0] == "cmake"
    # the human form prints the same plan and each missing requirement
    code = cli.main(["plan", "miopen-develop", "--offline"])
    text = capsys.readouterr().out
    assert code == 0 and "MISSING" in text and "configure" in text and "UNRESOLVED" in text


def test_build_without_rocm_is_refused_before_fetching(fake_gpu, capsys):
    fake_gpu(110501)
    if Path("/opt/rocm").exists():
        pytest.skip("this machine has /opt/rocm")
    code = cli.main(["build", "miopen-develop", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and "needs what this machine does not have" in out["error"]["message"]


@pytest.mark.parametrize("name", BUNDLED)
def test_every_missing_requirement_says_what_to_install(name, fake_gpu, monkeypatch):
    """Each requirement of the bundled recipes carries a package hint, shown as the fix."""
    from rocmbuild import doctor

    r = recipe.load(name)
    for spec in (*r.requires.paths, *[p for p in r.requires.programs if "$" in p or p == "bzip2"]):
        assert r.requires.hint(spec), f"{name}: no hint for {spec}"
    monkeypatch.setenv("ROCM_PATH", "/nonexistent-rocm")  # AMD's layout: AMD's repository's names
    checks = {c.name: c for c in doctor.check_requirements(r)}
    assert checks["requires ${HIP_CXX}"].fix == "apt install rocm-llvm"
