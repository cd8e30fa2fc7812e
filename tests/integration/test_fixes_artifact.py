"""``[source] contains`` searched in an artifact's bytes: a prebuilt .tar.gz of the real fixture
library built with and without the fix's string (as MIOpen embeds its kernel sources in
``libMIOpen.so``), a source build whose library does or does not carry the string, where each fix
was found (``fixes_found``), a cache hit re-searched, old manifests, and the search's bounds."""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from pathlib import Path

import git
import pytest

from rocmbuild.sources import fixes
from rocmbuild.store.manifest import FoundFix, Manifest
from rocmbuild.cli import app as cli
from rocmbuild.errors import EXIT_INPUT, RecipeError
from rocmbuild.home import cache_home
from tests.support.project import build_library, set_marker
from tests.support.recipes import write_fixture_recipe
from tests.support.snapshots import canaries, snapshot

NEEDLE = "MIO_BN_GFX115X"
FIX_NAME = "gfx115x batch-norm fix"


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def fixed_lib(tmp_path_factory) -> Path:
    """The fixture library 3.5.1 whose .rodata holds the fix's string (its marker)."""
    return build_library("3.5.1", tmp_path_factory.mktemp("lib-fixed"), marker=f"{NEEDLE} fixed")


def tgz_of(tmp_path: Path, lib_dir: Path, name: str) -> tuple[Path, str]:
    """``name.tar.gz`` holding ``pkg/usr/lib/<the library and its links>`` (one top directory: stripped, subdir ``usr``)."""
    root = tmp_path / f"{name}-payload"
    shutil.copytree(lib_dir, root / "usr" / "lib", symlinks=True)
    (root / "usr" / "share" / "doc").mkdir(parents=True)
    (root / "usr" / "share" / "doc" / "README").write_text("no fix named here\n")
    tgz = tmp_path / f"{name}.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(root, arcname="pkg")
    return tgz, hashlib.sha256(tgz.read_bytes()).hexdigest()


def prebuilt(tmp_path: Path, name: str, tgz: Path, sha: str, contains: str | None = None) -> Path:
    d = tmp_path / "recipes"
    d.mkdir(exist_ok=True)
    extra = f"contains = [{contains}]\n" if contains else ""
    path = d / f"{name}.toml"
    path.write_text(f'name = "{name}"\n[source]\narchive = "{tgz}"\nsha256 = "{sha}"\nsubdir = "usr"\n{extra}'
                    '[build]\nsystem = "prebuilt"\n[install]\nlibraries = ["libMIOpen"]\n[verify]\nversion = "3.5.1"\n')
    return path


FIX = f'{{ name = "{FIX_NAME}", grep = "{NEEDLE}", path = "lib" }}'


def published() -> list[Path]:
    return [p for p in (cache_home() / "artifacts").glob("*") if (p / "manifest.json").exists()]


# --------------------------------------------------------------------------------------------
# prebuilt


def test_a_prebuilt_with_the_fix_in_its_library_builds_and_says_where(tmp_path, fixed_lib, capsys):
    tgz, sha = tgz_of(tmp_path, fixed_lib, "fixed")
    recipe = prebuilt(tmp_path, "pre-fixed", tgz, sha, FIX)
    code, data = run_json(capsys, "build", str(recipe))
    assert code == 0, data
    want = {"name": FIX_NAME, "found_in": "artifact", "file": "lib/libMIOpen.so.1.0", "source_file": None}
    assert data["fixes"] == [FIX_NAME] and data["fixes_found"] == [want]
    manifest = json.loads((Path(data["artifact"]) / "manifest.json").read_text())
    assert manifest["fixes"] == [FIX_NAME] and manifest["fixes_found"] == [want]
    cli.main(["build", str(recipe)])
    assert f"fixes: {FIX_NAME} (in lib/libMIOpen.so.1.0)" in capsys.readouterr().out
    cli.main(["show", str(recipe)])
    assert f"'{NEEDLE}' in the artifact's files under lib" in capsys.readouterr().out
    # contains is not in the key: the recipe without it names the same artifact
    plain = prebuilt(tmp_path, "pre-fixed", tgz, sha)
    code, plan = run_json(capsys, "plan", str(plain))
    assert code == 0 and plan["cache"]["key"] == data["key"] and plan["cache"]["cached"] is True


