"""``[source] contains`` (fixes by name) end to end on the real fixture monorepo, and the grep's
confinement; ``${ROCM_PATH}`` in a recipe on a faked distribution layout."""

from __future__ import annotations

import json
from pathlib import Path

import git

from rocmbuild.sources import fixes
from rocmbuild.builder import requirements
from rocmbuild.cli import app as cli
from rocmbuild.errors import EXIT_INPUT
from rocmbuild.flows import build as flow
from rocmbuild.home import cache_home
from tests.support.recipes import write_fixture_recipe

FIX = '{ name = "gfx115x batch-norm fix (rocm-libraries#1288)", grep = "MIO_BN_GFX115X", path = "src" }'


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def recipe_with(tmp_path: Path, url: str, contains: str, ref: str = "develop") -> Path:
    return write_fixture_recipe(tmp_path / "recipes", url=url, ref=ref, generator="Ninja",
                                defines={"MIOPEN_FIXTURE_PAD_MB": 0}, source_extra=f"contains = [{contains}]")


def nothing_configured() -> bool:
    home = cache_home()
    return not list((home / "build").rglob("CMakeCache.txt")) if (home / "build").exists() else True


def add_fix_commit(monorepo) -> str:
    """A commit on develop that adds the fix's define to the project's kernels."""
    repo = git.Repo(monorepo.path)
    src = monorepo.path / "projects" / "miopen" / "src" / "batchnorm_gfx115x.h"
    src.write_text("#define MIO_BN_GFX115X 1\n")
    repo.git.add("-A")
    repo.git.commit("-q", "-m", "batchnorm: gfx115x DPP fix")
    sha = repo.head.commit.hexsha
    repo.close()
    return sha


def test_a_source_without_the_fix_is_refused_before_configure(tmp_path, monorepo, capsys):
    code, data = run_json(capsys, "build", str(recipe_with(tmp_path, monorepo.url, FIX)))
    assert code == EXIT_INPUT and not data["ok"]
    err = data["error"]
    assert "gfx115x batch-norm fix (rocm-libraries#1288)" in err["message"]
    assert "'MIO_BN_GFX115X' not found in any file under src" in err["message"]
    assert err["details"]["missing"][0]["name"] == "gfx115x batch-norm fix (rocm-libraries#1288)"
    assert nothing_configured()
    assert not [p for p in (cache_home() / "artifacts").glob("*") if (p / "manifest.json").exists()]


def test_a_source_with_the_fix_builds_and_lists_it(tmp_path, monorepo, capsys):
    add_fix_commit(monorepo)
    recipe = recipe_with(tmp_path, monorepo.url, FIX)
    code, data = run_json(capsys, "build", str(recipe))
    assert code == 0, data
    assert data["fixes"] == ["gfx115x batch-norm fix (rocm-libraries#1288)"]
    manifest = json.loads((Path(data["artifact"]) / "manifest.json").read_text())
    assert manifest["fixes"] == ["gfx115x batch-norm fix (rocm-libraries#1288)"]
    assert "contains" not in manifest["inputs"]["recipe"]["source"]  # not in the key
    code, shown = run_json(capsys, "show", str(recipe))
    assert code == 0 and shown["fixes"] == ["gfx115x batch-norm fix (rocm-libraries#1288)"]
    code, plan = run_json(capsys, "plan", str(recipe))
    assert code == 0 and plan["source"]["contains"][0]["grep"] == "MIO_BN_GFX115X"
    assert plan["cache"]["cached"] is True


def test_status_lists_the_fixes_of_the_artifact_in_effect(tmp_path, monorepo, target_env, capsys):
    add_fix_commit(monorepo)
    env = target_env("3.5.1", compile_version="3.6.0")
    recipe = recipe_with(tmp_path, monorepo.url, FIX)
    code, data = run_json(capsys, "apply", str(recipe), "--env", str(env.prefix))
    assert code == 0, data
    code, status = run_json(capsys, "status", "--env", str(env.prefix))
    (txn,) = status["changes"]["in_effect"]
    assert txn["fixes"] == ["gfx115x batch-norm fix (rocm-libraries#1288)"]
    cli.main(["status", "--env", str(env.prefix)])
    assert "fixes: gfx115x batch-norm fix (rocm-libraries#1288)" in capsys.readouterr().out


def test_a_fix_added_to_the_recipe_later_is_checked_on_a_cache_hit(tmp_path, monorepo, capsys):
    plain = write_fixture_recipe(tmp_path / "recipes", url=monorepo.url, generator="Ninja",
                                 defines={"MIOPEN_FIXTURE_PAD_MB": 0})
    assert run_json(capsys, "build", str(plain))[0] == 0
    code, data = run_json(capsys, "build", str(recipe_with(tmp_path, monorepo.url, FIX)))  # same key
    assert code == EXIT_INPUT and "MIO_BN_GFX115X" in data["error"]["message"]


