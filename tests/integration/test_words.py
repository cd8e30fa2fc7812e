"""What a person reads, round 2: git's own words kept whole, a recipe's relative git path taken
against the recipe's directory, tables that never wrap off a terminal, labels cut in the middle,
and the odd words of issue 19 put right.

Every test runs the real ``rocmbuild`` (tests/support/cli.py) on real recipes and git remotes and
reads its output as a person (or ``grep``) would.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.cli import REPO, rb
from tests.support.recipes import write_fixture_recipe


# --------------------------------------------------------------------------------------------
# git's words


def test_an_unreachable_remote_names_git_s_reason_not_its_boilerplate(tmp_path):
    not_a_repo = tmp_path / "miopen"
    not_a_repo.mkdir()
    recipe = write_fixture_recipe(tmp_path / "r", url=not_a_repo.as_uri())
    r = rb("lock", recipe, "-o", tmp_path / "x.lock.json")
    assert r.returncode == 3, r.stderr
    assert f"cannot reach git remote {not_a_repo.as_uri()}: '{not_a_repo}' does not appear to be a git repository" \
        in r.stderr, r.stderr
    assert "and the repository exists" not in r.stderr and "Could not read from remote" not in r.stderr
    assert "fatal:" not in r.stderr.split("hint:")[0]


def test_a_relative_git_path_is_taken_against_the_recipe_s_directory(tmp_path, monorepo):
    beside = tmp_path / "work"
    shutil.copytree(monorepo.path, beside / "miopen", symlinks=True)
    recipe = write_fixture_recipe(beside, url="miopen", ref="develop")
    assert not (REPO / "miopen").exists()  # rocmbuild runs in REPO: the current directory has no miopen
    r = rb("plan", recipe, "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["source"]["url"] == str(beside / "miopen")
    assert plan["source"]["commit"] == monorepo.c_develop
    # one level up works the same: ../miopen from a recipes/ folder
    nested = write_fixture_recipe(beside / "recipes", name="nested", url="../miopen", ref="develop")
    r = rb("plan", nested, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["source"]["url"] == str(beside / "miopen")


# --------------------------------------------------------------------------------------------
# the ref a recipe leaves out


def test_lock_and_plan_name_the_default_branch_when_the_recipe_sets_no_ref(tmp_path, monorepo):
    recipe = write_fixture_recipe(tmp_path, url=monorepo.url, ref=None)
    lock = rb("lock", recipe, "-o", tmp_path / "mini.lock.json")
    assert lock.returncode == 0, lock.stderr
    assert "@ None" not in lock.stdout
    assert "mini @ HEAD (the remote's default branch) -> " in lock.stdout, lock.stdout
    plan = rb("plan", recipe)
    assert plan.returncode == 0, plan.stderr
    assert "@ HEAD (the remote's default branch) -> " in plan.stdout, plan.stdout
    assert " @ - " not in plan.stdout
