"""Debian packages as prebuilt sources, through the real CLI: a .deb of the fixture library laid
out as Debian does (``usr/lib/x86_64-linux-gnu/``, zstd), by file://, by a plain path and as
``apt:NAME=VERSION`` through a stand-in ``apt-get`` on PATH (offline; the real ``apt-get
download`` is exercised by the real-root tests), built with every build tool shimmed to fail,
applied to a wheel-layout env (the target's file receives the multiarch file's bytes), named
by build, show and status, rolled back byte for byte. The refusals: no apt-get (exit 2), an
unknown version (exit 3, apt's words and ``apt-cache policy``), a hostile .deb (exit 3)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from rocmbuild.errors import EXIT_BUILD, EXIT_INPUT
from tests.integration import test_prebuilt
from tests.integration.test_prebuilt import prebuilt_recipe
from tests.support.cli import rb
from tests.support.debs import tree_entries, write_deb

PKG = {"format": "deb", "name": "libmiopen1", "version": "7.2.4+dfsg-1", "architecture": "amd64"}
shims = test_prebuilt.shims  # the fixture, shared with test_prebuilt.py
WORDS = "from Debian package libmiopen1 7.2.4+dfsg-1 (amd64)"


@pytest.fixture
def deb(fixture_libs, tmp_path) -> tuple[Path, str]:
    path = tmp_path / "libmiopen1_7.2.4+dfsg-1_amd64.deb"
    return path, write_deb(path, tree_entries(fixture_libs("3.5.1")), compression="zst")


def test_a_deb_by_file_url_builds_applies_and_rolls_back(tmp_path, deb, shims, target_env, fixture_libs):
    env_vars, marks = shims
    path, sha = deb
    recipe = prebuilt_recipe(tmp_path / "recipes", "miopen-deb", f"file://{path}", sha, "usr")
    r = rb("build", str(recipe), "--json", env=env_vars)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marks.exists(), f"a build tool ran: {marks.read_text()}"
    out = json.loads(r.stdout)
    assert out["package"] == PKG
    assert out["libraries"][0]["file"] == "lib/x86_64-linux-gnu/libMIOpen.so.1.0"
    assert out["libraries"][0]["chain"] == ["libMIOpen.so.1", "libMIOpen.so.1.0"]
    manifest = json.loads((Path(out["artifact"]) / "manifest.json").read_text())
    assert manifest["package"] == PKG
    assert WORDS in rb("build", str(recipe), env=env_vars).stdout  # the cached build says it too
    show = rb("show", str(recipe))
    assert show.returncode == 0 and WORDS in show.stdout
    assert json.loads(rb("show", str(recipe), "--json").stdout)["package"] == PKG

    env = target_env("3.5.0", layout="wheel", compile_version="3.5.1")
    stock = env.libfile.read_bytes()
    a = rb("apply", str(recipe), "--env", env.prefix, "--json", env=env_vars)
    assert a.returncode == 0, a.stdout + a.stderr
    # the target's own file (torch/lib/libMIOpen.so) holds the multiarch file's bytes
    assert env.libfile.read_bytes() == (fixture_libs("3.5.1") / "libMIOpen.so.1.0").read_bytes()
    assert sorted(os.listdir(env.libfile.parent)) == ["libMIOpen.so"]  # no multiarch dir, no link added
    s = rb("status", "--env", env.prefix, "--json")
    in_effect = json.loads(s.stdout)["changes"]["in_effect"]
    assert [t["package"] for t in in_effect] == [PKG]
    assert WORDS in rb("status", "--env", env.prefix).stdout
    back = rb("rollback", "--env", env.prefix)
    assert back.returncode == 0, back.stdout + back.stderr
    assert env.libfile.read_bytes() == stock


def test_a_plain_path_and_a_misleading_name_work_too(tmp_path, deb):
    path, sha = deb
    odd = tmp_path / "vendor-bundle.tar.gz"
    odd.write_bytes(path.read_bytes())
    recipe = prebuilt_recipe(tmp_path / "recipes", "miopen-deb-path", odd, sha, "usr")
    r = rb("build", str(recipe), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["package"] == PKG


def _fake_apt(tmp_path: Path, deb: Path | None, *, fail: str | None = None) -> dict:
    """PATH with an ``apt-get`` that records its argv and writes ``deb`` into its cwd (or fails)."""
    bin_dir = tmp_path / "apt-bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "apt-get"
    body = (f"import shutil, sys\nopen({str(tmp_path / 'apt-calls')!r}, 'a').write(repr(sys.argv[1:]) + '\\n')\n")
    if fail:
        body += f"print({fail!r}, file=sys.stderr)\nsys.exit(100)\n"
    else:
        body += f"shutil.copy({str(deb)!r}, 'libmiopen1_7.2.4+dfsg-1_amd64.deb')\n"
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_apt_name_version_is_fetched_with_apt_get_download(tmp_path, deb):
    path, sha = deb
    env = _fake_apt(tmp_path, path)
    recipe = prebuilt_recipe(tmp_path / "recipes", "miopen-apt", "apt:libmiopen1=7.2.4+dfsg-1", sha, "usr")
    show = json.loads(rb("show", str(recipe), "--json", env=env).stdout)
    assert show["package"] == {**PKG, "architecture": None}  # before the fetch: what the spec pins
    r = rb("build", str(recipe), "--json", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["package"] == PKG
    assert (tmp_path / "apt-calls").read_text().splitlines() == ["['download', '-q', 'libmiopen1=7.2.4+dfsg-1']"]
    home = Path(os.environ["ROCMBUILD_HOME"])
    assert not list((home / "downloads").glob(".apt-download-*"))  # the temp dir is gone
    assert json.loads(rb("show", str(recipe), "--json", env=env).stdout)["package"] == PKG  # now at hand


def test_apt_sha256_is_checked(tmp_path, deb):
    path, _ = deb
    env = _fake_apt(tmp_path, path)
    recipe = prebuilt_recipe(tmp_path / "recipes", "miopen-apt", "apt:libmiopen1=7.2.4+dfsg-1", "0" * 64, "usr")
    r = rb("build", str(recipe), "--json", env=env)
    assert r.returncode == EXIT_BUILD
    assert "sha256 mismatch" in json.loads(r.stdout)["error"]["message"]


def test_apt_unknown_version_is_a_fetch_error_with_apts_words(tmp_path):
    env = _fake_apt(tmp_path, None, fail="E: Version '9.9' for 'libmiopen1' was not found")
    recipe = prebuilt_recipe(tmp_path / "recipes", "miopen-apt", "apt:libmiopen1=9.9", "0" * 64, "usr")
    r = rb("build", str(recipe), "--json", env=env)
    assert r.returncode == EXIT_BUILD, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert "Version '9.9' for 'libmiopen1' was not found" in err["message"]
    assert "apt-cache policy libmiopen1" in err["hint"]


def test_no_apt_get_is_a_missing_tool(tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    recipe = prebuilt_recipe(tmp_path / "recipes", "miopen-apt", "apt:libmiopen1=7.2.4+dfsg-1", "0" * 64, "usr")
    r = rb("build", str(recipe), "--json", env={"PATH": str(empty)})
    assert r.returncode == EXIT_INPUT, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert "apt-get" in err["message"] and "file://" in err["hint"]


def test_a_hostile_deb_through_the_cli_leaves_no_artifact(tmp_path, fixture_libs):
    path = tmp_path / "evil.deb"
    sha = write_deb(path, tree_entries(fixture_libs("3.5.1")) + [("./usr/lib/esc", "symlink", "../../../../x")])
    recipe = prebuilt_recipe(tmp_path / "recipes", "miopen-evil", f"file://{path}", sha, "usr")
    r = rb("build", str(recipe), "--json")
    assert r.returncode == EXIT_BUILD
    assert "nothing was extracted" in json.loads(r.stdout)["error"]["message"]
    home = Path(os.environ["ROCMBUILD_HOME"])
    assert not [p for p in (home / "artifacts").iterdir() if not p.name.endswith(".lock")]
