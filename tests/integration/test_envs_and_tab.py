"""Conda envs by name as conda and mamba find them, and completion that asks rocmbuild at Tab time.

Real processes throughout: fake ``conda``/``micromamba`` executables on PATH print the JSON the
real tools print, a real ``.condarc`` names an envs dir, and the completion scripts run in a real
bash, zsh and fish, each offering a recipe and a transaction made after the script was.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_first_contact import BASH_DRIVER, _no_conda_path, rocmbuild_on_path
from tests.support.cli import rb
from tests.support.recipes import write_fixture_recipe


def _env(path: Path) -> Path:
    """A conda-shaped env (``conda-meta/``, ``bin/python``) that ``history`` can open."""
    (path / "conda-meta").mkdir(parents=True)
    (path / "bin").mkdir()
    (path / "bin" / "python").symlink_to(sys.executable)
    return path


def _tool(bindir: Path, name: str, argv: list[str], listing: dict | None, *, exit_code: int = 0) -> None:
    """An executable ``name`` printing ``listing`` as JSON when called with exactly ``argv``."""
    bindir.mkdir(parents=True, exist_ok=True)
    exe = bindir / name
    exe.write_text(f"#!{sys.executable}\nimport json, sys\n"
                   f"if sys.argv[1:] != {argv!r}: sys.exit(9)\n"
                   f"print(json.dumps({listing!r}) if {listing!r} is not None else 'not json')\n"
                   f"sys.exit({exit_code})\n")
    exe.chmod(0o755)


@pytest.fixture
def conda_world(tmp_path):
    """conda with its own list, micromamba with another, a .condarc envs_dir, MAMBA_ROOT_PREFIX."""
    home = tmp_path / "home"
    croot = _env(tmp_path / "conda-root")
    from_conda = _env(croot / "envs" / "torch-conda")
    mroot = _env(tmp_path / "mamba-root")
    from_mamba = _env(mroot / "envs" / "torch-mamba")
    root_only = _env(mroot / "envs" / "unlisted")  # not in micromamba's list: MAMBA_ROOT_PREFIX/envs
    from_rc = _env(tmp_path / "team" / "envs" / "shared-torch")
    home.mkdir()
    (home / ".condarc").write_text("channels:\n  - conda-forge\nenvs_dirs:\n"
                                   f"  - {tmp_path}/team/envs   # the team's\n")
    bindir = tmp_path / "bin"
    _tool(bindir, "conda", ["info", "--envs", "--json"],
          {"conda_prefix": str(croot), "root_prefix": str(croot), "envs": [str(croot), str(from_conda)],
           "envs_dirs": [str(croot / "envs")], "active_prefix": None})
    _tool(bindir, "micromamba", ["env", "list", "--json"], {"envs": [str(mroot), str(from_mamba)]})
    env = {"PATH": f"{bindir}{os.pathsep}{_no_conda_path(tmp_path)}", "HOME": str(home),
           "MAMBA_ROOT_PREFIX": str(mroot), "CONDA_EXE": "", "MAMBA_EXE": "", "CONDARC": "", "XDG_CONFIG_HOME": ""}
    want = {"base": croot, "torch-conda": from_conda, "torch-mamba": from_mamba, "unlisted": root_only,
            "shared-torch": from_rc}
    return env, want, bindir


def _found(env: dict, name: str = "nope") -> dict:
    r = rb("history", "-n", name, "--json", env=env)
    assert r.returncode == 2, r.stderr
    return json.loads(r.stdout)["error"]


def test_every_source_is_asked_and_an_unknown_name_says_where_and_did_you_mean(conda_world):
    env, want, _ = conda_world
    err = _found(env, "torch-mamb")
    assert err["type"] == "TargetError"
    assert err["details"]["found"] == {k: str(v) for k, v in sorted(want.items())}
    where = " ".join(err["details"]["looked_in"])
    assert "`conda info --envs`" in where and "`micromamba env list`" in where and "team/envs" in where
    assert "did you mean 'torch-mamba'" in err["hint"]
    for name, prefix in want.items():
        r = rb("history", "-n", name, "--json", env=env)
        assert r.returncode == 0, (name, r.stderr)
        assert json.loads(r.stdout)["prefix"] == str(prefix), name


def test_a_failing_or_hanging_tool_is_skipped_and_the_files_still_answer(conda_world, tmp_path):
    env, want, bindir = conda_world
    _tool(bindir, "conda", ["info", "--envs", "--json"], None)  # prints no JSON
    _tool(bindir, "micromamba", ["env", "list", "--json"], {"envs": []}, exit_code=1)
    err = _found(env)
    found = err["details"]["found"]
    assert "torch-conda" not in found and "torch-mamba" in found  # micromamba's root/envs still searched
    assert found["shared-torch"] == str(want["shared-torch"]) and found["unlisted"] == str(want["unlisted"])
    assert "`conda" not in " ".join(err["details"]["looked_in"])
    assert "did you mean" not in err["hint"]


# --------------------------------------------------------------------------------------------
# completion at Tab time


@pytest.fixture
def tab_world(tmp_path, conda_world):
    env, want, bindir = conda_world
    rocmbuild_on_path(bindir)
    recipes = tmp_path / "recipes"
    write_fixture_recipe(recipes, "mini-early")
    hist = want["torch-mamba"] / ".rocmbuild"
    hist.mkdir()
    (hist / "history.jsonl").write_text(json.dumps({"id": "0001", "verb": "apply"}) + "\n")
    work = tmp_path / "work"
    (work / "dir-here").mkdir(parents=True)
    return {**env, "ROCMBUILD_RECIPES": str(recipes)}, work, recipes, hist


def _later(recipes: Path, hist: Path) -> None:
    """What happens after the script was made: a new recipe, a new transaction."""
    write_fixture_recipe(recipes, "mini-later")
    with (hist / "history.jsonl").open("a") as f:
        f.write(json.dumps({"id": "0002", "verb": "rollback", "undoes": ["0001"]}) + "\n")


def _script(env: dict, shell: str, dest: Path) -> Path:
    r = rb("completion", shell, env=env)
    assert r.returncode == 0, r.stderr
    dest.write_text(r.stdout)
    return dest


def _run(argv: list[str], work: Path, env: dict) -> list[str]:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=work, env={**os.environ, **env}, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    return [w for w in done.stdout.splitlines() if w]


def test_bash_asks_at_tab_time(tmp_path, tab_world):
    env, work, recipes, hist = tab_world
    script = _script(env, "bash", tmp_path / "rocmbuild.bash")
    _later(recipes, hist)

    def c(line):
        return _run(["bash", "--norc", "--noprofile", "-c", BASH_DRIVER, "bash", str(script), line], work, env)

    assert c("rocmbuild apply mini-") == ["mini-early", "mini-later"]
    assert c("rocmbuild status -n torch-") == ["torch-conda", "torch-mamba"]
    assert c("rocmbuild rollback -n torch-mamba --to ") == ["0002", "0001"]
    assert c("rocmbuild rollback --to 0") == []  # no target on the line, none active
    assert c("rocmbuild apply x --env dir") == ["dir-here"]
    assert c("rocmbuild completion f") == ["fish"]
    assert c("rocmbuild cache ") == ["dir", "verify", "list", "rm", "gc"]  # the action first, then a recipe
    assert c("rocmbuild cache rm mini-e") == ["mini-early"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_asks_at_tab_time(tmp_path, tab_world):
    from tests.integration.test_first_contact import ZSH_DRIVER

    env, work, recipes, hist = tab_world
    script = _script(env, "zsh", tmp_path / "_rocmbuild")
    _later(recipes, hist)

    def c(line):
        return _run(["zsh", "-f", "-c", ZSH_DRIVER, "zsh", str(script), line], work, env)

    assert c("rocmbuild apply mini-") == ["mini-early", "mini-later", "<files -g *.toml>"]
    assert c("rocmbuild status --name shared") == ["shared-torch"]
    assert c("rocmbuild rollback --env " + str(hist.parent) + " --to ") == ["0002", "0001"]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_asks_at_tab_time(tmp_path, tab_world):
    env, work, recipes, hist = tab_world
    script = _script(env, "fish", tmp_path / "rocmbuild.fish")
    _later(recipes, hist)

    def c(line):
        return _run(["fish", "--no-config", "-c", f"source {script}; complete -C {line!r}"], work, env)

    assert c("rocmbuild apply mini-") == ["mini-early", "mini-later"]
    assert "rollback" in c("rocmbuild ro")
    assert c("rocmbuild status -n torch-m") == ["torch-mamba"]
    assert sorted(c("rocmbuild rollback -n torch-mamba --to ")) == ["0001", "0002"]  # fish sorts them
    assert [w.split("\t")[0] for w in c("rocmbuild apply x --env dir")] == ["dir-here/"]  # fish's own dirs
