"""Prebuilt sources: a real wheel (zip) and a real .tar.gz of the fixture library's install tree
as ``[build] system = "prebuilt"`` recipes, built through the real CLI with cmake, make and the
compilers shimmed on PATH to leave a mark if anything runs them; the stored-once sizes; hostile
zip members refused with a canary outside the root."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from rocmbuild.sources import extract
from rocmbuild.errors import EXIT_BUILD, FetchError
from tests.support.cli import rb
from tests.support.snapshots import snapshot
from tests.support.zips import tree_entries, wheel_of, write_zip

CANARY = b"canary: must never change\n"
TOOLS = ("cmake", "make", "ninja", "cc", "c++", "gcc", "g++")


@pytest.fixture
def payload(fixture_libs, tmp_path) -> Path:
    """The install tree a vendor would ship: lib/ with the real libMIOpen and its links."""
    root = tmp_path / "payload"
    shutil.copytree(fixture_libs("3.5.1"), root / "lib", symlinks=True)
    (root / "include").mkdir()
    (root / "include" / "miopen.h").write_text("/* header */\n")
    return root


@pytest.fixture
def shims(tmp_path) -> tuple[dict, Path]:
    """PATH with every build tool replaced by a script that records its call and fails."""
    bin_dir, marks = tmp_path / "shim-bin", tmp_path / "tool-calls"
    bin_dir.mkdir()
    for tool in TOOLS:
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {marks}\nexit 1\n")
        script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, marks


def prebuilt_recipe(directory: Path, name: str, archive: Path, sha: str, subdir: str | None,
                    key: str = "archive", libraries: str = '["libMIOpen"]') -> Path:
    path = directory / f"{name}.toml"
    directory.mkdir(parents=True, exist_ok=True)
    sub = f'subdir = "{subdir}"\n' if subdir else ""
    path.write_text(f'name = "{name}"\n[source]\n{key} = "{archive}"\nsha256 = "{sha}"\n{sub}'
                    f'[build]\nsystem = "prebuilt"\n[install]\nlibraries = {libraries}\n'
                    f'[verify]\nversion = "3.5.1"\n')
    return path


def artifact_of(stdout: str) -> Path:
    return Path(json.loads(stdout)["artifact"])


def test_wheel_builds_with_no_tool_and_its_subdir_is_the_tree(tmp_path, payload, shims):
    env, marks = shims
    whl = tmp_path / "fixture_miopen-3.5.1-py3-none-linux_x86_64.whl"
    sha = wheel_of(whl, payload, "fixture_miopen/miopen")
    recipe = prebuilt_recipe(tmp_path / "recipes", "mini-whl", whl, sha, "fixture_miopen/miopen")
    r = rb("build", str(recipe), "--json", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marks.exists(), f"a build tool ran: {marks.read_text()}"
    art = artifact_of(r.stdout)
    got = {k: (v[0], v[1], v[3]) for k, v in snapshot(art / "tree").items()}
    want = {k: (v[0], v[1], v[3]) for k, v in snapshot(payload).items()}
    assert got == want  # the tree is exactly the wheel's subdir: no dist-info, no top directory
    manifest = json.loads((art / "manifest.json").read_text())
    lib = manifest["libraries"][0]
    assert lib["file"] == "lib/libMIOpen.so.1.0" and lib["soname"] == "libMIOpen.so.1"
    assert manifest["inputs"]["tools"]["cmake"] == "none (prebuilt)"
    home = Path(os.environ["ROCMBUILD_HOME"])
    assert not (home / "src").exists() and not (home / "build").exists()  # no second copy, no build tree

    again = rb("build", str(recipe), "--json", env=env)
    assert again.returncode == 0
    assert json.loads(again.stdout)["cached"] is True
    assert not marks.exists()


def test_tar_gz_with_one_top_directory(tmp_path, payload, shims):
    env, marks = shims
    tgz = tmp_path / "vendor-3.5.1.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(payload, arcname="vendor-3.5.1/opt/miopen")
        tf.add(tmp_path / "payload" / "include" / "miopen.h", arcname="vendor-3.5.1/README")
    import hashlib
    sha = hashlib.sha256(tgz.read_bytes()).hexdigest()
    recipe = prebuilt_recipe(tmp_path / "recipes", "mini-tgz", tgz, sha, "opt/miopen", key="tarball")
    r = rb("build", str(recipe), "--json", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marks.exists()
    tree = artifact_of(r.stdout) / "tree"
    assert sorted(os.listdir(tree)) == ["include", "lib"]
    assert os.readlink(tree / "lib" / "libMIOpen.so.1") == os.readlink(payload / "lib" / "libMIOpen.so.1")
    # build --check extracts again beside the cache and compares: identical, still no tool run
    check = rb("build", str(recipe), "--check", "--json", env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["identical"] is True and not marks.exists()


def test_three_artifacts_from_one_archive_store_the_download_once(tmp_path, payload, shims):
    """The download is kept once (content-addressed); each artifact holds one tree; no src/ copy."""
    env, _ = shims
    big = payload / "lib" / "blob.bin"
    big.write_bytes(os.urandom(4 << 20))  # incompressible: the archive is about the tree's size
    whl = tmp_path / "big.whl"
    sha = wheel_of(whl, payload, "pkg/miopen")
    recipes = [prebuilt_recipe(tmp_path / "recipes", f"mini-{i}", whl, sha, "pkg/miopen") for i in range(3)]
    for recipe in recipes:
        r = rb("build", str(recipe), "--json", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
    home = Path(os.environ["ROCMBUILD_HOME"])

    def size(p: Path) -> int:
        return sum(f.lstat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())

    tree = size(payload)
    downloads, artifacts = size(home / "downloads"), size(home / "artifacts")
    print(f"\npayload {tree} B, archive {whl.stat().st_size} B; home: downloads {downloads} B, "
          f"artifacts {artifacts} B (3 artifacts), total {size(home)} B = {size(home) / tree:.2f}x the payload")
    assert [p.name for p in (home / "downloads").iterdir() if not p.name.endswith(".lock")] == [sha]
    assert downloads == whl.stat().st_size
    assert artifacts < 3 * tree * 1.05  # three trees and their manifests, nothing more
    assert size(home) < downloads + 3 * tree * 1.05  # no src/ tree, no build tree
    assert not (home / "src").exists() and not (home / "build").exists()


def test_missing_subdir_is_a_clear_error(tmp_path, payload):
    whl = tmp_path / "x.whl"
    sha = wheel_of(whl, payload, "pkg/miopen")
    recipe = prebuilt_recipe(tmp_path / "recipes", "mini-nosub", whl, sha, "pkg/cudnn")
    r = rb("build", str(recipe), "--json")
    assert r.returncode == EXIT_BUILD
    err = json.loads(r.stdout)["error"]
    assert "nothing below 'pkg/cudnn'" in err["message"] and "subdir" in err["hint"]
    assert not list((Path(os.environ["ROCMBUILD_HOME"]) / "artifacts").glob("[0-9a-f]*"))


# --------------------------------------------------------------------------------------------
# hostile zips: refused, nothing extracted, the canary outside untouched

HOSTILE = [
    ([("/tmp/abs-evil", "file", b"x")], "absolute path"),
    ([("pkg/../../flag", "file", b"x")], "'..'"),
    ([("pkg/up", "symlink", b"../../flag")], "outside the tree"),
    ([("pkg/abs", "symlink", b"/etc/passwd")], "absolute"),
    ([("pkg/l", "symlink", b".."), ("pkg/l/flag", "file", b"x")], "goes through the symlink"),
    ([("pkg/a", "symlink", b".."), ("pkg/b", "symlink", b"a/..")], "leaving the tree"),  # each lexically inside
    ([("pkg/dev", "chr", b"")], "device or FIFO"),
    ([("pkg/f", "file", b"1"), ("pkg/f", "file", b"2")], "duplicate"),
]


@pytest.mark.parametrize("entries,reason", HOSTILE, ids=[r for _, r in HOSTILE])
def test_hostile_zip_members_are_refused(tmp_path, entries, reason):
    zpath = tmp_path / "evil.whl"
    write_zip(zpath, [("pkg/ok", "file", b"fine")] + entries)
    out = tmp_path / "out"
    out.mkdir()
    (out / "flag").write_bytes(CANARY)
    (tmp_path / "flag").write_bytes(CANARY)
    for subdir in (None, "pkg"):
        dest = out / "tree" / "deep"
        with pytest.raises(FetchError) as ei:
            extract.safe_extract(zpath, dest, subdir=subdir)
        assert ei.value.exit_code == EXIT_BUILD
        assert reason in ei.value.message and "nothing was extracted" in ei.value.message
        assert not dest.exists()
    assert (out / "flag").read_bytes() == CANARY and (tmp_path / "flag").read_bytes() == CANARY
    assert not (tmp_path.parent / "flag").exists() or (tmp_path.parent / "flag").read_bytes() != b"x"


def test_link_leaving_the_subdir_is_refused_though_inside_the_archive(tmp_path):
    """``pkg/lib/x -> ../../other/secret`` stays in the archive but leaves the prebuilt tree."""
    zpath = tmp_path / "w.whl"
    write_zip(zpath, [("other/secret", "file", b"s"), ("pkg/lib/f", "file", b"f"),
                      ("pkg/lib/x", "symlink", b"../../other/secret")])
    extract.safe_extract(zpath, tmp_path / "whole")  # as a whole archive the link is fine
    assert (tmp_path / "whole" / "pkg" / "lib" / "x").read_bytes() == b"s"
    with pytest.raises(FetchError, match="outside the tree|leaving the tree"):
        extract.safe_extract(zpath, tmp_path / "sub", subdir="pkg")
    assert not (tmp_path / "sub").exists()


def test_hostile_wheel_through_the_cli_leaves_home_clean(tmp_path, payload):
    whl = tmp_path / "evil.whl"
    sha = write_zip(whl, tree_entries(payload, "pkg/miopen") + [("pkg/miopen/lib/esc", "symlink", b"../../../..")])
    recipe = prebuilt_recipe(tmp_path / "recipes", "mini-evil", whl, sha, "pkg/miopen")
    r = rb("build", str(recipe), "--json")
    assert r.returncode == EXIT_BUILD, r.stdout + r.stderr
    assert "nothing was extracted" in json.loads(r.stdout)["error"]["message"]
    home = Path(os.environ["ROCMBUILD_HOME"])
    assert not [p for p in (home / "artifacts").iterdir() if not p.name.endswith(".lock")]


def test_zip_modes_lose_setuid_and_keep_exec(tmp_path):
    zpath = tmp_path / "m.zip"
    import zipfile
    with zipfile.ZipFile(zpath, "w") as zf:
        zi = zipfile.ZipInfo("bin/tool")
        zi.external_attr = (stat.S_IFREG | 0o4777) << 16
        zf.writestr(zi, b"#!/bin/sh\n")
        zf.writestr(zipfile.ZipInfo("plain.txt"), b"zipfile gives it 0600, no file type")
    extract.safe_extract(zpath, tmp_path / "t")
    assert stat.S_IMODE((tmp_path / "t" / "bin" / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "t" / "plain.txt").stat().st_mode) == 0o600


# --------------------------------------------------------------------------------------------
# pypi:NAME==VERSION archives (a registry named by its package, fetched with pip)

SIX_WHEEL_SHA256 = "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"  # six 1.16.0, py2.py3-none-any


def test_a_pinned_pypi_package_is_downloaded_with_pip_and_checked(tmp_path):
    from rocmbuild.sources import archive

    dest = tmp_path / "six.whl"
    archive.download("pypi:six==1.16.0", dest, SIX_WHEEL_SHA256)
    assert zipfile.is_zipfile(dest) and "six.py" in zipfile.ZipFile(dest).namelist()
    assert not list(tmp_path.glob(".pip-download-*")) and not list(tmp_path.glob("*.part"))
    with pytest.raises(FetchError) as ei:
        archive.download("pypi:six==1.16.0", tmp_path / "again.whl", "0" * 64)
    assert "sha256 mismatch" in ei.value.message and not (tmp_path / "again.whl").exists()


@pytest.mark.parametrize("spec", ["six", "six>=1.16", "six==1.*", "six==1.16.0,>=1", "not a requirement!"])
def test_a_pypi_archive_must_pin_one_exact_version(tmp_path, spec):
    from rocmbuild.sources import archive

    with pytest.raises(FetchError) as ei:
        archive.download(f"pypi:{spec}", tmp_path / "x.whl", "0" * 64)
    assert "pypi:" in ei.value.message and not list(tmp_path.iterdir())
