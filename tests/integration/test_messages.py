"""Messages come out whole and once: no rich markup (nor emoji codes) eats bracketed text; each
result is printed once; refusals name only what exists; fetch failures get the hint that fits.

Every test runs the real ``rocmbuild`` (tests/support/cli.py) on real recipes, builds, git
remotes and fake-torch targets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import REPO, rb
from tests.support.recipes import fixture_recipe, write_fixture_recipe
from tests.support.snapshots import snapshot
from tests.support.monorepo import run_git, small_repo

MAKE_LINE = "gmake[2]: *** [src/CMakeFiles/MIOpen.dir/build.make:12: src/kernel.cpp.o] Error 1"
MARKUP = "[bold]not bold[/bold] [red]x[/] :smile: :thumbs_up:"


# --------------------------------------------------------------------------------------------
# bracketed text survives


def test_recipe_errors_keep_their_brackets(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(fixture_recipe(name="bad", generator="Ninja").replace('generator = "Ninja"', 'generater = "Ninja"'))
    r = rb("show", bad)
    assert r.returncode == 2
    assert "unknown key 'build.generater' in [build]" in r.stderr, r.stderr
    j = rb("show", bad, "--json")
    assert "in [build]" in json.loads(j.stdout)["error"]["message"] and "in [build]" in j.stderr

    syntax = tmp_path / "syntax.toml"
    syntax.write_text("name = \n")
    r = rb("show", syntax)
    assert r.returncode == 2 and "tables are [name]" in r.stderr, r.stderr


def test_a_failed_build_tail_keeps_the_make_line_and_markup_text(tmp_path):
    cmake = ("cmake_minimum_required(VERSION 3.16)\nproject(fails C)\n"
             f"add_custom_target(fail ALL COMMAND echo \"{MAKE_LINE}\" COMMAND echo \"{MARKUP}\" "
             "COMMAND false VERBATIM)\n")
    repo = small_repo(tmp_path / "upstream", {"CMakeLists.txt": cmake})
    recipe = write_fixture_recipe(tmp_path / "recipes", "fails", url=repo.as_uri(), ref="main", subdir=None,
                                  version=None, verify=None, generator="Unix Makefiles", jobs=1)
    r = rb("build", recipe)
    assert r.returncode == 3, r.stderr
    assert MAKE_LINE in r.stderr and MARKUP in r.stderr, r.stderr
    j = rb("build", recipe, "--json")
    assert j.returncode == 3 and MAKE_LINE in json.loads(j.stdout)["error"]["message"]


def test_warnings_info_errors_and_progress_print_text_as_given(tmp_path):
    code = ("from rocmbuild import ui\n"
            f"ui.info({MARKUP!r} + ' info')\nui.warn({MAKE_LINE!r})\nui.error({MARKUP!r}, 'use [build] defines')\n"
            "import time\nfrom rocmbuild import progress\n"
            f"with progress.phase('build', {MARKUP!r} + ' progress') as p:\n"
            f"    p.line('[1/2] Building ' + {MARKUP!r})\n    time.sleep(0.6)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "FORCE_COLOR": "1", "COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    plain = _strip_ansi(done.stderr)
    assert f"{MARKUP} info" in plain and f"warning: {MAKE_LINE}" in plain
    assert f"error: {MARKUP}" in plain and "hint: use [build] defines" in plain
    assert f"Building {MARKUP}" in plain, plain  # the bar's current target, on a (forced) terminal
    assert MARKUP[:12] in plain.split("Building")[0], plain  # and its label (cut to the label's width)


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "\n")


# --------------------------------------------------------------------------------------------
# each result once


def test_apply_and_rollback_results_are_printed_once(txn_home, target_env):
    env = target_env("3.5.0", compile_version="3.5.1")
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("applied ") == 1 and "applied " not in r.stderr.replace("applied patch", ""), r.stderr
    again = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)
    assert again.returncode == 0 and again.stdout.count("already applied") == 1
    assert "already applied" not in again.stderr, again.stderr
    back = rb("rollback", "--env", env.prefix)
    assert back.returncode == 0, back.stderr
    assert back.stdout.count("rolled back") == 1 and "rolled back" not in back.stderr, back.stderr
    assert "\nverified " in back.stdout and "(3.5.0)" in back.stdout  # what the rollback verified
    j = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert j.returncode == 0 and json.loads(j.stdout)["txn"] and "applied" not in j.stderr


def test_a_refused_dry_run_names_its_error_once(txn_home, target_env):
    env = target_env("3.5.0", compile_version="3.5.1")
    r = rb("apply", txn_home.recipe("mini-develop"), "--env", env.prefix, "--dry-run")
    assert r.returncode == 2, r.stderr
    both = r.stdout + r.stderr
    assert both.count("refusing to apply") == 1, both
    assert "dry run" in r.stdout and "error: refusing to apply" in r.stderr


# --------------------------------------------------------------------------------------------
# the incompatibility refusal


def test_incompatibility_refusal_names_a_recipe_that_exists(txn_home, target_env):
    env = target_env("3.5.0", compile_version="3.5.1")
    before = snapshot(env.prefix)
    r = rb("apply", txn_home.recipe("mini-develop"), "--env", env.prefix, "--json")
    assert r.returncode == 2, r.stderr
    err = json.loads(r.stdout)["error"]
    assert "e.g. the recipe miopen-3.5.1: `rocmbuild apply miopen-3.5.1`" in err["message"], err["message"]
    assert "recipe a recipe" not in err["message"] and "miopen-3.5.1" in err["hint"]
    assert (REPO / "recipes" / "miopen-3.5.1.toml").is_file()  # it does exist
    assert snapshot(env.prefix) == before


def test_incompatibility_refusal_without_a_fitting_recipe_says_so(txn_home, target_env):
    env = target_env("3.5.0", compile_version="2.16.0")
    before = snapshot(env.prefix)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 2, r.stderr
    err = json.loads(r.stdout)["error"]
    assert "build an MIOpen 2.16.x (none of the recipes found builds one: write a recipe for MIOpen 2.16.x" \
        in err["message"], err["message"]
    assert "miopen-2.16" not in err["message"] + err["hint"]
    assert snapshot(env.prefix) == before


# --------------------------------------------------------------------------------------------
# fetch: a remote missing objects


def _damaged_remote(tmp_path: Path) -> Path:
    """A remote whose tip commit's blob is gone (it serves the commit and trees, not the file)."""
    repo = small_repo(tmp_path / "damaged", {"CMakeLists.txt": "project(x C)\n", "big.c": "int x;\n"})
    run_git(repo, "config", "uploadpack.allowFilter", "true")
    blob = run_git(repo, "rev-parse", "HEAD:big.c")
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    return repo


