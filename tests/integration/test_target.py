"""Targets, the probe and verification against real venvs with a fake torch loading real libraries.

Real: venvs, libMIOpen builds (cmake), dlopen, /proc/self/maps, subprocesses, timeouts.
Not real: the GPU (there is none: the smoke test must report "skipped: no GPU").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.version import Version

from rocmbuild.cli import app as cli
from rocmbuild.errors import EXIT_INPUT, EXIT_OK, EXIT_VERIFY, TargetError
from rocmbuild.environment.probe import run_probe
from rocmbuild.environment.verify import compatible, judge
from rocmbuild.environment.versions import decode_version
from rocmbuild.environment.target import discover, discover_at, resolve

pytestmark = pytest.mark.slow


def _same_file(lib, path: Path) -> bool:
    st = os.stat(path)
    return (lib.dev, lib.inode) == (st.st_dev, st.st_ino)


# ----------------------------------------------------------------------------- layouts


def test_conda_layout_reports_the_real_file(target_env):
    env = target_env("3.5.1", layout="conda")
    t = discover(env=str(env.prefix))
    lib = t.library("miopen")
    assert lib.path == os.path.realpath(env.prefix / "lib" / "libMIOpen.so.1.0")
    assert _same_file(lib, env.libfile) and not lib.deleted and lib.sha256 is None
    assert t.layout() == "conda" and t.inside_prefix(lib.path)
    assert [p.name for p in t.links_to(Path(lib.path))] == ["libMIOpen.so", "libMIOpen.so.1"]
    assert t.state_dir == env.prefix / ".rocmbuild"
    assert t.report.version_int == 3005001 and decode_version(t.report.version_int, "miopen") == Version("3.5.1")
    assert t.report.hip == "7.0.51831" and t.report.cuda is None and t.report.cuda_available is False
    assert judge(t.report, expect="3.5.1", expected_file=env.prefix / "lib" / "libMIOpen.so.1").ok


def test_wheel_layout_reports_the_plain_file(target_env):
    env = target_env("3.5.1", layout="wheel")
    t = discover(env=str(env.prefix))
    lib = t.library()
    assert lib.path == str(env.site_packages / "torch" / "lib" / "libMIOpen.so")
    assert _same_file(lib, env.libfile)
    assert t.layout() == "wheel" and t.links_to(Path(lib.path)) == ()
    assert not (env.prefix / "lib" / "libMIOpen.so.1.0").exists()


def test_hash_only_when_asked(target_env):
    env = target_env("3.5.1")
    r = run_probe(env.python, want_hash=True)
    assert r.loaded()[0].sha256 == hashlib.sha256(env.libfile.read_bytes()).hexdigest()


def test_stdout_noise_from_torch_does_not_break_the_report(target_env):
    env = target_env("3.5.1", print_noise=True)
    assert run_probe(env.python).torch_version == "2.7.1+rocm7.0"


# ----------------------------------------------------------------------------- versions


def test_patch_difference_is_compatible(target_env):
    env = target_env("3.5.1", compile_version="3.5.0")
    r = run_probe(env.python)
    assert r.version_int == 3005001 and r.version_error is None
    assert r.runtime_version == (3, 5, 1) and r.compile_version == (3, 5, 0)
    v = judge(r, expect="3.5.1")
    assert v.ok, v.render()
    assert compatible("3.5.1", r).ok


def test_minor_difference_is_incompatible(target_env):
    env = target_env("3.6.0", compile_version="3.5.1")
    r = run_probe(env.python)
    # exactly PyTorch's behaviour: the first call raises, the second returns the number
    assert r.version_int is None
    assert "cuDNN version incompatibility" in r.version_error and r.version_error.startswith("RuntimeError")
    assert r.version_int_retry == 3006000
    v = judge(r, expect="3.6.0")
    assert [c.name for c in v.failures()] == ["compatibility"]
    msg = v.failures()[0].message
    assert "RuntimeError" in msg and "3.5" in msg and "miopen-3.5.1" in msg
    assert not compatible("3.6.0", r).ok and compatible("3.5.1", r).ok


def test_two_libmiopen_loaded(target_env, tmp_path):
    env = target_env("3.5.1")
    second = env.prefix / "opt" / "libMIOpen.so.1.0"
    second.parent.mkdir()
    shutil.copy2(env.libfile, second)
    env.configure(extra_libs=[second])
    t = discover(env=str(env.prefix))
    assert len(t.report.loaded("miopen")) == 2
    v = judge(t.report, expect="3.5.1")
    assert [c.name for c in v.failures()] == ["library"]
    assert "exactly one" in v.failures()[0].expected
    with pytest.raises(TargetError):
        t.library()


def test_library_outside_the_prefix(target_env, fixture_libs):
    env = target_env("3.5.1")
    outside = fixture_libs("3.5.1") / "libMIOpen.so.1"
    env.configure(load=str(outside))
    t = discover(env=str(env.prefix))
    lib = t.library()
    assert lib.path == os.path.realpath(outside)
    assert not t.inside_prefix(lib.path) and t.layout() == "outside"


# ----------------------------------------------------------------------------- failures


def test_no_torch(target_env):
    env = target_env("3.5.1", torch=False)
    with pytest.raises(TargetError) as ei:
        discover(env=str(env.prefix))
    assert ei.value.exit_code == EXIT_INPUT and "torch is not installed" in ei.value.message


def test_torch_that_fails_to_import(target_env):
    env = target_env("3.5.1", import_error="libamdhip64.so.7: cannot open shared object file")
    with pytest.raises(TargetError) as ei:
        discover(env=str(env.prefix))
    assert ei.value.exit_code == EXIT_INPUT
    assert "import torch" in ei.value.message and "libamdhip64.so.7: cannot open shared object file" in ei.value.message


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def test_probe_timeout_kills_the_probe(target_env):
    env = target_env("3.5.1", sleep=60)
    start = time.monotonic()
    with pytest.raises(TargetError) as ei:
        discover(env=str(env.prefix), timeout=1.5)
    assert time.monotonic() - start < 20
    assert "--probe-timeout" in ei.value.hint and ei.value.exit_code == EXIT_INPUT
    assert _processes_mentioning(str(env.prefix)) == []


# ----------------------------------------------------------------------------- cuDNN, smoke


@pytest.mark.parametrize("version, number, compile_version", [("8.9.7", 8907, "8.9.0"), ("9.1.0", 90100, "9.1.0")])
def test_cudnn_decoding(target_env, version, number, compile_version):
    env = target_env(version, backend="cudnn", hip=None, cuda="12.4", compile_version=compile_version,
                     torch_version="2.5.1+cu124")
    r = run_probe(env.python)
    assert r.version_int == number and r.loaded("cudnn")[0].path.endswith("libcudnn.so.9.0.0")
    assert decode_version(r.version_int, "cudnn") == Version(version)
    v = judge(r, library="libcudnn", encoding="cudnn", expect=version)
    assert v.ok, v.render()


def test_smoke_is_skipped_without_gpu_never_passed(target_env):
    env = target_env("3.5.1")
    r = run_probe(env.python, smoke=True)
    assert r.smoke.status == "skipped" and r.smoke.reason == "no GPU"
    v = judge(r, smoke=True, expect="3.5.1")
    smoke = [c for c in v.checks if c.name == "smoke"][0]
    assert smoke.ok and smoke.skipped and smoke.found == "skipped: no GPU"


# ----------------------------------------------------------------------------- resolving the target


def test_wrong_env_paths(tmp_path):
    with pytest.raises(TargetError, match="does not exist"):
        resolve(env=str(tmp_path / "nope"))
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(TargetError, match="not a directory"):
        resolve(env=str(f))
    with pytest.raises(TargetError, match="no bin/python"):
        resolve(env=str(tmp_path))


def test_python_that_does_not_run(tmp_path):
    bad = tmp_path / "python"
    bad.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    bad.chmod(0o755)
    with pytest.raises(TargetError, match="does not run") as ei:
        resolve(python=str(bad))
    assert ei.value.exit_code == EXIT_INPUT
    with pytest.raises(TargetError):
        resolve(python=str(tmp_path / "missing-python"))
    with pytest.raises(TargetError, match="does not exist|not executable"):
        run_probe(tmp_path / "missing-python")


def test_python_option_finds_the_prefix(target_env):
    env = target_env("3.5.1")
    prefix, python = resolve(python=str(env.python))
    assert prefix == env.prefix and python == env.python


def test_default_from_conda_prefix_then_virtual_env(target_env, monkeypatch):
    a = target_env("3.5.1", name="conda-env")
    b = target_env("3.5.1", name="venv")
    with pytest.raises(TargetError, match="--env"):
        resolve()
    monkeypatch.setenv("VIRTUAL_ENV", str(b.prefix))
    assert resolve()[0] == b.prefix
    monkeypatch.setenv("CONDA_PREFIX", str(a.prefix))
    assert resolve()[0] == a.prefix


def test_expected_file_identity_fails_after_replacement_by_a_copy(target_env):
    env = target_env("3.5.1")
    placed = env.prefix / "lib" / "libMIOpen.so.1.0"
    r = run_probe(env.python)
    assert judge(r, expected_file=placed).ok
    tmp = placed.with_name(".copy")
    shutil.copy2(placed, tmp)
    os.replace(tmp, placed)  # same bytes, same path, new inode
    v = judge(r, expected_file=placed)
    assert [c.name for c in v.failures()] == ["identity"]


def _python38() -> str | None:
    """A working Python 3.8 (the oldest the probe supports), if this machine has one."""
    candidates = [os.environ.get("ROCMBUILD_TEST_PYTHON38"), shutil.which("python3.8"),
                  *sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.8*/bin/python3.8"))]
    for c in candidates:
        if c and subprocess.run([c, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                                capture_output=True).returncode == 0:
            return c
    return None


def test_probe_runs_on_python38(target_env):
    base = _python38()
    if base is None:
        pytest.skip("no Python 3.8 interpreter here (set ROCMBUILD_TEST_PYTHON38)")
    env = target_env("3.5.1", base_python=base)
    r = run_probe(env.python)
    assert r.python_version.startswith("3.8") and r.version_int == 3005001 and len(r.loaded()) == 1


# ----------------------------------------------------------------------------- CLI


def _main_json(capsys, argv):
    code = cli.main(argv + ["--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_cli_status(target_env, capsys):
    env = target_env("3.5.1", layout="wheel")
    code, data = _main_json(capsys, ["status", "--env", str(env.prefix)])
    assert code == EXIT_OK and data["ok"] and data["verb"] == "status"
    (lib,) = data["libraries"]
    assert lib["layout"] == "wheel" and lib["inside_prefix"] and lib["version"] == "3.5.1" and lib["kind"] == "miopen"
    assert data["torch"]["hip"] == "7.0.51831" and data["torch"]["compile_version"] == "3.5.1"
    assert cli.main(["status", "--env", str(env.prefix)]) == EXIT_OK
    assert "wheel" in capsys.readouterr().out


def test_cli_verify(target_env, capsys):
    env = target_env("3.5.1")
    code, data = _main_json(capsys, ["verify", "--env", str(env.prefix), "--expect", "3.5.1", "--smoke"])
    assert code == EXIT_OK and data["ok"]
    smoke = [c for c in data["checks"] if c["name"] == "smoke"][0]
    assert smoke["skipped"] and smoke["found"] == "skipped: no GPU"
    code, data = _main_json(capsys, ["verify", "--env", str(env.prefix), "--expect", "3.5.0"])
    assert code == EXIT_VERIFY and not data["ok"]
    assert data["error"]["details"]["failures"] == ["version"]
    assert "expected 3.5.0" in data["error"]["message"]


def test_cli_verify_incompatible_and_bad_target(target_env, capsys, tmp_path):
    env = target_env("3.6.0", compile_version="3.5.1")
    code, data = _main_json(capsys, ["verify", "--env", str(env.prefix)])
    assert code == EXIT_VERIFY and data["error"]["details"]["failures"] == ["compatibility"]
    assert "RuntimeError" in data["error"]["hint"]
    code, data = _main_json(capsys, ["status", "--env", str(tmp_path / "missing")])
    assert code == EXIT_INPUT and data["error"]["type"] == "TargetError"


def test_real_rocmbuild_subprocess(target_env):
    env = target_env("3.5.1")
    exe = shutil.which("rocmbuild")
    argv = [exe] if exe else [sys.executable, "-m", "rocmbuild"]
    ok = subprocess.run(argv + ["verify", "--env", str(env.prefix), "--expect", "3.5.1", "--json"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ok"] is True
    bad = subprocess.run(argv + ["verify", "--env", str(env.prefix), "--expect", "9.9.9", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == EXIT_VERIFY and json.loads(bad.stdout)["error"]["type"] == "VerifyError"
    st = subprocess.run(argv + ["status", "--env", str(env.prefix)], capture_output=True, text=True, timeout=120)
    assert st.returncode == 0 and "libMIOpen.so.1.0" in st.stdout


# ----------------------------------------------------------------------------- optional: real PyTorch


def test_real_cpu_torch_reports_no_miopen():
    python = os.environ.get("ROCMBUILD_TEST_TORCH_PYTHON")
    if not python:
        pytest.skip("set ROCMBUILD_TEST_TORCH_PYTHON to a Python with a real (CPU) torch, e.g. torch==2.13.0")
    t = discover(python=python, timeout=600)
    r = t.report
    assert r.torch_version and r.torch_error is None
    assert r.hip is None and r.cuda is None and r.loaded("miopen") == () and r.version_int is None
    v = judge(r, expect="3.5.1")
    assert not v.ok
    assert "no MIOpen/cuDNN in this torch" in " ".join(c.message for c in v.failures())
    assert "no MIOpen/cuDNN in this torch" in compatible("3.5.1", r).message


def test_user_environment_is_passed_through_and_skip_flag_hides_nothing(target_env, monkeypatch):
    """PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1 reaches the target (no RuntimeError any more), but the
    judge compares the version tuples, so the mismatch is still reported."""
    env = target_env("3.6.0", compile_version="3.5.1")
    monkeypatch.setenv("PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK", "1")
    r = run_probe(env.python)
    assert r.version_error is None and r.version_int == 3006000
    assert [c.name for c in judge(r).failures()] == ["compatibility"]


def test_an_env_whose_python_does_not_run_is_reported_by_the_probe_when_resolve_skips_it(tmp_path):
    """apply resolves with check=False (its probe follows at once, one Python start fewer): the
    probe's error names the interpreter and its exit code, exit 2, as resolve's own would."""
    (tmp_path / "env" / "bin").mkdir(parents=True)
    bad = tmp_path / "env" / "bin" / "python"
    bad.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    bad.chmod(0o755)
    prefix, exe = resolve(env=str(tmp_path / "env"), check=False)
    assert (prefix, exe) == (tmp_path / "env", bad)
    with pytest.raises(TargetError, match="does not run") as ei:
        resolve(env=str(tmp_path / "env"))
    with pytest.raises(TargetError, match=r"exit code 3") as ei:
        discover_at(prefix, exe, timeout=30)
    assert ei.value.exit_code == EXIT_INPUT and str(bad) in ei.value.message