def test_a_commit_that_is_not_an_ancestor_names_the_tags_that_have_it(tmp_path, monorepo, capsys):
    fix = add_fix_commit(monorepo)
    repo = git.Repo(monorepo.path)
    for tag in ("rocm-7.10.0", "rocm-7.2.0", "nightly"):
        repo.create_tag(tag, ref=fix)
    repo.close()
    contains = f'{{ name = "gfx115x fix by commit", commit = "{fix}" }}'
    code, data = run_json(capsys, "build", str(recipe_with(tmp_path, monorepo.url, contains, ref="rocm-7.1.0")))
    assert code == EXIT_INPUT
    err = data["error"]
    assert f"commit {fix[:12]} is not an ancestor of the checked-out {monorepo.c1[:12]}" in err["message"]
    assert err["details"]["missing"][0]["tags"] == ["rocm-7.2.0", "rocm-7.10.0", "nightly"]
    assert "rocm-7.2.0, rocm-7.10.0, nightly" in err["hint"]
    assert nothing_configured()
    # an ancestor passes: develop contains c1
    ok = f'{{ name = "3.5.1", commit = "{monorepo.c1}" }}'
    code, data = run_json(capsys, "build", str(recipe_with(tmp_path, monorepo.url, ok)))
    assert code == 0 and data["fixes"] == ["3.5.1"]


def test_grep_follows_no_symlink_out_of_the_tree(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "k.h").write_text("MIO_BN_GFX115X\n")
    src = tmp_path / "src"
    (src / "kernels").mkdir(parents=True)
    (src / "kernels" / "link.h").symlink_to(outside / "k.h")
    (src / "kernels" / "dir").symlink_to(outside)
    (src / "out").symlink_to(outside)
    assert "not found in any file under kernels" in fixes.grep_missing(src, "kernels", "MIO_BN_GFX115X")
    assert "is a symbolic link" in fixes.grep_missing(src, "out", "MIO_BN_GFX115X")
    assert "does not exist" in fixes.grep_missing(src, "nope/x", "MIO_BN_GFX115X")
    # a string split across the chunks is found
    (src / "kernels" / "big.s").write_bytes(b"x" * (fixes.CHUNK - 3) + b"MIO_BN_GFX115X")
    assert fixes.grep_missing(src, "kernels", "MIO_BN_GFX115X") is None
    assert fixes.grep_missing(src, "kernels/big.s", "MIO_BN_GFX115X") is None


# --------------------------------------------------------------------------------------------
# ${ROCM_PATH}


def distro_machine(root: Path) -> Path:
    """Debian's layout: hipcc under /usr/bin, HIP's cmake config in the multiarch dir, no /opt/rocm."""
    hipcc = root / "usr/bin/hipcc"
    hipcc.parent.mkdir(parents=True)
    hipcc.write_text("#!/bin/sh\necho 'HIP version: 6.4.1'\n")
    hipcc.chmod(0o755)
    cfg = root / "usr/lib/x86_64-linux-gnu/cmake/hip/hip-config.cmake"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("")
    return root


def test_rocm_path_resolves_to_usr_on_a_distribution_layout(tmp_path, monkeypatch, capsys):
    root = distro_machine(tmp_path / "machine")
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.setenv("ROCMBUILD_ROOT", str(root))
    recipe = write_fixture_recipe(tmp_path / "recipes", url="file:///unused",
                                  defines={"CMAKE_CXX_COMPILER": "${ROCM_PATH}/bin/hipcc",
                                           "CMAKE_PREFIX_PATH": ["${ROCM_PATH}", "$ROCM_PATH/lib"]},
                                  env={"HIP_PATH": "${ROCM_PATH}"}, programs=["${ROCM_PATH}/bin/hipcc"])
    code, plan = run_json(capsys, "plan", str(recipe), "--offline")
    usr = str(root / "usr")
    assert code == 0, plan
    assert f"-DCMAKE_CXX_COMPILER:STRING={usr}/bin/hipcc" in plan["commands"]["configure"]
    assert f"-DCMAKE_PREFIX_PATH:STRING={usr};{usr}/lib" in plan["commands"]["configure"]
    assert plan["env"]["HIP_PATH"] == usr
    (req,) = [c for c in plan["requirements"] if "hipcc" in c["name"]]
    assert req["status"] == "ok" and req["name"] == "requires ${ROCM_PATH}/bin/hipcc" and usr in req["detail"]
    # the resolved defines are in the key: another ROCm root is another artifact
    other = tmp_path / "rocm-elsewhere"
    monkeypatch.setenv("ROCM_PATH", str(other))
    code, plan2 = run_json(capsys, "plan", str(recipe), "--offline")
    assert plan2["cache"]["inputs"]["defines"] != plan["cache"]["inputs"]["defines"]
    (req,) = [c for c in plan2["requirements"] if "hipcc" in c["name"]]
    assert req["status"] == "fail" and req["detail"] == f"{other}/bin/hipcc does not exist"


def test_a_missing_absolute_program_does_not_exist_rather_than_not_on_path(tmp_path):
    c = requirements.check_program("/opt/rocm-nowhere/bin/hipcc")
    assert c.status == "fail" and c.detail == "/opt/rocm-nowhere/bin/hipcc does not exist"
    f = tmp_path / "hipcc"
    f.write_text("")
    c = requirements.check_program(str(f))
    assert c.status == "fail" and c.detail == f"{f} is not an executable file"


def test_show_keeps_the_recipe_as_written(tmp_path, capsys):
    recipe = write_fixture_recipe(tmp_path / "recipes", url="file:///unused",
                                  defines={"CMAKE_CXX_COMPILER": "${ROCM_PATH}/bin/hipcc"})
    code, data = run_json(capsys, "show", str(recipe))
    assert code == 0 and dict(data["recipe"]["build"]["defines"]).get("CMAKE_CXX_COMPILER") == "${ROCM_PATH}/bin/hipcc"
    assert flow.load_recipe(str(recipe), resolve_auto=False).build.define("CMAKE_CXX_COMPILER") != "${ROCM_PATH}/bin/hipcc"