def test_a_remote_missing_objects_gets_a_fitting_hint_and_leaves_no_empty_cache(tmp_path):
    repo = _damaged_remote(tmp_path)
    recipe = write_fixture_recipe(tmp_path / "recipes", "damaged", url=repo.as_uri(), ref="main", subdir=None,
                                  version=None, verify=None)
    r = rb("build", recipe, "--json")
    assert r.returncode == 3, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "FetchError" and "missing objects" in err["message"], err
    assert err["details"]["reason"] == "missing_objects"
    assert "allowAnySHA1InWant" not in err["hint"] and "--source" in err["hint"]
    home = Path(os.environ["ROCMBUILD_HOME"])
    left = [p for p in (home / "src").iterdir() if not p.name.endswith(".lock")] if (home / "src").exists() else []
    assert left == [], left  # no empty .git stays behind


def test_a_sha_the_server_will_not_serve_names_that_setting():
    from rocmbuild.sources.git import fetch_refused

    sha = "0123456789abcdef0123456789abcdef01234567"
    out = "fatal: remote error: upload-pack: not our ref " + sha
    by_sha = fetch_refused("file:///r", sha, sha, out)
    assert "allowAnySHA1InWant" in by_sha.hint and by_sha.details["reason"] == "not_served_by_sha"
    named = fetch_refused("file:///r", sha, "rocm-7.2.0", out)  # the remote advertised it: objects missing
    assert named.details["reason"] == "missing_objects" and "allowAnySHA1InWant" not in named.hint


# --------------------------------------------------------------------------------------------
# plan changes nothing


def test_plan_writes_nothing_into_the_cache(tmp_path, monorepo):
    recipe = write_fixture_recipe(tmp_path / "recipes", "mini", url=monorepo.url, ref="rocm-7.1.0")
    home = tmp_path / "plan-home"
    r = rb("plan", recipe, "--json", env={"ROCMBUILD_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cache"]["inputs"]["tools"]["cmake"].startswith("cmake version")
    assert not (home / "tools.json").exists()
    assert not home.exists() or sorted(p.relative_to(home) for p in home.rglob("*")) == [], list(home.rglob("*"))
