"""GPU targets, end to end through the real CLI: checked names, recorded targets, the refusal on
another GPU (a faked KFD topology, ``ROCMBUILD_SYSFS_ROOT``), ``--allow-other-arch``, doctor.

The bundles are real: the fixture project built by ``rocmbuild build --gpu-targets ...`` (the
define reaches CMake, which the fixture ignores) and exported with ``rocmbuild export``, once per
module in a home of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import rb
from tests.support.machine import make_rocm_tree
from tests.support.recipes import write_fixture_recipe
from tests.support.snapshots import snapshot

GFX1151 = 110501  # gfx_target_version of a Radeon 8060S (Strix Halo)
TARGET_SETS = {"gfx1100": "gfx1100", "both": "gfx1100,gfx1151", "generic": "gfx11-generic"}


def _json(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def world(_monorepo_template, tmp_path_factory):
    """{"recipe": path, "home": path, "bundles": {set name: bundle path}}: one real build and
    export per target set."""
    root = tmp_path_factory.mktemp("gpu-targets")
    home = root / "home"
    recipe = write_fixture_recipe(root / "recipes", "gpu-mini", url=_monorepo_template.url, ref="rocm-7.1.0", jobs=2)
    env = {"ROCMBUILD_HOME": str(home), "ROCMBUILD_SYSFS_ROOT": str(root / "no-gpu")}
    bundles = {}
    for name, targets in TARGET_SETS.items():
        built = rb("build", str(recipe), "--gpu-targets", targets, "--json", env=env, timeout=600)
        assert built.returncode == 0, built.stderr
        out = root / "bundles" / f"{name}.tar.gz"
        exp = rb("export", _json(built)["key"], "-o", str(out), "--json", env=env)
        assert exp.returncode == 0, exp.stderr
        bundles[name] = out
    return {"recipe": recipe, "home": home, "bundles": bundles}


def _apply(bundle: Path, env, *extra: str):
    return rb("apply", "--artifact", str(bundle), "--env", str(env.prefix), "--json", *extra)


def test_the_manifest_records_the_targets(world):
    manifest = Path(world["home"]).glob("artifacts/*/manifest.json")
    recorded = sorted(tuple(json.loads(p.read_text())["gpu_targets"]) for p in manifest)
    assert recorded == sorted([("gfx1100",), ("gfx1100", "gfx1151"), ("gfx11-generic",)])


def test_a_gfx1100_bundle_is_refused_on_gfx1151(world, target_env, fake_gpu):
    fake_gpu(GFX1151)
    env = target_env("3.5.0")
    before = snapshot(env.prefix)
    r = _apply(world["bundles"]["gfx1100"], env)
    assert r.returncode == 2, r.stderr
    err = _json(r)["error"]
    assert err["type"] == "InputError"
    assert "gfx1151" in err["message"] and "gfx1100" in err["message"] and "nothing was changed" in err["message"]
    assert "--allow-other-arch" in err["hint"] and "--gpu-targets gfx1151" in err["hint"]
    assert err["details"]["gpu_arch"] == {"status": "mismatch", "host": ["gfx1151"], "targets": ["gfx1100"],
                                          "detail": err["details"]["gpu_arch"]["detail"], "allowed_other_arch": False}
    assert snapshot(env.prefix) == before  # byte-identical: not even a state dir


def test_the_dry_run_shows_the_targets_and_the_verdict(world, target_env, fake_gpu):
    fake_gpu(GFX1151)
    env = target_env("3.5.0")
    before = snapshot(env.prefix)
    r = _apply(world["bundles"]["gfx1100"], env, "--dry-run")
    assert r.returncode == 2, r.stderr  # the same exit code as the real apply
    out = _json(r)
    assert out["artifact"]["gpu_targets"] == ["gfx1100"]
    assert out["gpu_arch"]["status"] == "mismatch" and out["target_plan"] is None
    assert out["target_error"]["details"]["gpu_arch"]["host"] == ["gfx1151"]
    text = rb("apply", "--artifact", str(world["bundles"]["gfx1100"]), "--env", str(env.prefix), "--dry-run")
    assert "built for gfx1100" in text.stdout and "GPU arch: MISMATCH" in text.stdout
    ok = _apply(world["bundles"]["generic"], env, "--dry-run")
    assert ok.returncode == 0, ok.stderr
    assert _json(ok)["gpu_arch"]["status"] == "match" and _json(ok)["target_plan"] is not None
    assert snapshot(env.prefix) == before


def test_allow_other_arch_applies_with_a_warning_and_records_it(world, target_env, fake_gpu):
    fake_gpu(GFX1151)
    env = target_env("3.5.0")
    r = _apply(world["bundles"]["gfx1100"], env, "--allow-other-arch")
    assert r.returncode == 0, r.stderr
    out = _json(r)
    assert out["txn"] and out["gpu_arch"]["status"] == "mismatch" and out["gpu_arch"]["allowed_other_arch"] is True
    assert "--allow-other-arch" in r.stderr and "gfx1151" in r.stderr  # the warning


@pytest.mark.parametrize("name", ["both", "generic"])
def test_accepted_when_the_host_is_among_the_targets(world, target_env, fake_gpu, name):
    fake_gpu(GFX1151)
    env = target_env("3.5.0")
    r = _apply(world["bundles"][name], env)
    assert r.returncode == 0, r.stderr
    out = _json(r)
    assert out["txn"] and out["gpu_arch"]["status"] == "match" and out["gpu_arch"]["host"] == ["gfx1151"]
    assert out["gpu_arch"]["targets"] == TARGET_SETS[name].split(",")
    text = rb("apply", "--artifact", str(world["bundles"][name]), "--env", str(env.prefix))  # already applied
    assert text.returncode == 0 and "GPU arch: matches" in text.stdout


def test_every_gpu_must_be_covered(world, target_env, fake_gpu):
    fake_gpu(GFX1151, 110000)  # gfx1151 and gfx1100 in one machine
    env = target_env("3.5.0")
    assert _apply(world["bundles"]["both"], env).returncode == 0
    r = _apply(world["bundles"]["gfx1100"], target_env("3.5.0"))
    assert r.returncode == 2 and "this machine's GPU is gfx1151," in _json(r)["error"]["message"]


def test_no_gpu_is_said_and_not_refused(world, target_env, fake_gpu):
    fake_gpu()
    env = target_env("3.5.0")
    r = _apply(world["bundles"]["gfx1100"], env)
    assert r.returncode == 0, r.stderr
    assert _json(r)["gpu_arch"]["status"] == "no_gpu" and "no AMD GPU found" in r.stderr


def test_a_recipe_for_another_gpu_is_refused_before_it_is_built(world, target_env, fake_gpu, tmp_path):
    fake_gpu(GFX1151)
    env = target_env("3.5.0")
    before = snapshot(env.prefix)
    r = rb("apply", str(world["recipe"]), "--gpu-targets", "gfx1030", "--env", str(env.prefix), "--json")
    assert r.returncode == 2, r.stderr
    assert "gfx1030" in _json(r)["error"]["message"] and "building" not in r.stderr
    assert not (tmp_path / "rocmbuild-home" / "artifacts").exists()  # nothing fetched or built
    assert snapshot(env.prefix) == before


@pytest.mark.parametrize("value, near", [("gfx9999", "gfx909"), ("gfx110", "gfx1100"), ("gfx1100,gfx115", "gfx1150")])
def test_unknown_gpu_targets_are_refused_with_did_you_mean(world, value, near):
    r = rb("plan", str(world["recipe"]), "--gpu-targets", value, "--json")
    assert r.returncode == 2, r.stderr
    err = _json(r)["error"]
    assert err["type"] == "InputError" and "unknown GPU architecture" in err["message"]
    assert err["hint"].startswith(f"did you mean {near}?")
    d = rb("plan", str(world["recipe"]), "-D", f"GPU_TARGETS={value.replace(',', ';')}")
    assert d.returncode == 2 and f"did you mean {near}?" in d.stderr


def test_a_recipe_naming_an_unknown_gpu_is_refused(tmp_path):
    path = write_fixture_recipe(tmp_path, "typo", defines={"AMDGPU_TARGETS": ["gfx1100", "gfx1151:xnack+", "gfx9999"]})
    r = rb("plan", str(path), "--json")
    assert r.returncode == 2, r.stderr
    err = _json(r)["error"]
    assert err["type"] == "RecipeError" and err["details"]["key"] == "build.defines.AMDGPU_TARGETS"
    assert "gfx9999" in err["message"] and "did you mean" in err["hint"]
    ok = write_fixture_recipe(tmp_path, "features", defines={"GPU_TARGETS": "gfx90a:xnack-;gfx908:sramecc+:xnack-"})
    assert rb("plan", str(ok), "--json").returncode == 0


def _gpu_checks(proc) -> dict:
    return {c["name"]: c for c in _json(proc)["checks"] if c["name"].startswith("GPU")}


def test_doctor_names_the_match(world, fake_gpu, tmp_path, monkeypatch):
    fake_gpu(GFX1151)
    monkeypatch.setenv("ROCM_PATH", str(make_rocm_tree(tmp_path / "rocm")))
    generic = write_fixture_recipe(tmp_path, "generic", defines={"GPU_TARGETS": "gfx11-generic"})
    other = write_fixture_recipe(tmp_path, "other", defines={"GPU_TARGETS": ["gfx1100", "gfx942"]})
    auto = write_fixture_recipe(tmp_path, "auto", defines={"GPU_TARGETS": "auto"})
    checks = _gpu_checks(rb("doctor", str(generic), "--json"))
    assert checks["GPU architecture"]["detail"].startswith("gfx1151")
    assert checks["GPU targets"]["status"] == "ok" and checks["GPU targets"]["detail"].startswith("match:")
    assert "gfx11-generic" in checks["GPU targets"]["detail"]
    mis = _gpu_checks(rb("doctor", str(other), "--json"))["GPU targets"]
    assert mis["status"] == "warn" and mis["detail"].startswith("mismatch:") and "gfx1100, gfx942" in mis["detail"]
    assert "--gpu-targets gfx1151" in mis["fix"]
    assert _gpu_checks(rb("doctor", str(auto), "--json"))["GPU targets"]["detail"].startswith("match:")
    plain = _gpu_checks(rb("doctor", "--json"))["GPU targets"]
    assert plain["status"] == "ok" and "gfx1151" in plain["detail"]
    text = rb("doctor", str(other))
    assert "GPU targets" in text.stdout + text.stderr and "mismatch" in text.stdout + text.stderr
