"""rocmbuild against the real PyPI torch (CUDA build, no GPU needed): what it says about the target
is what that torch really does, and a real cuDNN library set is swapped, verified and rolled back.

Every expectation here is read from the real torch by the test itself (a separate process, its
own /proc/self/maps), never written down from an earlier run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import REPO, rb

pytestmark = pytest.mark.slow

TRUTH = r"""
import json, torch
first = None
try:
    first = torch.backends.cudnn.version()
except RuntimeError as exc:
    first = "RuntimeError: " + str(exc).splitlines()[0]
second = torch.backends.cudnn.version()
maps = sorted({l.split()[5] for l in open("/proc/self/maps") if len(l.split()) >= 6 and "libcudnn" in l.split()[5]})
print(json.dumps({"first": first, "second": second, "maps": maps, "torch": torch.__version__,
                  "runtime": list(torch._C._cudnn.getRuntimeVersion()),
                  "compile": list(torch._C._cudnn.getCompileVersion())}))
"""


def truth(env: Path) -> dict:
    """What the real torch in ``env`` says and maps, asked directly (not through rocmbuild)."""
    r = subprocess.run([str(env / "bin" / "python"), "-c", TRUTH], capture_output=True, text=True, timeout=300,
                       start_new_session=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def cudnn_dir(env: Path) -> Path:
    (d,) = env.glob("lib/python3*/site-packages/nvidia/cudnn/lib")
    return d


def listing(d: Path) -> dict[str, tuple]:
    """name -> (kind, inode, sha256 or link text) for every entry of the cuDNN lib dir."""
    out = {}
    for p in sorted(d.iterdir()):
        if p.is_symlink():
            out[p.name] = ("link", os.readlink(p))
        else:
            out[p.name] = ("file", p.stat().st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def recipe_for(version: str, wheel: Path, tmp_path: Path) -> Path:
    """The bundled cudnn-9.25 recipe, pointed at a local copy of the wheel (and, for another
    version, its name, version and sha256 changed the way a user would write it)."""
    text = (REPO / "recipes" / "cudnn-9.25.toml").read_text()
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if version != "9.25.1":
        text = text.replace('name = "cudnn-9.25"', f'name = "cudnn-{version}"').replace('"9.25.1"', f'"{version}"')
    lines = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if key in ("archive", "tarball"):
            line = f'archive = "{wheel}"'
        elif key == "sha256":
            line = f'sha256 = "{sha}"'
        lines.append(line)
    out = tmp_path / "recipes" / f"cudnn-{version}.toml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return out


def as_json(r: subprocess.CompletedProcess) -> dict:
    assert r.stdout.strip(), r.stderr[-3000:]
    return json.loads(r.stdout)


def test_status_verify_doctor_tell_the_truth(torch_env):
    t = truth(torch_env)
    assert t["second"] == 92400 and t["compile"] == [9, 24, 0], t
    status = as_json(rb("status", "--env", torch_env, "--json"))
    assert status["torch"]["backend"] == "cudnn"
    assert status["torch"]["version_int_retry"] == t["second"]
    assert status["torch"]["runtime_version"] == ".".join(map(str, t["runtime"]))
    assert status["torch"]["compile_version"] == ".".join(map(str, t["compile"]))
    seen = sorted(lib["path"] for lib in status["libraries"] if lib["kind"] == "cudnn")
    assert seen == t["maps"], (seen, t["maps"])
    verify = rb("verify", "--env", torch_env, "--json")
    v = as_json(verify)
    assert verify.returncode == 0 and v["failures"] == [], v
    doctor = rb("doctor", "--env", torch_env, "--json")
    d = as_json(doctor)
    failed = [c for c in d["checks"] if c["status"] == "fail" and c["name"].startswith(("target", "ROCm"))]
    assert not failed, failed  # a healthy CUDA torch: no "more than one cuDNN", no ROCm required


def test_apply_925_makes_torch_report_it_and_rollback_restores_every_file(torch_env, cudnn_wheel, tmp_path):
    d = cudnn_dir(torch_env)
    before = listing(d)
    recipe = recipe_for("9.25.1", cudnn_wheel("9.25.1"), tmp_path)
    r = rb("apply", recipe, "--env", torch_env, "--json")
    out = as_json(r)
    assert r.returncode == 0, out
    t = truth(torch_env)  # a fresh process
    assert t["second"] == 92501 and t["runtime"] == [9, 25, 1], t
    assert all(str(d) in p for p in t["maps"]), t["maps"]  # still the env's own set, now the new files
    again = rb("apply", recipe, "--env", torch_env, "--json")
    assert again.returncode == 0 and as_json(again)["already_applied"] is True
    back = rb("rollback", "--env", torch_env, "--json")
    assert back.returncode == 0, back.stderr[-3000:]
    assert listing(d) == before  # every file byte for byte, and the very same inodes
    assert truth(torch_env)["second"] == 92400


def test_a_923_set_under_a_torch_compiled_against_924_is_refused_before_anything_changes(
        torch_env, cudnn_wheel, tmp_path):
    d = cudnn_dir(torch_env)
    before = listing(d)
    recipe = recipe_for("9.23.2", cudnn_wheel("9.23.2"), tmp_path)
    r = rb("apply", recipe, "--env", torch_env, "--json")
    out = as_json(r)
    assert r.returncode == 2, out
    assert "9.23" in out["error"]["message"] and "9.24" in out["error"]["message"], out["error"]
    assert listing(d) == before
    assert not (torch_env / ".rocmbuild" / "journal").exists() or not list((torch_env / ".rocmbuild" / "journal").glob("*.json"))


def test_a_hand_replaced_graph_library_fails_verification(torch_env, cudnn_wheel, tmp_path, real_torch_venv):
    recipe = recipe_for("9.25.1", cudnn_wheel("9.25.1"), tmp_path)
    assert rb("apply", recipe, "--env", torch_env).returncode == 0
    d = cudnn_dir(torch_env)
    old = cudnn_dir(real_torch_venv) / "libcudnn_graph.so.9"  # the 9.24 one
    tmp = d / ".libcudnn_graph.so.9.hand"
    shutil.copy2(old, tmp)
    os.replace(tmp, d / "libcudnn_graph.so.9")  # by rename: the cached venv is never written
    t = truth(torch_env)
    assert t["second"] == 92400, t  # the version now comes from the old graph library
    r = rb("verify", "--env", torch_env, "--expect", "9.25.1", "--json")
    v = as_json(r)
    assert r.returncode == 4, v
    failed = v["error"]["details"]["failures"]
    assert "version" in failed, failed  # torch's own call answers 92400, not 9.25.1
    st = as_json(rb("status", "--env", torch_env, "--json"))
    assert any("libcudnn_graph.so.9" in x["path"] for x in st["changes"]["drift"]), st["changes"]


def test_the_smoke_suite_passes_on_the_cpu(torch_env, monkeypatch):
    monkeypatch.setenv("ROCMBUILD_SMOKE_DEVICE", "cpu")
    r = rb("verify", "--env", torch_env, "--smoke", "--json")
    v = as_json(r)
    assert r.returncode == 0, v["failures"]
    smoke = [c for c in v["checks"] if c["name"].startswith("smoke")]
    assert len(smoke) >= 6, [c["name"] for c in v["checks"]]
    assert all(c["ok"] and not c["skipped"] for c in smoke), smoke
