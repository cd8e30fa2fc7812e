"""The key is what changes the bytes: editing a hint, the description or ``[verify]`` reuses the
artifact (no compiler runs), a define makes a new one; ``[verify]`` is read from the recipe at
apply time; the launcher (``auto``: ccache with its own cache dir) never changes the key.
Real git, cmake, ninja and gcc on the fixture monorepo."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rocmbuild import doctor, recipe as recipe_mod
from rocmbuild.builder import pipeline
from rocmbuild.store import cache
from rocmbuild.errors import RecipeError
from rocmbuild.flows import build as build_flow
from rocmbuild.home import cache_home
from tests.support.cli import rb
from tests.support.recipes import write_fixture_recipe


def _recipe(tmp_path: Path, url: str, **kw) -> Path:
    path = write_fixture_recipe(tmp_path / "recipes", url=url, description="the fixture", generator="Ninja",
                                programs=["cmake", "git"], **kw)
    path.write_text(path.read_text() + '\n[requires.hints]\ncmake = "apt install cmake"\n')
    return path


def _build(recipe: Path) -> dict:
    done = rb("build", recipe, "--json", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _untouched(log: str) -> tuple:
    """What a compile would move: the build dir (removed after success) and the log's bytes/time,
    and which log is the recipe's newest (logs/<recipe>/latest.log)."""
    newest = sorted(Path(log).parent.glob("*.log"))
    return (sorted(p.name for p in (cache_home() / "build").iterdir()), Path(log).stat().st_mtime_ns,
            Path(log).read_bytes(), [p.name for p in newest])


@pytest.mark.parametrize("edit", [
    ('description = "the fixture"', 'description = "a better description"'),
    ('cmake = "apt install cmake"', 'cmake = "pip install cmake (or apt install cmake)"'),
    ('version = "source"', 'version = "3.6.0"'),
    ('[verify]', '[verify]\nsmoke = "batchnorm"'),
])
def test_editing_what_does_not_change_the_bytes_is_a_cache_hit(tmp_path, monorepo, edit):
    path = _recipe(tmp_path, monorepo.url)
    first = _build(path)
    assert first["cached"] is False
    before = _untouched(first["log"])
    assert edit[0] in path.read_text()
    path.write_text(path.read_text().replace(*edit))
    second = _build(path)
    assert second["cached"] is True and second["key"] == first["key"]
    assert _untouched(first["log"]) == before  # no configure, no compile: nothing was logged


def test_a_define_makes_a_new_key(tmp_path, monorepo):
    path = _recipe(tmp_path, monorepo.url, defines={"MIOPEN_FIXTURE_PAD_MB": 0})
    first = _build(path)
    path.write_text(path.read_text().replace("MIOPEN_FIXTURE_PAD_MB = 0", "MIOPEN_FIXTURE_PAD_MB = 1"))
    second = _build(path)
    assert second["cached"] is False and second["key"] != first["key"]


def test_the_key_holds_no_requires_verify_or_description(tmp_path):
    path = _recipe(tmp_path, "file:///unused")
    inp = cache.inputs(recipe_mod.load(str(path)), commit="a" * 40, home=cache_home())
    data = inp.to_json()
    assert not {"requires", "verify", "description"} & set(data["recipe"])
    assert {"source", "build", "install", "name"} <= set(data["recipe"])
    assert "launcher" not in data["recipe"]["build"] and "generator" in data["recipe"]["build"]


def test_verify_comes_from_the_recipe_at_apply_time(tmp_path, monorepo):
    """A cached artifact served for a recipe carries the recipe's current [verify] (in memory: the
    sealed manifest on disk is not rewritten); a fixed version it does not have is refused before
    any swap (exit 2: the recipe contradicts its source), still without compiling."""
    path = _recipe(tmp_path, monorepo.url)
    built = _build(path)
    on_disk = (Path(built["artifact"]) / "manifest.json").read_bytes()
    path.write_text(path.read_text().replace('version = "source"', 'version = "3.6.0"\nsmoke = "batchnorm"'))
    art = build_flow.build_recipe(recipe_mod.load(str(path)))
    assert art.cached and art.manifest.expect_version == "3.6.0" and art.manifest.smoke == "batchnorm"
    assert (Path(built["artifact"]) / "manifest.json").read_bytes() == on_disk
    path.write_text(path.read_text().replace('version = "3.6.0"', 'version = "3.5.1"'))
    with pytest.raises(RecipeError, match="expects 3.5.1"):
        build_flow.build_recipe(recipe_mod.load(str(path)))
    done = rb("build", path, "--json")
    assert done.returncode == 2 and "3.5.1" in json.loads(done.stdout)["error"]["message"]
    assert not (cache_home() / "build").exists() or not list((cache_home() / "build").iterdir())


def test_an_exported_bundle_carries_the_current_verify(tmp_path, monorepo):
    path = _recipe(tmp_path, monorepo.url)
    _build(path)
    path.write_text(path.read_text().replace('version = "source"', 'version = "3.6.0"'))
    done = rb("export", path, "-o", tmp_path / "out", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    import tarfile

    with tarfile.open(json.loads(done.stdout)["file"]) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/manifest.json"))
        manifest = json.loads(tf.extractfile(member).read())
    assert manifest["expect_version"] == "3.6.0"


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed")
def test_launcher_auto_uses_ccache_with_its_own_dir_and_none_turns_it_off(tmp_path, monorepo):
    path = _recipe(tmp_path, monorepo.url)
    r = recipe_mod.load(str(path))
    assert r.build.launcher is None and pipeline.check_launcher(r) == shutil.which("ccache")
    use = pipeline.launcher(r, cache_home())
    assert dict(use.env) == {"CCACHE_DIR": str(cache_home() / "ccache"), "CCACHE_BASEDIR": str(cache_home())}
    auto_key = cache.inputs(r, commit="a" * 40, home=cache_home()).key
    for name in ("none", "ccache", "auto"):
        other = recipe_mod.apply_overrides(r, recipe_mod.Overrides(launcher=name))
        assert cache.inputs(other, commit="a" * 40, home=cache_home()).key == auto_key
    none = recipe_mod.apply_overrides(r, recipe_mod.Overrides(launcher="none"))
    assert pipeline.check_launcher(none) is None
    assert pipeline.launcher(recipe_mod.apply_overrides(r, recipe_mod.Overrides(launcher="ccache")),
                            cache_home()).env == ()  # a named ccache keeps the user's configuration
    plan = json.loads(rb("plan", path, "--json").stdout)
    assert f"-DCMAKE_C_COMPILER_LAUNCHER:FILEPATH={shutil.which('ccache')}" in plan["commands"]["configure"]
    _build(path)
    assert any((cache_home() / "ccache").rglob("*")), "the build's compiles went through ccache's own dir"
    path.write_text(path.read_text().replace('generator = "Ninja"', 'generator = "Ninja"\nlauncher = "none"'))
    plan = json.loads(rb("plan", path, "--json").stdout)
    assert not any("LAUNCHER" in a for a in plan["commands"]["configure"])


def test_doctor_recommends_ccache_for_a_long_recipe_without_it(tmp_path, monkeypatch):
    path = _recipe(tmp_path, "file:///unused")
    r = recipe_mod.load(str(path))  # libMIOpen: a long build
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    check = doctor.check_launcher_for(r)
    assert check is not None and check.status == "warn" and "ccache" in check.fix
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    if shutil.which("ccache"):
        assert doctor.check_launcher_for(r).status == "ok"
    off = recipe_mod.apply_overrides(r, recipe_mod.Overrides(launcher="none"))
    assert doctor.check_launcher_for(off) is None
