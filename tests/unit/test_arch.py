"""The architecture table, target IDs, the did-you-mean, and the match of targets against GPUs."""

from __future__ import annotations

import json

import pytest

from rocmbuild.store.artifact import Manifest
from rocmbuild.schema import SchemaError
from rocmbuild.errors import EXIT_INPUT, InputError, RecipeError
from rocmbuild.recipe import Overrides, apply_overrides, arch, parse
from rocmbuild.environment import gpu
from tests.support.recipes import fixture_recipe


@pytest.mark.parametrize("name", [
    "gfx803", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1010", "gfx1030", "gfx1036",
    "gfx1100", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200", "gfx1201",
    "gfx9-generic", "gfx10-3-generic", "gfx11-generic", "gfx12-generic",
    "gfx90a:xnack-", "gfx908:sramecc+:xnack-", "gfx942:xnack+",
])
def test_known_targets(name):
    assert arch.check_target(name, "--gpu-targets") == name


def test_every_detected_name_of_a_known_version_is_in_the_table():
    """The names gpu.arch_name derives from KFD versions are spelled as the table spells them."""
    for v in (80003, 90000, 90006, 90008, 90010, 90012, 90402, 90500, 100100, 100300, 110000, 110501, 120001):
        assert gpu.arch_name(v) in arch.PROCESSORS, v


@pytest.mark.parametrize("value, near", [
    ("gfx110", "gfx1100"), ("gfx9999", "gfx909"), ("gfx115", "gfx1150"), ("GFX1151", "gfx1151"),
    ("gfx11-genric", "gfx11-generic"), ("gfx1151:xnack-x", None),
])
def test_unknown_names_are_refused_with_the_nearest(value, near):
    with pytest.raises(InputError) as ei:
        arch.check_target(value, "--gpu-targets")
    assert ei.value.exit_code == EXIT_INPUT
    if near:
        assert ei.value.hint.startswith(f"did you mean {near}?") and ei.value.details["suggestions"][0] == near
        assert f"unknown GPU architecture '{value}'" in ei.value.message


@pytest.mark.parametrize("value", ["gfx90a:xnack", "gfx90a:xnack+:xnack-", "gfx90a:cumode+", "gfx90a:"])
def test_bad_features_are_refused(value):
    with pytest.raises(InputError, match="bad feature"):
        arch.check_target(value, "--gpu-targets")


def test_nothing_at_all_is_refused():
    with pytest.raises(InputError, match="no GPU architecture given"):
        arch.check_targets(" , ;", "--gpu-targets")


def test_split_and_build_targets():
    assert arch.split("gfx1100; gfx1151,gfx942") == ["gfx1100", "gfx1151", "gfx942"]
    assert arch.split(("gfx1100", "gfx1151;gfx90a")) == ["gfx1100", "gfx1151", "gfx90a"]
    assert arch.build_targets([("GPU_TARGETS", "gfx1100;gfx1151")]) == ("gfx1100", "gfx1151")
    assert arch.build_targets([("AMDGPU_TARGETS", ("gfx90a",))]) == ("gfx90a",)
    assert arch.build_targets([("AMDGPU_TARGETS", "gfx90a"), ("GPU_TARGETS", "gfx942")]) == ("gfx942",)
    assert arch.build_targets([("MIOPEN_BACKEND", "HIP")]) is None
    assert arch.build_targets([("GPU_TARGETS", "auto")]) is None
    assert arch.build_targets([("GPU_TARGETS", "auto")], auto=["gfx1151"]) == ("gfx1151",)


@pytest.mark.parametrize("target, host, ok", [
    ("gfx1151", "gfx1151", True), ("gfx1100", "gfx1151", False), ("gfx11-generic", "gfx1151", True),
    ("gfx11-generic", "gfx1030", False), ("gfx10-3-generic", "gfx1032", True), ("gfx9-generic", "gfx906", True),
    ("gfx9-generic", "gfx90a", False), ("gfx9-4-generic", "gfx942", True), ("gfx90a:xnack-", "gfx90a", True),
    ("gfx12-generic", "gfx1201", True),
])
def test_covers(target, host, ok):
    assert arch.covers(target, host) is ok


