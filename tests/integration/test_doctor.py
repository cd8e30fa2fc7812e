"""doctor: real tools on PATH, a faked ROCm tree and GPU topology, real target envs, real recipes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmbuild import doctor
from rocmbuild.cli import app as cli
from rocmbuild.errors import EXIT_INPUT, EXIT_OK
from rocmbuild import recipe
from tests.support.machine import make_rocm_tree

pytestmark = pytest.mark.slow


@pytest.fixture
def fake_rocm(tmp_path, monkeypatch):
    """A ROCm tree with the files doctor looks for (empty files: doctor checks presence only)."""
    root = make_rocm_tree(tmp_path / "rocm")
    monkeypatch.setenv("ROCM_PATH", str(root))
    return root


def _by_name(checks):
    return {c["name"] if isinstance(c, dict) else c.name: c for c in checks}


def _json(capsys, argv):
    code = cli.main(argv + ["--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def any_disk(monkeypatch):
    """Disk thresholds at zero: these tests are about the other checks (test_disk_thresholds covers disk)."""
    for name in ("CACHE_FAIL", "CACHE_WARN", "TARGET_FAIL", "TARGET_WARN"):
        monkeypatch.setattr(doctor, name, 0)


def test_all_good_exits_0(fake_rocm, fake_gpu, target_env, capsys, any_disk):
    fake_gpu(110501)
    env = target_env("3.5.1")
    code, data = _json(capsys, ["doctor", "--env", str(env.prefix)])
    assert code == EXIT_OK and data["ok"] is True and data["verb"] == "doctor" and data["exit_code"] == 0
    for c in data["checks"]:
        assert set(c) == {"name", "status", "detail", "fix"} and c["status"] in ("ok", "warn", "fail")
    checks = _by_name(data["checks"])
    for name in ("git", "cmake", "make/ninja", "C compiler", "C++ compiler", "ROCm", "hipcc", "ROCm clang++",
                 "HIP cmake config", "GPU architecture", "cache disk", "target torch", "target disk"):
        assert checks[name]["status"] == "ok", checks[name]
    assert "gfx1151" in checks["GPU architecture"]["detail"]
    assert "ROCm 7.0.51831" in checks["target torch"]["detail"] and "MIOpen 3.5.1" in checks["target torch"]["detail"]
    assert "cmake 3." in checks["cmake"]["detail"]


def test_rocm_missing_fails_with_a_fix(tmp_path, monkeypatch, fake_gpu, capsys):
    fake_gpu()
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    code, data = _json(capsys, ["doctor"])
    assert code == EXIT_INPUT and data["ok"] is False and data["exit_code"] == EXIT_INPUT
    checks = _by_name(data["checks"])
    assert checks["ROCm"]["status"] == "fail" and "ROCM_PATH" in checks["ROCm"]["fix"]
    assert checks["GPU architecture"]["status"] == "warn" and "--gpu-targets" in checks["GPU architecture"]["fix"]
    assert checks["target"]["status"] == "warn"  # no target at all: a warning, not a failure


def test_incomplete_rocm(fake_rocm, fake_gpu):
    fake_gpu(110501)
    (fake_rocm / "bin" / "hipcc").unlink()
    checks = _by_name(doctor.check_rocm())
    assert checks["ROCm"].status == "ok" and checks["hipcc"].status == "fail" and checks["hipcc"].fix


def test_target_without_torch_fails(fake_rocm, fake_gpu, target_env, monkeypatch):
    fake_gpu(110501)
    env = target_env("3.5.1", torch=False)
    monkeypatch.setenv("CONDA_PREFIX", str(env.prefix))  # found from the active env
    checks = _by_name(doctor.run())
    assert checks["target torch"].status == "fail" and "not installed" in checks["target torch"].detail


def test_incompatible_target_fails(fake_rocm, fake_gpu, target_env):
    fake_gpu(110501)
    env = target_env("3.6.0", compile_version="3.5.1")
    c = _by_name(doctor.check_target(str(env.prefix), None))["target torch"]
    assert c.status == "fail" and "cuDNN version incompatibility" in c.fix


def test_missing_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    assert doctor.check_git().status == "fail" and doctor.check_git().fix
    assert doctor.check_cmake().status == "fail"
    assert doctor.check_build_tool().status == "fail"
    assert [c.status for c in doctor.check_compilers()] == ["fail", "fail"]


def test_disk_thresholds(tmp_path):
    assert doctor.check_disk("d", tmp_path / "not" / "yet", 1, 2, "x").status == "ok"  # nearest existing parent
    assert doctor.check_disk("d", tmp_path, 1 << 62, 1 << 63, "x").status == "fail"
    assert doctor.check_disk("d", tmp_path, 1, 1 << 62, "x").status == "warn"


def _program(bindir: Path, name: str, version_line: str) -> None:
    bindir.mkdir(exist_ok=True)
    p = bindir / name
    p.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    p.chmod(0o755)


def test_recipe_requirements(tmp_path, monkeypatch, fake_rocm, fake_gpu, capsys):
    fake_gpu(110501)
    bindir = tmp_path / "bin"
    _program(bindir, "fakecc", "fakecc (GCC) 12.2.0")
    _program(bindir, "noversion", "no digits here")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    r = tmp_path / "req.toml"
    r.write_text(
        'name = "req"\n[source]\ngit = "https://example.invalid/x.git"\n'
        '[requires]\nprograms = ["git", "cmake>=3.10", "cmake>=99.0", "no-such-program-xyz", "fakecc>=12.1",'
        ' "fakecc>=13", "noversion>=1.0"]\n'
        'paths = ["$ROCM_PATH/bin/hipcc", "${ROCM_PATH}/lib/missing.so"]\n'
    )
    checks = doctor.check_requirements(recipe.load(str(r)))
    got = {c.name: c.status for c in checks}
    assert got == {
        "requires git": "ok",
        "requires cmake>=3.10": "ok",
        "requires cmake>=99.0": "fail",
        "requires no-such-program-xyz": "fail",
        "requires fakecc>=12.1": "ok",
        "requires fakecc>=13": "fail",
        "requires noversion>=1.0": "warn",
        "requires path $ROCM_PATH/bin/hipcc": "ok",
        "requires path ${ROCM_PATH}/lib/missing.so": "fail",
    }
    by = _by_name(checks)
    assert "older than the required 99.0" in by["requires cmake>=99.0"].detail and by["requires cmake>=99.0"].fix
    assert "12.2.0" in by["requires fakecc>=13"].detail
    assert str(fake_rocm / "lib" / "missing.so") in by["requires path ${ROCM_PATH}/lib/missing.so"].detail
    # the same through the CLI, with the recipe given as a path
    code, data = _json(capsys, ["doctor", str(r)])
    assert code == EXIT_INPUT
    assert {"requires cmake>=99.0", "requires no-such-program-xyz"} <= set(data["failed"])


def test_recipe_requirements_satisfied(tmp_path, fake_rocm, fake_gpu, target_env, capsys, any_disk):
    fake_gpu(110501)
    env = target_env("3.5.1")
    r = tmp_path / "ok.toml"
    r.write_text('[source]\ngit = "https://example.invalid/x.git"\n[requires]\nprograms = ["cmake>=3.10", "git"]\n')
    code, data = _json(capsys, ["doctor", str(r), "--env", str(env.prefix)])
    assert code == EXIT_OK, [c for c in data["checks"] if c["status"] == "fail"]


def test_doctor_text_and_real_subprocess(fake_rocm, fake_gpu, target_env):
    fake_gpu(110501)
    env = target_env("3.5.1")
    if any(c.status == "fail" for c in doctor.run(env=str(env.prefix))):
        pytest.skip("a check fails on this machine (e.g. low disk): the subprocess run would exit 2")
    exe = shutil.which("rocmbuild")
    argv = [exe] if exe else [sys.executable, "-m", "rocmbuild"]
    done = subprocess.run(argv + ["doctor", "--env", str(env.prefix)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[  ok] GPU architecture: gfx1151" in done.stdout
    bad = subprocess.run(argv + ["doctor", "--json"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ROCM_PATH": str(fake_rocm / "missing")})
    assert bad.returncode == EXIT_INPUT and json.loads(bad.stdout)["ok"] is False


def test_a_host_that_builds_nothing_does_not_fail_on_rocm_or_compilers(tmp_path, monkeypatch, fake_gpu, capsys,
                                                                       any_disk):
    """Issue 27, item 3: a fleet host that only pulls (``--require-cache``) and a prebuilt recipe
    (``cudnn-9.25``) need no ROCm, compiler or cmake: what is missing warns, saying why, and doctor
    exits 0; the same host asked about building MIOpen still fails."""
    fake_gpu()
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "git").symlink_to(shutil.which("git"))
    monkeypatch.setenv("PATH", str(bindir))  # git only: no cmake, no make, no compiler
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    code, data = _json(capsys, ["doctor", "miopen-3.5.1"])
    assert code == EXIT_INPUT and "ROCm" in data["failed"] and "cmake" in data["failed"]  # building needs them

    code, data = _json(capsys, ["doctor", "miopen-3.5.1", "--require-cache"])
    assert code == EXIT_OK, data["failed"]
    checks = _by_name(data["checks"])
    for name in ("ROCm", "cmake", "C++ compiler", "requires ${HIPCC}"):
        assert checks[name]["status"] == "warn", checks[name]
        assert "(not needed: --require-cache" in checks[name]["detail"], checks[name]
    assert "compiler cache" not in checks  # ccache only matters to a host that compiles

    code, data = _json(capsys, ["doctor", "cudnn-9.25"])
    assert code == EXIT_OK, data["failed"]
    checks = _by_name(data["checks"])
    assert checks["ROCm"]["status"] == "ok" and "cuDNN" in checks["ROCm"]["detail"]
    assert "GPU architecture" not in checks  # no AMD GPU is needed for cuDNN
    assert checks["cmake"]["status"] == "warn" and "prebuilt" in checks["cmake"]["detail"]
