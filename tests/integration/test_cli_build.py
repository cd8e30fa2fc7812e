"""`rocmbuild build / plan / recipes / show` end to end: real git monorepo, real cmake builds."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmbuild.proc import runner
from rocmbuild.cli import app as cli
from rocmbuild.home import cache_home
from tests.support.recipes import write_fixture_recipe

PATCH = """--- a/src/miopen.c
+++ b/src/miopen.c
@@ -24 +24 @@
-const char* miopenFixtureMarker(void) { return "stock"; }
+const char* miopenFixtureMarker(void) { return "patched"; }
"""


def write_recipe(tmp_path: Path, url: str, extra_source: str = "", cmake_req: str = "cmake>=3.16") -> Path:
    return write_fixture_recipe(tmp_path / "recipes", description="miniature MIOpen from the fixture monorepo",
                                url=url, source_extra=extra_source, generator="Ninja",
                                defines={"MIOPEN_FIXTURE_PAD_MB": 0}, programs=[cmake_req, "git"])


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def marker(artifact_path: str, rel: str = "lib/libMIOpen.so.1.0") -> str:
    lib = ctypes.CDLL(str(Path(artifact_path) / "tree" / rel))
    lib.miopenFixtureMarker.restype = ctypes.c_char_p
    return lib.miopenFixtureMarker().decode()


def test_build_then_cache_hit_without_compiling(tmp_path, monorepo, capsys, mocker):
    recipe = write_recipe(tmp_path, monorepo.url)
    code, first = run_json(capsys, "build", str(recipe))
    assert code == 0 and first["ok"] and first["verb"] == "build"
    assert first["cached"] is False
    assert first["commit"] == monorepo.c_develop and first["version"] == "3.6.0"
    assert first["libraries"][0]["chain"] == ["libMIOpen.so", "libMIOpen.so.1", "libMIOpen.so.1.0"]
    # sparse + partial: the other projects are not in the work tree
    src = cache_home() / "src"
    (tree,) = [p for p in src.iterdir() if p.is_dir() and not p.name.endswith(".git")]
    assert (tree / "projects" / "miopen" / "CMakeLists.txt").is_file()
    assert not (tree / "projects" / "rocblas").exists()

    spy = mocker.spy(runner, "run")
    cap = mocker.spy(runner, "capture")
    code, second = run_json(capsys, "build", str(recipe))
    assert code == 0 and second["cached"] is True and second["key"] == first["key"]
    assert spy.call_count == 0  # no configure, no compile, no install
    assert all("cc" not in Path(c.args[0][0]).name and "c++" not in c.args[0][0] for c in cap.call_args_list)


def test_ref_overrides_select_versions(tmp_path, monorepo, capsys):
    recipe = write_recipe(tmp_path, monorepo.url)
    code, rel = run_json(capsys, "build", str(recipe), "--ref", "release/rocm-rel-7.0")
    assert code == 0 and rel["version"] == "3.5.0" and rel["commit"] == monorepo.c_release
    code, tag = run_json(capsys, "build", str(recipe), "--ref", "rocm-7.1.0")
    assert code == 0 and tag["version"] == "3.5.1" and tag["commit"] == monorepo.c1
    code, sha = run_json(capsys, "build", str(recipe), "--ref", monorepo.c1[:10])
    assert code == 0 and sha["commit"] == monorepo.c1 and sha["cached"] is True  # same inputs as the tag


def test_source_override_uses_another_remote(tmp_path, monorepo, capsys):
    recipe = write_recipe(tmp_path, "https://example.invalid/unreachable.git")
    code, out = run_json(capsys, "build", str(recipe), "--source", str(monorepo.path), "--ref", "rocm-7.1.0")
    assert code == 0 and out["version"] == "3.5.1"


def test_cherry_pick_and_patch_are_built_in(tmp_path, monorepo, capsys):
    recipe = write_recipe(tmp_path, monorepo.url, f'cherry_pick = ["{monorepo.c_fix}"]')
    code, out = run_json(capsys, "build", str(recipe), "--ref", "release/rocm-rel-7.0")
    assert code == 0 and marker(out["artifact"]) == "fixed" and out["version"] == "3.5.0"

    pdir = tmp_path / "recipes" / "patches" / "mini"
    pdir.mkdir(parents=True)
    (pdir / "0001-marker.patch").write_text(PATCH)
    recipe = write_recipe(tmp_path, monorepo.url, 'patches = ["0001-marker.patch"]')
    code, out = run_json(capsys, "build", str(recipe), "--ref", "rocm-7.1.0")
    assert code == 0 and marker(out["artifact"]) == "patched"


def test_define_override_rebuilds(tmp_path, monorepo, capsys):
    recipe = write_recipe(tmp_path, monorepo.url)
    _, a = run_json(capsys, "build", str(recipe), "--ref", "rocm-7.1.0")
    _, b = run_json(capsys, "build", str(recipe), "--ref", "rocm-7.1.0", "-D", "MIOPEN_FIXTURE_PAD_MB=1")
    assert a["key"] != b["key"] and b["cached"] is False
    assert (Path(b["artifact"]) / "tree/lib/libMIOpen.so.1.0").stat().st_size > 1024 * 1024


def test_unknown_ref_exit_3(tmp_path, monorepo, capsys):
    recipe = write_recipe(tmp_path, monorepo.url)
    code, out = run_json(capsys, "build", str(recipe), "--ref", "no-such-branch")
    assert code == 3 and out["ok"] is False and out["exit_code"] == 3
    assert "no-such-branch" in out["error"]["message"]
    assert not (cache_home() / "artifacts").exists() or not [
        p for p in (cache_home() / "artifacts").iterdir() if not p.name.startswith(".")]


def test_missing_requirement_exit_2_before_fetching(tmp_path, monorepo, capsys):
    recipe = write_recipe(tmp_path, monorepo.url, cmake_req="cmake>=99.0")
    code, out = run_json(capsys, "build", str(recipe))
    assert code == 2 and "cmake" in out["error"]["message"]
    assert not (cache_home() / "src").exists()  # nothing fetched


def test_bad_recipe_exit_2_nothing_fetched(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text('[source]\ngit = "x"\n[biuld]\njobs = 1\n')
    code, out = run_json(capsys, "build", str(p))
    assert code == 2 and "did you mean 'build'" in out["error"]["hint"]
    assert not cache_home().exists() or not (cache_home() / "src").exists()


def test_plan_changes_nothing_and_lists_commands(tmp_path, monorepo, capsys):
    recipe = write_recipe(tmp_path, monorepo.url)
    code, plan = run_json(capsys, "plan", str(recipe), "--gpu-targets", "gfx1151", "-D", "X=1")
    assert code == 0
    assert plan["source"]["commit"] == monorepo.c_develop
    configure = plan["commands"]["configure"]
    assert configure[0] == "cmake" and "-DGPU_TARGETS:STRING=gfx1151" in configure and "-DX:STRING=1" in configure
    assert plan["commands"]["build"][:2] == ["cmake", "--build"]
    assert plan["cache"]["key"] and plan["cache"]["cached"] is False
    assert not (cache_home() / "src").exists() and not (cache_home() / "artifacts").exists()


def test_plan_offline_and_unreachable(tmp_path, capsys):
    recipe = write_recipe(tmp_path, "file:///nonexistent/repo.git")
    code, plan = run_json(capsys, "plan", str(recipe))
    assert code == 0 and plan["source"]["resolved"] is False and plan["cache"]["key"] is None
    assert any("unresolved" in n for n in plan["notes"])
    code, plan = run_json(capsys, "plan", str(recipe), "--offline")
    assert code == 0 and plan["source"]["commit"] is None
    assert plan["commands"]["configure"][0] == "cmake"


def test_recipes_and_show(tmp_path, monorepo, capsys):
    write_recipe(tmp_path, monorepo.url)
    code, out = run_json(capsys, "recipes", "--recipes-dir", str(tmp_path / "recipes"))
    names = [r["name"] for r in out["recipes"]]
    assert code == 0 and names[0] == "mini" and "miopen-develop" in names
    code, out = run_json(capsys, "show", "mini", "--recipes-dir", str(tmp_path / "recipes"))
    assert code == 0 and out["recipe"]["source"]["subdir"] == "projects/miopen"
    code, out = run_json(capsys, "show", "mimi", "--recipes-dir", str(tmp_path / "recipes"))
    assert code == 2 and "did you mean 'mini'" in out["error"]["hint"]


def test_a_mistyped_recipe_beside_a_recipe_file_suggests_that_file(tmp_path, monorepo, capsys, monkeypatch):
    """Issue 27, item 5: in the demo's directory, ``plan miopen-demo.tom`` (or ``miopen-demo``)
    suggests ``./miopen-demo.toml``, not the bundled ``miopen-develop``."""
    here = tmp_path / "demo"
    here.mkdir()
    write_recipe(tmp_path, monorepo.url).rename(here / "miopen-demo.toml")
    monkeypatch.chdir(here)
    for typed in ("miopen-demo.tom", "miopen-demo"):
        code, out = run_json(capsys, "show", typed)
        assert code == 2 and out["error"]["hint"].startswith("did you mean './miopen-demo.toml'"), out["error"]
        assert "miopen-develop'?" not in out["error"]["hint"]
    code, out = run_json(capsys, "show", "./miopen-dem.toml")
    assert code == 2 and "did you mean 'miopen-demo.toml'?" in out["error"]["hint"], out["error"]
    code, out = run_json(capsys, "show", "./miopen-demo.toml")
    assert code == 0 and out["recipe"]["name"] == "mini"


def test_console_script_version_and_usage_errors(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rocmbuild", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("rocmbuild ")
    r = subprocess.run([sys.executable, "-m", "rocmbuild", "build", "--json"], capture_output=True, text=True)
    assert r.returncode == 2
    assert json.loads(r.stdout)["error"]["message"]  # one JSON object on stdout, even for usage errors


def test_fixed_expected_version_checked_before_compiling(tmp_path, monorepo, capsys):
    recipe = write_recipe(tmp_path, monorepo.url)
    recipe.write_text(recipe.read_text().replace('version = "source"', 'version = "3.5.1"'))
    code, out = run_json(capsys, "build", str(recipe), "--ref", "develop")  # develop is 3.6.0
    assert code == 2 and "3.6.0" in out["error"]["message"] and "3.5.1" in out["error"]["message"]
    assert not (cache_home() / "build").exists()  # nothing was configured


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed (.ci/run installs it)")
def test_ccache_launcher_really_caches_compiles(tmp_path, monorepo, capsys, monkeypatch):
    """--launcher ccache: two builds with different rocmbuild keys (a define the sources do not
    use) compile the same sources, and the second one's compiles are ccache hits."""
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    recipe = write_recipe(tmp_path, monorepo.url)
    code, first = run_json(capsys, "build", str(recipe), "--ref", "rocm-7.1.0", "--launcher", "ccache")
    assert code == 0 and first["cached"] is False
    code, second = run_json(capsys, "build", str(recipe), "--ref", "rocm-7.1.0", "--launcher", "ccache",
                            "-D", "UNUSED_BY_THE_SOURCES=1")
    assert code == 0 and second["cached"] is False and second["key"] != first["key"]
    stats = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True, check=True).stdout
    counters = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
    hits = int(counters.get("direct_cache_hit", 0)) + int(counters.get("preprocessed_cache_hit", 0))
    assert hits >= 1, stats