def test_match_verdicts():
    assert arch.match(("gfx1100",), ["gfx1151"]).status == arch.MISMATCH
    assert arch.match(("gfx1100",), ["gfx1151"]).refused
    m = arch.match(("gfx1100", "gfx1151"), ["gfx1151", "gfx1100"])
    assert m.status == arch.MATCH and not m.refused
    half = arch.match(("gfx1151",), ["gfx1151", "gfx1100"])  # HIP uses every GPU: each must be covered
    assert half.status == arch.MISMATCH and "gfx1100" in half.detail
    assert arch.match(("gfx1100",), []).status == arch.NO_GPU
    none = arch.match(None, ["gfx1151"])
    assert none.status == arch.UNCHECKED and not none.refused and "names no GPU targets" in none.detail
    cudnn = arch.match(None, ["gfx1151"], amd=False)  # a cuDNN artifact is never refused for its arch
    assert cudnn.status == arch.UNCHECKED and "not an AMD GPU library" in cudnn.detail
    assert json.loads(json.dumps(m.to_json())) == {
        "status": "match", "host": ["gfx1151", "gfx1100"], "targets": ["gfx1100", "gfx1151"],
        "detail": m.detail, "allowed_other_arch": False}


def _recipe(tmp_path, **defines):
    p = tmp_path / "mini.toml"
    return fixture_recipe(defines=defines or None), p


def test_overrides_check_gpu_targets_and_d(tmp_path):
    r = parse(*_recipe(tmp_path))
    assert apply_overrides(r, Overrides(gpu_targets="gfx1151, gfx11-generic")).build.define("GPU_TARGETS") == \
        "gfx1151;gfx11-generic"
    for ov in (Overrides(gpu_targets="gfx9999"), Overrides(gpu_targets="gfx110"),
               Overrides(defines=("GPU_TARGETS=gfx1100;gfx9999",)), Overrides(defines=("AMDGPU_TARGETS=gfx110",))):
        with pytest.raises(InputError, match="unknown GPU architecture"):
            apply_overrides(r, ov)
    assert apply_overrides(r, Overrides(defines=("GPU_TARGETS=auto",))).build.define("GPU_TARGETS") == "auto"


def test_a_recipe_define_is_checked(tmp_path):
    with pytest.raises(RecipeError) as ei:
        parse(*_recipe(tmp_path, GPU_TARGETS=["gfx1100", "gfx110"]))
    assert ei.value.details["key"] == "build.defines.GPU_TARGETS" and "did you mean gfx1100?" in ei.value.hint
    assert parse(*_recipe(tmp_path, GPU_TARGETS="auto")).build.define("GPU_TARGETS") == "auto"


def _manifest_json(**extra) -> dict:
    base = {"recipe": "mini", "key": "a" * 64, "version": "3.5.1", "expect_version": "3.5.1", "encoding": "miopen",
            "smoke": None, "commit": None, "ref": None, "url": "", "install_prefix": "/opt/rocm", "files": [],
            "libraries": [], "schema": 1}
    return {**base, **extra}


def test_manifest_round_trip_and_old_manifests():
    m = Manifest.from_json(_manifest_json(gpu_targets=["gfx1100", "gfx1151"]))
    assert m.gpu_targets == ("gfx1100", "gfx1151")
    assert Manifest.from_json(json.loads(json.dumps(m.to_json()))) == m
    assert Manifest.from_json(_manifest_json()).gpu_targets is None  # a manifest from before: none recorded


@pytest.mark.parametrize("bad", ["gfx1100", [1], {"a": "b"}, [None]])
def test_a_hostile_gpu_targets_is_refused(bad):
    with pytest.raises(SchemaError) as ei:  # its schema's error, never a TypeError
        Manifest.from_json(_manifest_json(gpu_targets=bad))
    assert "'gpu_targets" in str(ei.value) and "expected" in str(ei.value)
