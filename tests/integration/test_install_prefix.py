"""``[build] install_prefix`` cannot move or remove anything outside the build's temp dir: an
unclean prefix is refused when the recipe is read, and a staged prefix that is (or goes through) a
symlink is refused before anything is moved -- with real recipes, a real cmake install and
canary directories outside every root."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmbuild import recipe
from rocmbuild.errors import EXIT_BUILD, EXIT_INPUT, BuildError, RecipeError
from tests.support.builds import do_build, make_recipe
from tests.support.cli import rb
from tests.support.recipes import fixture_recipe


def canary_dir(path: Path) -> dict[str, bytes]:
    path.mkdir(parents=True)
    (path / "keep.txt").write_bytes(b"precious\n")
    (path / "lib").mkdir()
    (path / "lib" / "libMIOpen.so.1.0").write_bytes(b"not yours\n")
    return contents(path)


def contents(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def recipe_with_prefix(tmp_path: Path, prefix: str) -> Path:
    p = tmp_path / "evil.toml"
    text = fixture_recipe(name="evil", subdir=None, jobs=2)
    p.write_text(text.replace("[build]\n", f"[build]\ninstall_prefix = {json.dumps(prefix)}\n"))
    return p


@pytest.mark.parametrize("prefix, why", [
    ("/../../../../../../../../../tmp/x", "'..'"),
    ("/usr/local/../../../tmp/x", "'..'"),
    ("//tmp/x", "normal form"),
    ("/usr//local", "normal form"),
    ("/usr/./local", "normal form"),
    ("/usr/local/", "normal form"),
    ("/usr/local/.", "normal form"),
    ("/", "/ itself"),
    ("usr/local", "absolute"),
    ("", "absolute"),
    ("/usr/lo\ncal", "control character"),
])
def test_unclean_prefix_is_refused_when_parsed(tmp_path, prefix, why):
    with pytest.raises(RecipeError) as ei:
        recipe.load(str(recipe_with_prefix(tmp_path, prefix)))
    assert ei.value.exit_code == EXIT_INPUT
    assert "install_prefix" in ei.value.message and why in ei.value.message
    assert ei.value.details["key"] == "build.install_prefix"


@pytest.mark.parametrize("prefix", ["/usr/local", "/opt/rocm", "/opt/rocm-7.0.2", "/opt/..rocm", "/a b"])
def test_clean_prefixes_parse(tmp_path, prefix):
    assert recipe.load(str(recipe_with_prefix(tmp_path, prefix))).build.install_prefix == prefix


def test_the_attack_through_the_cli_leaves_the_canary(tmp_path):
    """``/../../..(...)/tmp/x``: once a build moved (and on a failure rmtree'd) /tmp/x."""
    victim = Path(f"/tmp/rocmbuild-i9-canary-{os.getpid()}")
    try:
        before = canary_dir(victim)
        home = tmp_path / "home"
        r = rb("build", str(recipe_with_prefix(tmp_path, "/../../../../../../../../.." + str(victim))), "--json",
               env={"ROCMBUILD_HOME": str(home)})
        assert r.returncode == EXIT_INPUT, r.stderr
        assert "install_prefix" in json.loads(r.stdout)["error"]["message"]
        assert contents(victim) == before
        assert not (home / "artifacts").exists()  # refused before anything was fetched or built
    finally:
        shutil.rmtree(victim, ignore_errors=True)


def _linking_project(tmp_path: Path, link: str, to: Path) -> SimpleNamespace:
    """A real cmake project whose install step makes ``$DESTDIR/<link>`` a symlink to ``to``."""
    src = tmp_path / "evil-src"
    src.mkdir()
    parent = str(Path(link).parent)
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(evil NONE)\n"
        f'install(CODE "file(MAKE_DIRECTORY \\"\\$ENV{{DESTDIR}}{parent}\\")\n'
        f'file(CREATE_LINK \\"{to}\\" \\"\\$ENV{{DESTDIR}}{link}\\" SYMBOLIC)")\n')
    return SimpleNamespace(root=src, source_dir=src, url="file:///unused", ref="develop", commit="e" * 40,
                           version="3.5.1", patches=(), cherry_picks=(), tarball_sha256=None, fixes=())


@pytest.mark.parametrize("link, victim_rel", [
    ("/opt/evil", "victim"),  # the prefix itself is a symlink out of DESTDIR
    ("/opt", "victim-parent"),  # a directory on the way to it is
])
def test_collect_refuses_a_symlinked_prefix(tmp_path, monkeypatch, link, victim_rel):
    monkeypatch.setenv("ROCMBUILD_HOME", str(tmp_path / "home"))
    victim = tmp_path / victim_rel
    before = canary_dir(victim / "evil" if victim_rel == "victim-parent" else victim)
    p = tmp_path / "mini.toml"
    make_recipe(tmp_path)
    p.write_text(p.read_text().replace("[build]\n", '[build]\ninstall_prefix = "/opt/evil"\n'))
    with pytest.raises(BuildError) as ei:
        do_build(recipe.load(str(p)), _linking_project(tmp_path, link, victim))
    assert ei.value.exit_code == EXIT_BUILD
    assert "symlink" in ei.value.message and "nothing was moved" in ei.value.message
    assert contents(victim / "evil" if victim_rel == "victim-parent" else victim) == before
    left = [x.name for x in (tmp_path / "home" / "artifacts").iterdir() if not x.name.endswith(".lock")]
    assert left == []  # no artifact, no temp dir