def test_a_prebuilt_without_the_fix_is_refused_before_any_swap(tmp_path, fixture_libs, target_env, capsys):
    tgz, sha = tgz_of(tmp_path, fixture_libs("3.5.1"), "stock")
    recipe = prebuilt(tmp_path, "pre-stock", tgz, sha, FIX)
    env = target_env("3.5.1")
    canary = canaries(tmp_path / "outside")
    before = snapshot(env.prefix)
    code, data = run_json(capsys, "apply", str(recipe), "--env", str(env.prefix))
    assert code == EXIT_INPUT and not data["ok"], data
    err = data["error"]
    assert FIX_NAME in err["message"] and f"'{NEEDLE}' not found in any file under lib" in err["message"]
    assert "prebuilt artifact" in err["message"] and "newer package" in err["hint"]
    assert err["details"]["missing"][0]["name"] == FIX_NAME
    assert snapshot(env.prefix) == before  # byte for byte, inode for inode
    assert all(p.read_bytes() == b for p, b in canary.items())
    assert not published()  # nothing published: the next build searches again


def test_a_cache_hit_is_searched_in_its_bytes_not_refused_blindly(tmp_path, fixed_lib, fixture_libs, capsys):
    fixed_tgz, fixed_sha = tgz_of(tmp_path, fixed_lib, "fixed")
    assert run_json(capsys, "build", str(prebuilt(tmp_path, "fixed", fixed_tgz, fixed_sha)))[0] == 0
    code, data = run_json(capsys, "build", str(prebuilt(tmp_path, "fixed", fixed_tgz, fixed_sha, FIX)))  # same key
    assert code == 0 and data["cached"] is True, data
    assert data["fixes_found"][0]["found_in"] == "artifact"
    stock_tgz, stock_sha = tgz_of(tmp_path, fixture_libs("3.5.1"), "stock")
    code, plain = run_json(capsys, "build", str(prebuilt(tmp_path, "stock", stock_tgz, stock_sha)))
    assert code == 0
    code, data = run_json(capsys, "build", str(prebuilt(tmp_path, "stock", stock_tgz, stock_sha, FIX)))
    assert code == EXIT_INPUT and FIX_NAME in data["error"]["message"]
    assert (Path(plain["artifact"]) / "manifest.json").is_file()  # the cached artifact stays (no fix is no damage)


def test_a_prebuilt_fix_path_is_relative_to_the_install_tree(tmp_path, fixed_lib, capsys):
    tgz, sha = tgz_of(tmp_path, fixed_lib, "fixed")
    wrong = f'{{ name = "{FIX_NAME}", grep = "{NEEDLE}", path = "usr/lib" }}'  # the archive's path, not the tree's
    code, data = run_json(capsys, "build", str(prebuilt(tmp_path, "pre-wrong", tgz, sha, wrong)))
    assert code == EXIT_INPUT
    assert "usr/lib does not exist in the artifact" in data["error"]["message"]
    whole = f'{{ name = "{FIX_NAME}", grep = "{NEEDLE}" }}'
    code, data = run_json(capsys, "build", str(prebuilt(tmp_path, "pre-whole", tgz, sha, whole)))
    assert code == 0 and data["fixes_found"][0]["file"] == "lib/libMIOpen.so.1.0"


def test_a_commit_fix_is_refused_on_a_prebuilt_recipe(tmp_path, fixed_lib, capsys):
    tgz, sha = tgz_of(tmp_path, fixed_lib, "fixed")
    code, data = run_json(capsys, "show", str(prebuilt(tmp_path, "pre-commit", tgz, sha,
                                                         f'{{ name = "x", commit = "{"a" * 40}" }}')))
    assert code == EXIT_INPUT and "has no history" in data["error"]["message"]


# --------------------------------------------------------------------------------------------
# source recipes: the built library searched too


def commit_marker(monorepo, marker: str) -> None:
    repo = git.Repo(monorepo.path)
    set_marker(monorepo.path / "projects" / "miopen", marker)
    repo.git.add("-A")
    repo.git.commit("-q", "-m", "batchnorm: gfx115x fix, in the library's strings")
    repo.close()


def source_recipe(tmp_path: Path, url: str, contains: str) -> Path:
    return write_fixture_recipe(tmp_path / "recipes", url=url, ref="develop", generator="Ninja",
                                defines={"MIOPEN_FIXTURE_PAD_MB": 0}, source_extra=f"contains = [{contains}]")


