"""The prebuilt recipe keys: ``[build] system``, ``[source] archive`` (alias ``tarball``), and what
goes into the cache key; plus the bundled cuDNN recipe (loaded offline, built from a local copy
of the real wheel when one is cached)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rocmbuild.store import cache
from rocmbuild.errors import RecipeError
from rocmbuild.recipe.parsing import parse
from tests.support.cli import REPO, rb
from tests.real.conftest import cache_root

SHA = "a" * 64
BASE = f'[source]\narchive = "x.whl"\nsha256 = "{SHA}"\nsubdir = "nvidia/cudnn"\n[build]\nsystem = "prebuilt"\n' \
       '[install]\nlibraries = ["libcudnn*"]\n'


def test_archive_and_its_tarball_alias_are_one_field():
    a = parse(BASE, Path("a.toml"))
    t = parse(BASE.replace("archive =", "tarball ="), Path("a.toml"))
    assert a.source.archive == t.source.archive == t.source.tarball == "x.whl"
    assert a.build.prebuilt and a.build.system == "prebuilt"
    assert parse(BASE.replace('system = "prebuilt"\n', ""), Path("a.toml")).build.system == "cmake"


@pytest.mark.parametrize("text,key,words", [
    (BASE.replace('archive = "x.whl"', 'archive = "x.whl"\ntarball = "y"'), "source", "both 'archive' and 'tarball'"),
    (BASE.replace('"prebuilt"', '"prebuild"'), "build.system", "did you mean 'prebuilt'"),
    (BASE.replace('archive = "x.whl"\nsha256 = "' + SHA + '"', 'git = "file:///r"'), "build.system", "not git"),
    (BASE + '[build.defines]\nX = "1"\n', "build.defines", "does not apply to a prebuilt build"),
    (BASE.replace('system = "prebuilt"', 'system = "prebuilt"\ngenerator = "Ninja"'), "build.generator", "prebuilt"),
    (BASE.replace('subdir', 'patches = ["a.patch"]\nsubdir'), "source.patches", "prebuilt"),
    (BASE.replace('sha256 = "' + SHA + '"', 'sha256 = "abc"'), "source.sha256", "64 hex"),
    (BASE.replace('"nvidia/cudnn"', '"../etc"'), "source.subdir", "relative path inside"),
])
def test_bad_prebuilt_recipes_are_refused_with_the_key(text, key, words):
    with pytest.raises(RecipeError) as ei:
        parse(text, Path("bad.toml"))
    assert ei.value.details["key"] == key and words in ei.value.message + ei.value.hint


def test_the_key_covers_archive_subdir_libraries_and_runs_no_tool(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no cmake, no compiler: a prebuilt key needs none
    key = lambda text: cache.inputs(parse(text, Path("a.toml")), commit=None, home=tmp_path).key  # noqa: E731
    base = key(BASE)
    assert key(BASE.replace("x.whl", "https://mirror/x.whl")) == base  # where it came from: not an input
    for changed in (BASE.replace(SHA, "b" * 64), BASE.replace("nvidia/cudnn", "nvidia/cublas"),
                    BASE.replace('["libcudnn*"]', '["libcudnn"]')):
        assert key(changed) != base
    # [verify] changes how the artifact is judged (read from the recipe at apply time), not its bytes
    assert key(BASE + '[verify]\nversion = "9.25.1"\n') == base
    inp = cache.inputs(parse(BASE, Path("a.toml")), commit=None, home=tmp_path).to_json()
    assert inp["tools"]["cmake"] == "none (prebuilt)" and inp["tarball_sha256"] == SHA
    assert not (tmp_path / "tools.json").exists()


def test_a_cmake_recipe_key_does_not_carry_the_system(tmp_path):
    text = BASE.replace('system = "prebuilt"\n', "")
    inp = cache.inputs(parse(text, Path("a.toml")), commit=None, home=tmp_path).to_json()
    assert "system" not in inp["recipe"]["build"] and "archive" not in inp["recipe"]["source"]


CUDNN = REPO / "recipes" / "cudnn-9.25.toml"
# the wheel tests/real (and .ci/run) download: one cache path for both (tests/real/conftest.py)
WHEEL = Path(os.environ.get("ROCMBUILD_CUDNN_WHEEL") or next(
    iter(sorted((cache_root() / "wheels").glob("nvidia_cudnn_cu13-9.25.1.1-*.whl"))),
    cache_root() / "wheels" / "nvidia_cudnn_cu13-9.25.1.1-py3-none-manylinux_2_27_x86_64.whl"))


def test_the_cudnn_recipe_loads_and_plans_offline():
    shown = rb("show", str(CUDNN), "--json")
    assert shown.returncode == 0, shown.stderr
    plan = rb("plan", str(CUDNN), "--offline", "--json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    data = json.loads(plan.stdout)
    assert data["commands"] == {} and data["cache"]["key"]
    assert data["source"]["subdir"] == "nvidia/cudnn" and data["source"]["url"] == "pypi:nvidia-cudnn-cu13==9.25.1.1"
    assert any("no configure, no compile" in n for n in data["notes"])


@pytest.mark.skipif(not WHEEL.is_file(), reason=f"the nvidia-cudnn-cu13 9.25.1.1 wheel is not cached at {WHEEL}")
def test_the_cudnn_recipe_builds_from_a_local_copy_of_the_real_wheel():
    r = rb("build", str(CUDNN), "--source", str(WHEEL), "--json", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    names = {lib["name"]: lib["soname"] for lib in data["libraries"]}
    assert names["libcudnn"] == "libcudnn.so.9" and names["libcudnn_graph"] == "libcudnn_graph.so.9"
    assert len(names) >= 8  # the whole libcudnn* set
    tree = Path(data["artifact"]) / "tree"
    assert sorted(os.listdir(tree)) == ["include", "lib"]


def test_the_example_debian_package_recipe_loads_and_show_names_the_package():
    """examples/recipes/miopen-3.5.1-deb.toml (the real libmiopen1 7.2.4 .deb by apt:; its build
    is the real-root tests' to run): parsed offline, and show says what it pins before any fetch."""
    path = REPO / "examples" / "recipes" / "miopen-3.5.1-deb.toml"
    r = parse(path.read_text(), path)
    assert r.build.prebuilt and r.source.archive == "apt:libmiopen1=7.2.4+dfsg-1" and r.source.subdir == "usr"
    assert r.install.libraries == ("libMIOpen",) and r.verify.version == "3.5.1"
    out = rb("show", str(path), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["package"] == {"format": "deb", "name": "libmiopen1", "version": "7.2.4+dfsg-1",
                                                  "architecture": None}
