"""Build once, apply everywhere: export on one "machine", apply --artifact on another without
cmake or compilers; lock files; apply --dry-run; the provisioning examples."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import REPO, rb
from tests.support.project import set_marker
from tests.support.snapshots import snapshot

pytestmark = pytest.mark.usefixtures("txn_home")


def rocmbuild(*argv: str, env: dict[str, str] | None = None, home: Path | None = None) -> subprocess.CompletedProcess:
    e = dict(env or {})
    if home is not None:
        e["ROCMBUILD_HOME"] = str(home)
    return rb(*argv, env=e)


def out(proc: subprocess.CompletedProcess) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def lib_version(env) -> str:

    code = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); a=[ctypes.c_size_t() for _ in range(3)]; "
            "l.miopenGetVersion(*[ctypes.byref(x) for x in a]); print('.'.join(str(x.value) for x in a))")
    lib = env.prefix / "lib" / "libMIOpen.so.1"
    if not lib.exists():
        lib = env.torch_dir / "lib" / "libMIOpen.so"
    return subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True,
                          check=True).stdout.strip()


def no_build_tools_path(tmp_path: Path) -> str:
    """A PATH with none of cmake, make, ninja, cc, c++, gcc, g++, git: an "apply-only" machine."""
    empty = tmp_path / "bare-bin"
    empty.mkdir(exist_ok=True)
    for tool in ("cmake", "make", "ninja", "cc", "c++", "gcc", "g++", "git"):
        assert shutil.which(tool, path=str(empty)) is None
    return str(empty)


def test_two_machines_build_export_then_apply_without_compilers(txn_world, target_env, tmp_path):
    # machine A: has the build cache (built once per session) and exports the artifact
    bundle = tmp_path / "ship" / "mini.tar.gz"
    exp = rocmbuild("export", txn_world.recipe("mini"), "-o", str(bundle), "--json", home=txn_world.home)
    assert exp.returncode == 0, exp.stderr
    info = out(exp)
    assert Path(info["file"]).is_file() and Path(info["sha256_file"]).is_file()
    # readable by whoever serves or copies it (a web server, ansible's copy), not mkstemp's 0600
    assert [Path(info[k]).stat().st_mode & 0o777 for k in ("file", "sha256_file")] == [0o644, 0o644]

    # machine B: a fresh home, no cmake / compilers / git on PATH, a target with the stock 3.5.0
    env_b = target_env("3.5.0", layout="conda", compile_version="3.5.0")
    before = snapshot(env_b.prefix)
    home_b = tmp_path / "machine-b-home"
    e = dict(PATH=no_build_tools_path(tmp_path), ROCMBUILD_HOME=str(home_b))
    r = rocmbuild("apply", "--artifact", str(bundle), "--env", str(env_b.prefix), "--json", env=e)
    assert r.returncode == 0, r.stderr
    res = out(r)
    assert res["ok"] and res["already_applied"] is False and res["txn"]
    assert lib_version(env_b) == "3.5.1"
    assert snapshot(env_b.prefix) != before
    # the same bundle again: the provisioning no-op
    again = out(rocmbuild("apply", "--artifact", str(bundle), "--env", str(env_b.prefix), "--json", env=e))
    assert again["ok"] and again["already_applied"] is True
    # and rollback works on machine B too
    rb = rocmbuild("rollback", "--env", str(env_b.prefix), "--json", env=e)
    assert rb.returncode == 0, rb.stderr
    assert snapshot(env_b.prefix) == before


def test_export_by_key_and_unknown_key(txn_world, tmp_path):
    key = txn_world.artifacts["mini"].key
    r = rocmbuild("export", key[:12], "-o", str(tmp_path), "--json", home=txn_world.home)
    assert r.returncode == 0, r.stderr
    assert out(r)["key"] == key
    r = rocmbuild("export", "deadbeefdeadbeef", "-o", str(tmp_path), "--json", home=txn_world.home)
    assert r.returncode == 2 and "unknown recipe" in out(r)["error"]["message"]


def test_apply_artifact_url_with_bad_checksum_changes_nothing(txn_world, target_env, tmp_path):
    bundle = tmp_path / "mini.tar.gz"
    assert rocmbuild("export", txn_world.recipe("mini"), "-o", str(bundle), home=txn_world.home).returncode == 0
    env = target_env("3.5.0", compile_version="3.5.0")
    before = snapshot(env.prefix)
    r = rocmbuild("apply", "--artifact", str(bundle), "--sha256", "0" * 64, "--env", str(env.prefix), "--json",
                  home=tmp_path / "b")
    assert r.returncode == 3 and "sha256 mismatch" in out(r)["error"]["message"]
    assert snapshot(env.prefix) == before


def test_lock_then_apply_from_lock_builds_the_locked_commit(txn_world, target_env, monorepo, tmp_path):
    recipe = tmp_path / "pinned.toml"
    recipe.write_text(Path(txn_world.recipe("mini")).read_text().replace('name = "mini"', 'name = "pinned"')
                      .replace(txn_world.artifacts["mini"].manifest.url, monorepo.url)
                      .replace('ref = "rocm-7.1.0"', 'ref = "feature/fix"'))
    lock_file = tmp_path / "pinned.lock.json"
    r = rocmbuild("lock", str(recipe), "-o", str(lock_file), "--json")
    assert r.returncode == 0, r.stderr
    assert out(r)["lock"]["commit"] == monorepo.c_fix

    # upstream moves on: feature/fix gets a new commit; the lock still builds c_fix
    import git

    repo = git.Repo(monorepo.path)
    repo.git.checkout("-q", "feature/fix")
    set_marker(monorepo.path / "projects" / "miopen", "moved-on")
    repo.git.commit("-q", "-am", "moved on")

    env = target_env("3.5.0", compile_version="3.5.0")
    r = rocmbuild("apply", "--from-lock", str(lock_file), "--env", str(env.prefix), "--json")
    assert r.returncode == 0, r.stderr
    res = out(r)
    assert res["ok"] and lib_version(env) == "3.5.1"
    manifest = json.loads((Path(res["artifact"]) / "manifest.json").read_text())
    assert manifest["commit"] == monorepo.c_fix

    # overrides cannot be mixed with a lock; a changed recipe is refused
    r = rocmbuild("apply", "--from-lock", str(lock_file), "--ref", "develop", "--env", str(env.prefix), "--json")
    assert r.returncode == 2
    recipe.write_text(recipe.read_text().replace("jobs = 2", "jobs = 1"))
    r = rocmbuild("build", "--from-lock", str(lock_file), "--json")
    assert r.returncode == 2 and "changed since the lock" in out(r)["error"]["message"]


def test_apply_dry_run_changes_nothing(txn_world, target_env, tmp_path):
    env = target_env("3.5.0", compile_version="3.5.0")
    before = snapshot(env.prefix)
    r = rocmbuild("apply", txn_world.recipe("mini"), "--env", str(env.prefix), "--dry-run", "--json",
                  home=txn_world.home)
    assert r.returncode == 0, r.stderr
    d = out(r)
    assert d["dry_run"] is True and d["build"]["cache"]["cached"] is True
    paths = [a["path"] for a in d["target_plan"]["plan"]["actions"]]
    assert any(p.endswith("lib/libMIOpen.so.1.0") for p in paths)
    assert snapshot(env.prefix) == before
    assert not (env.prefix / ".rocmbuild").exists()  # not even a lock or a journal

    # with a bundle: checked, unpacked in a temp dir, nothing changes (not even the cache)
    bundle = tmp_path / "mini.tar.gz"
    assert rocmbuild("export", txn_world.recipe("mini"), "-o", str(bundle), home=txn_world.home).returncode == 0
    fresh = tmp_path / "fresh-home"
    r = rocmbuild("apply", "--artifact", str(bundle), "--env", str(env.prefix), "--dry-run", home=fresh)
    assert r.returncode == 0, r.stderr
    assert "dry run" in r.stdout and "libMIOpen.so.1.0" in r.stdout
    assert snapshot(env.prefix) == before
    assert not (fresh / "artifacts").exists()


def _provision(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "examples" / "provision.sh")], capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL)


def test_provision_script_applies_once_and_is_idempotent(txn_world, target_env, tmp_path):
    bundle = tmp_path / "mini.tar.gz"
    assert rocmbuild("export", txn_world.recipe("mini"), "-o", str(bundle), home=txn_world.home).returncode == 0
    shim = tmp_path / "rocmbuild-bin"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rocmbuild "$@"\n')
    shim.chmod(0o755)
    target = target_env("3.5.0", compile_version="3.5.0")
    e = dict(os.environ, ROCMBUILD_BIN=str(shim), ROCMBUILD_ENV=str(target.prefix),
             ROCMBUILD_ARTIFACT=str(bundle), ROCMBUILD_HOME=str(tmp_path / "node-home"), PYTHONPATH=str(REPO))
    first = _provision(e)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("rocmbuild: ok apply") and lib_version(target) == "3.5.1"
    txn = json.loads(rocmbuild("history", "--env", str(target.prefix), "--json").stdout)["transactions"][-1]["id"]
    assert first.stdout.splitlines() == [f"rocmbuild: ok apply changed env={target.prefix} source=artifact:{bundle} "
                                         f"txn={txn} version=3.5.0->3.5.1 exit=0"]
    second = _provision(e)  # every boot
    assert second.returncode == 0 and second.stdout.startswith("rocmbuild: ok")
    assert second.stdout.splitlines() == [f"rocmbuild: ok apply unchanged env={target.prefix} source=artifact:{bundle} "
                                          "txn=none version=3.5.1 exit=0"]
    bad = _provision(dict(e, ROCMBUILD_ENV=str(tmp_path / "no-such-env")))
    assert bad.returncode == 2 and "exit=2" in bad.stdout
    unset = _provision({k: v for k, v in e.items() if k != "ROCMBUILD_ENV"})
    assert unset.returncode == 2


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-core is not installed")
@pytest.mark.parametrize("playbook", ["rollout.yml", "rollback.yml"])
def test_ansible_playbooks_parse(playbook):
    ans = REPO / "examples" / "ansible"
    r = subprocess.run(["ansible-playbook", "--syntax-check", "-i", str(ans / "inventory.example.ini"),
                        str(ans / playbook)], capture_output=True, text=True, cwd=ans)
    assert r.returncode == 0, r.stdout + r.stderr
