"""``rocmbuild demo``: the real command, start to end (real cmake, a real venv, real rocmbuild
processes, a real failpoint exit), its scratch dir, ``--keep``, ``--json`` and its refusals."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from rocmbuild.proc import runner
from tests.support.cli import rb

STEPS = ["doctor", "plan", "apply", "status", "crash", "status-after-crash", "recover", "rollback"]
VERSION_CHECK = "import torch; print(torch.backends.cudnn.version())"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _left_processes(scratch: str) -> list[runner.Process]:
    return [p for p in runner.processes() if scratch in p.command or (p.cwd or "").startswith(scratch)]


@pytest.fixture
def tmpdir_env(tmp_path) -> tuple[Path, dict[str, str]]:
    """A TMPDIR of the test's own, so what the demo leaves in it can be listed."""
    d = tmp_path / "tmp"
    d.mkdir()
    return d, {"TMPDIR": str(d)}


def test_demo_runs_the_workflow_prints_each_step_and_leaves_nothing(tmpdir_env):
    tmp, env = tmpdir_env
    r = rb("demo", env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    err = r.stderr
    for line in ("$ rocmbuild doctor miopen-demo.toml --env env", "$ rocmbuild plan miopen-demo.toml",
                 "$ rocmbuild apply miopen-demo.toml --env env", "$ rocmbuild status --env env",
                 "$ ROCMBUILD_FAILPOINTS=mid-swap rocmbuild rollback --env env", "$ rocmbuild recover --env env"):
        assert line in err, line
    # the steps' real output, in order
    order = [err.index(s) for s in ("applied 0001-", "failpoint mid-swap: exiting with 137",
                                    "UNFINISHED rollback 0002-", "recovered interrupted rollback 0002-",
                                    "rolled back 0001-")]
    assert order == sorted(order)
    assert "check FAILED" not in err and err.count("check ok:") >= 10
    assert "demo passed" in r.stdout
    for name in STEPS:
        assert f" {name} " in r.stdout, name
    # nothing left: the scratch dir is gone, and no process of it runs
    scratch = err.split("rocmbuild demo in ", 1)[1].split(" ", 1)[0]
    assert scratch.startswith(str(tmp)) and not Path(scratch).exists()
    assert list(tmp.iterdir()) == []
    assert _left_processes(scratch) == []


def test_demo_keep_json_is_one_object_and_ends_with_the_stock_library(tmp_path):
    keep = tmp_path / "kept" / "demo"
    r = rb("demo", "--keep-dir", keep, "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    obj, end = json.JSONDecoder().raw_decode(r.stdout)
    assert r.stdout[end:].strip() == ""
    assert obj["ok"] is True and obj["verb"] == "demo" and obj["exit_code"] == 0
    assert obj["kept"] is True and obj["scratch"] == str(keep.resolve()) and obj["failed_step"] is None
    assert [s["name"] for s in obj["steps"]] == STEPS
    codes = {s["name"]: (s["exit_code"], s["expected_exit_code"]) for s in obj["steps"]}
    assert codes["crash"] == (137, 137) and codes["apply"] == (0, 0) and codes["rollback"] == (0, 0)
    assert obj["steps"][4]["env"] == {"ROCMBUILD_FAILPOINTS": "mid-swap"}
    assert all(s["ok"] and all(c["ok"] for c in s["checks"]) for s in obj["steps"])
    # --json: quiet, but for the progress events (JSON lines on stderr, docs/json.md)
    assert all(json.loads(line)["event"] in ("phase", "progress") for line in r.stderr.splitlines()), r.stderr

    # kept: the env's torch/lib holds the stock library again, byte for byte, and loads 3.5.0
    (site,) = keep.glob("env/lib/python3*/site-packages")
    lib = site / "torch" / "lib" / "libMIOpen.so"
    (stock,) = (keep / "stock" / "install" / "lib").glob("libMIOpen.so.1.0.*")
    assert lib.is_file() and not lib.is_symlink() and _sha(lib) == _sha(stock)
    assert "THE ROCMBUILD DEMO STAND-IN, NOT PYTORCH" in (site / "torch" / "__init__.py").read_text()
    out = subprocess.run([str(keep / "env" / "bin" / "python"), "-c", VERSION_CHECK], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "3005000"
    assert not (site / "torch" / "share").exists()  # the applied perf db is gone with the rollback
    history = (keep / "env" / ".rocmbuild" / "history.jsonl").read_text().splitlines()
    assert [json.loads(h)["verb"] for h in history][-1] == "rollback"
    assert _left_processes(str(keep)) == []

    # the README's CPU smoke test in the demo world (issue 27, item 6): what the stand-in torch
    # cannot run is skipped, saying so, never blamed on the library; each hint is said once
    env = {"ROCMBUILD_HOME": str(keep / "home"), "ROCMBUILD_SMOKE_DEVICE": "cpu"}
    v = rb("verify", "--env", keep / "env", "--smoke", "--json", env=env)
    assert v.returncode == 0, v.stdout + v.stderr
    checks = {c["name"]: c for c in json.loads(v.stdout)["checks"]}
    assert checks["smoke: install"]["ok"] and not checks["smoke: install"]["skipped"]  # what it can run, it runs
    for name in ("smoke", "smoke: matmul", "smoke: training"):
        assert checks[name]["ok"] and checks[name]["skipped"], checks[name]
        assert "this torch cannot run it: AttributeError" in checks[name]["found"], checks[name]
    assert "computes wrong results" not in v.stdout
    text = rb("verify", "--env", keep / "env", "--smoke", env=env)
    assert text.returncode == 0 and text.stdout.count("stand-in torch is not PyTorch") == 1, text.stdout


@pytest.mark.parametrize("how", ["non-empty", "a file", "a symlink to a non-empty dir"])
def test_demo_keep_refuses_a_directory_that_is_not_new_or_empty(tmp_path, how):
    target = tmp_path / "mine"
    target.mkdir()
    canary = target / "canary.txt"
    canary.write_text("the user's file")
    arg = target
    if how == "a file":
        arg = canary
    elif how == "a symlink to a non-empty dir":
        arg = tmp_path / "link"
        arg.symlink_to(target)
    r = rb("demo", "--keep-dir", arg, "--json")
    assert r.returncode == 2, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "InputError" and "not an empty directory" in err["message"]
    assert sorted(p.name for p in target.iterdir()) == ["canary.txt"] and canary.read_text() == "the user's file"


def test_demo_keep_with_a_name_too_long_is_a_clear_error(tmp_path):
    r = rb("demo", "--keep-dir", tmp_path / ("d" * 300), "--json")
    assert r.returncode == 2, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "SystemLimitError" and "too long" in err["message"]
    assert list(tmp_path.iterdir()) == []


def test_demo_without_cmake_fails_clearly_before_making_anything(tmpdir_env, tmp_path):
    tmp, env = tmpdir_env
    bindir = tmp_path / "bin"  # a PATH with everything the demo needs but cmake
    bindir.mkdir()
    for prog in ("git", "make", "cc"):
        found = runner.which(prog)
        assert found, prog
        (bindir / prog).symlink_to(found)
    r = rb("demo", "--json", env={**env, "PATH": str(bindir)})
    assert r.returncode == 2, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "RequirementError"
    assert "cmake" in err["message"] and "not found on PATH" in err["message"]
    assert "apt install cmake" in err["hint"] and err["details"]["missing"] == ["cmake"]
    assert "error:" in r.stderr and "hint:" in r.stderr
    assert list(tmp.iterdir()) == []  # nothing was created


def test_demo_without_a_c_compiler_names_it(tmpdir_env, tmp_path):
    tmp, env = tmpdir_env
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for prog in ("git", "make", "cmake"):
        (bindir / prog).symlink_to(runner.which(prog))
    r = rb("demo", "--json", env={**env, "PATH": str(bindir), "CC": ""})
    assert r.returncode == 2
    err = json.loads(r.stdout)["error"]
    assert "C compiler" in err["message"] and "apt install gcc" in err["hint"]
    assert list(tmp.iterdir()) == []


def test_a_failed_check_fails_loudly_and_keeps_the_scratch_dir(tmp_path, mocker, capsys):
    """A fault injected into the version check: the demo exits 1 naming the step and what was
    found, lists the steps so far, and keeps its dir for the report."""
    from rocmbuild.cli.app import main
    from rocmbuild.flows.demo import demostep

    mocker.patch.object(demostep, "loaded_version", return_value=3006000)  # the env answers the wrong number
    keep = tmp_path / "scratch"
    code = main(["demo", "--keep", str(keep), "--json"])  # the old name of --keep-dir still works
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["exit_code"] == 1 and out["ok"] is False
    assert out["failed_step"] == "doctor" and [s["name"] for s in out["steps"]] == ["doctor"]
    assert "demo step 'doctor' failed" in out["error"]["message"] and "3006000" in out["error"]["message"]
    assert str(keep.resolve()) in out["error"]["hint"] and keep.is_dir()


def test_a_kept_demo_says_how_to_go_on_there_with_its_own_cache_home(tmp_path):
    """Item 10 of the what-users-see issue: after `demo --keep-dir DIR` the text names the demo's
    own ROCMBUILD_HOME and the commands to try, in DIR; a removed scratch dir names none."""
    from rocmbuild.cli import demotext
    from rocmbuild.results import DemoResult

    d = str(tmp_path / "my demo")
    text = demotext._demo(DemoResult((), d, True, 4.2))
    assert f"kept in {d}" in text
    assert f"cd '{d}' && export ROCMBUILD_HOME='{d}/home'" in text
    assert "rocmbuild status --env env" in text and "rocmbuild apply miopen-demo.toml --env env" in text
    assert "ROCMBUILD_HOME" not in demotext._demo(DemoResult((), d, False, 4.2))