def test_a_source_build_records_the_fix_in_its_library(tmp_path, monorepo, target_env, capsys):
    commit_marker(monorepo, f"{NEEDLE} fixed")
    fix = f'{{ name = "{FIX_NAME}", grep = "{NEEDLE}", path = "src" }}'
    code, data = run_json(capsys, "build", str(source_recipe(tmp_path, monorepo.url, fix)))
    assert code == 0, data
    (found,) = data["fixes_found"]
    assert found == {"name": FIX_NAME, "found_in": "artifact", "file": "lib/libMIOpen.so.1.0",
                     "source_file": "src/miopen.c"}
    env = target_env("3.5.1", compile_version="3.6.0")
    code, applied = run_json(capsys, "apply", str(source_recipe(tmp_path, monorepo.url, fix)), "--env", str(env.prefix))
    assert code == 0, applied
    code, status = run_json(capsys, "status", "--env", str(env.prefix))
    (txn,) = status["changes"]["in_effect"]
    assert txn["fixes"] == [FIX_NAME] and txn["fixes_found"] == [found]
    cli.main(["status", "--env", str(env.prefix)])
    assert f"fixes: {FIX_NAME} (in lib/libMIOpen.so.1.0)" in capsys.readouterr().out


def test_a_fix_only_in_the_source_is_recorded_as_source(tmp_path, monorepo, capsys):
    repo = git.Repo(monorepo.path)
    (monorepo.path / "projects" / "miopen" / "src" / "batchnorm_gfx115x.h").write_text(f"#define {NEEDLE} 1\n")
    repo.git.add("-A")
    repo.git.commit("-q", "-m", "a define no library keeps")
    repo.close()
    fix = f'{{ name = "{FIX_NAME}", grep = "{NEEDLE}", path = "src" }}'
    code, data = run_json(capsys, "build", str(source_recipe(tmp_path, monorepo.url, fix)))
    assert code == 0, data  # not in the .so: recorded as source, never refused
    assert data["fixes_found"] == [{"name": FIX_NAME, "found_in": "source", "file": "src/batchnorm_gfx115x.h",
                                    "source_file": None}]


def test_an_old_manifest_with_names_only_reads_as_found_in_the_source():
    old = {"schema": 1, "recipe": "mini", "key": "a" * 64, "version": "3.5.1", "expect_version": "3.5.1",
           "encoding": "miopen", "smoke": None, "commit": None, "ref": None, "url": "file:///x",
           "install_prefix": "/usr/local", "files": [], "libraries": [], "fixes": ["bn fix"]}
    m = Manifest.from_json(old)
    assert m.fixes_found == () and m.found() == (FoundFix("bn fix", "source"),)
    assert m.found()[0].where() == "in the source's history"
    bad = dict(old, fixes_found=[{"name": "bn fix", "found_in": "elsewhere"}])
    with pytest.raises(ValueError, match="fixes_found"):
        Manifest.from_json(bad)
    escape = dict(old, fixes_found=[{"name": "bn fix", "found_in": "artifact", "file": "../../etc/passwd"}])
    with pytest.raises(ValueError, match="inside"):
        Manifest.from_json(escape)


# --------------------------------------------------------------------------------------------
# the search: streamed, a match across chunks, no link followed, bounded


def test_the_artifact_search_streams_follows_no_link_and_is_bounded(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    (tree / "lib").mkdir(parents=True)
    outside = tmp_path / "outside.so"
    outside.write_bytes(NEEDLE.encode())
    (tree / "lib" / "libout.so").symlink_to(outside)
    (tree / "lib" / "linked").symlink_to(tmp_path)
    assert fixes.grep_found(tree, "lib", NEEDLE, what="the artifact")[0] is None
    assert "is a symbolic link" in fixes.grep_found(tree, "lib/linked", NEEDLE, what="the artifact")[1]
    big = tree / "lib" / "libbig.so.1"
    big.write_bytes(b"\0" * (3 * fixes.CHUNK - 5) + NEEDLE.encode() + b"\0" * 10)  # across the 3rd boundary
    assert fixes.grep_found(tree, "lib", NEEDLE, what="the artifact") == ("lib/libbig.so.1", None)
    monkeypatch.setattr(fixes, "MAX_BYTES", 2 * fixes.CHUNK)
    with pytest.raises(RecipeError, match="too much to search") as ei:
        fixes.grep_found(tree, "lib", NEEDLE, what="the artifact")
    assert "lib/libbig.so.1" in ei.value.message and "narrow" in ei.value.hint
    monkeypatch.setattr(fixes, "MAX_BYTES", 4 << 30)
    with pytest.raises(RecipeError, match=r"or 0 s; reached"):
        fixes.grep_found(tree, "lib", NEEDLE, budget=fixes.Budget(seconds=0))
    monkeypatch.setattr(fixes, "MAX_FILES", 0)
    with pytest.raises(RecipeError, match="0 files"):
        fixes.grep_found(tree, "lib", NEEDLE)
