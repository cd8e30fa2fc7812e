"""Substitution before building: one machine builds and pushes (signed) to a real OCI registry,
the others apply the recipe with no compiler process at all; unsigned and untrusted artifacts,
an unreachable cache, --offline, --require-cache and a remote-gone apply of a pinned commit.

Each "machine" is its own ROCMBUILD_HOME and its own fake-torch env. Compiles are counted by
compiler wrappers (CMAKE_C_COMPILER / CMAKE_CXX_COMPILER) that append a line to a count file
for every invocation except ``--version`` (the cache key holds the compiler's version line, so
a substituting machine asks it once: that runs no compile).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import registry
from tests.support.cli import rb
from tests.support.recipes import write_fixture_recipe


def _wrapper(path: Path, real: str, count: Path) -> Path:
    path.write_text(f'#!/bin/sh\ncase "$1" in --version) ;; *) echo "$$ $*" >> "{count}" ;; esac\n'
                    f'exec {real} "$@"\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def fleet(tmp_path, monorepo):
    """(recipe path, count file, homes, keys, registry-free config writer)."""
    count = tmp_path / "compiles.log"
    count.write_text("")
    bindir = tmp_path / "wrappers"
    bindir.mkdir()
    cc = _wrapper(bindir / "cc-count", shutil.which("cc") or "cc", count)
    cxx = _wrapper(bindir / "cxx-count", shutil.which("c++") or "c++", count)
    recipe = write_fixture_recipe(tmp_path / "recipes", "mini", url=monorepo.url, ref="rocm-7.1.0", jobs=2,
                                  defines={"CMAKE_C_COMPILER": str(cc), "CMAKE_CXX_COMPILER": str(cxx)})
    secret = tmp_path / "keys" / "lab-1.secret"
    secret.parent.mkdir()
    public = json.loads(rb("key", "generate", "lab-1", "--out", str(secret), "--json").stdout)["public_key"]
    return {"recipe": recipe, "count": count, "secret": secret, "public": public, "monorepo": monorepo}


def _config(caches: list[str], public: list[str]) -> None:
    from rocmbuild import config

    path = config.user_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f'[[caches]]\nurl = "{u}"\n' for u in caches]
    lines.append("[trust]\npublic_keys = [" + ", ".join(f'"{k}"' for k in public) + "]\n")
    path.write_text("\n".join(lines))


def _home(tmp_path: Path, name: str) -> dict:
    return {"ROCMBUILD_HOME": str(tmp_path / f"home-{name}")}


def _json(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def _compiles(count: Path) -> int:
    return len(count.read_text().splitlines())


def _tree_hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _build_and_push(fleet, url: str, env: dict) -> dict:
    built = _json(rb("build", str(fleet["recipe"]), "--no-cache", "--json", env=env))
    assert built["ok"] and built["cached"] is False and built["substituted"] is None
    pushed = rb("push", built["key"][:16], "--to", url, "--sign-key", str(fleet["secret"]), "--json", env=env)
    assert pushed.returncode == 0, pushed.stderr
    return built


def test_fleet_one_builds_and_pushes_three_apply_with_zero_compiles(fleet, oci_registry, target_env, tmp_path):
    url = oci_registry.url()
    _config([url], [fleet["public"]])
    envs = [target_env("3.5.0", compile_version="3.5.0", name=f"machine-{i}") for i in range(4)]
    builder = _home(tmp_path, "0")
    built = _build_and_push(fleet, url, builder)
    assert _compiles(fleet["count"]) > 0  # the wrapper really counts the builder's compiles
    first = _json(rb("apply", str(fleet["recipe"]), "--env", str(envs[0].prefix), "--json", env=builder))
    assert first["ok"] and first["substituted"] is None  # built here
    compiled = _compiles(fleet["count"])
    libs = []
    for i in (1, 2, 3):
        home = _home(tmp_path, str(i))
        plan = _json(rb("apply", str(fleet["recipe"]), "--env", str(envs[i].prefix), "--dry-run", "--json", env=home))
        assert plan["build"]["cache"]["action"] == "substitute" and plan["build"]["cache"]["substitute"] == url
        text = rb("plan", str(fleet["recipe"]), env=home).stdout
        assert f"would substitute from {url}" in text
        r = rb("apply", str(fleet["recipe"]), "--env", str(envs[i].prefix), "--json", env=home)
        res = _json(r)
        assert r.returncode == 0 and res["ok"] and res["txn"], r.stderr
        assert res["substituted"]["url"] == url and res["substituted"]["signer"] == "lab-1"
        assert _compiles(fleet["count"]) == compiled, "a substituting machine ran the compiler"
        # byte-identical to the builder's artifact
        art = Path(res["artifact"])
        assert art.parent.name == "imported" and art.name == built["key"]
        assert _tree_hashes(art / "tree") == _tree_hashes(Path(built["artifact"]) / "tree")
        libs.append((envs[i].prefix / "lib" / "libMIOpen.so.1").resolve().read_bytes())
        # the provenance: cache list and status
        listed = _json(rb("cache", "list", "--json", env=home))
        [row] = [a for a in listed["artifacts"] if a["key"] == built["key"]]
        assert row["substituted"]["url"] == url and row["substituted"]["signer"] == "lab-1"
        assert len(row["substituted"]["bundle_sha256"]) == 64
        assert f"substituted from {url}" in rb("cache", "list", env=home).stdout
        status = _json(rb("status", "--env", str(envs[i].prefix), "--json", env=home))
        [eff] = status["changes"]["in_effect"]
        assert eff["substituted"]["url"] == url and eff["artifact"] == str(art)
        assert f"substituted from {url}" in rb("status", "--env", str(envs[i].prefix), env=home).stdout
        # from now on it is the recipe's local cache hit: no registry needed
        again = _json(rb("build", str(fleet["recipe"]), "--cache", "oci://127.0.0.1:9/none", "--json", env=home))
        assert again["cached"] is True and again["artifact"] == str(art)
    assert len(set(libs)) == 1 and libs[0] == (envs[0].prefix / "lib" / "libMIOpen.so.1").resolve().read_bytes()
    assert _compiles(fleet["count"]) == compiled


def test_unsigned_and_untrusted_are_refused_then_built_or_exit_3(fleet, tmp_path):
    cache_dir = tmp_path / "plain-cache"
    url = f"file://{cache_dir}"
    builder = _home(tmp_path, "builder")
    built = _build_and_push(fleet, url, builder)
    # this machine trusts another key only: the artifact's signer is not trusted
    other = tmp_path / "keys" / "other.secret"
    other_pub = json.loads(rb("key", "generate", "other", "--out", str(other), "--json").stdout)["public_key"]
    _config([url], [other_pub])
    compiled = _compiles(fleet["count"])
    home = _home(tmp_path, "b")
    r = rb("build", str(fleet["recipe"]), "--require-cache", "--json", env=home)
    assert r.returncode == 3 and "signed by 'lab-1', which is not a trusted key" in _json(r)["error"]["message"]
    hint = _json(r)["error"]["hint"]  # what fixes an untrusted signer, not what fixes a miss (issue 27)
    assert "[trust] public_keys" in hint and "--allow-unsigned" in hint and "push it" not in hint, hint
    assert _compiles(fleet["count"]) == compiled and not (tmp_path / "home-b" / "artifacts" / "imported").exists()
    r = rb("build", str(fleet["recipe"]), env=home)  # falls back to building here, one line said why
    assert r.returncode == 0 and "substituted" not in r.stdout + r.stderr, r.stderr
    assert _compiles(fleet["count"]) > compiled
    assert len([ln for ln in r.stderr.splitlines() if "not a trusted key" in ln]) == 1
    # unsigned: the signature file removed from the cache
    (cache_dir / f"{built['key']}.sig").unlink()
    home_c = _home(tmp_path, "c")
    r = rb("build", str(fleet["recipe"]), "--require-cache", "--json", env=home_c)
    assert r.returncode == 3 and "is not signed" in _json(r)["error"]["message"]
    compiled = _compiles(fleet["count"])
    r = rb("build", str(fleet["recipe"]), "--require-cache", "--allow-unsigned", "--json", env=home_c)
    res = _json(r)
    assert r.returncode == 0 and res["substituted"]["url"] == url and res["substituted"]["signer"] is None, r.stderr
    assert _compiles(fleet["count"]) == compiled


def test_unreachable_cache_falls_back_with_one_line_and_offline_touches_no_network(fleet, tmp_path):
    closed = f"oci://127.0.0.1:{registry.free_port()}/rocmbuild/cache"
    _config([closed], [fleet["public"]])
    home = _home(tmp_path, "a")
    env = {**home, "ROCMBUILD_DOWNLOAD_RETRIES": "1"}
    r = rb("build", str(fleet["recipe"]), env=env)
    assert r.returncode == 0 and ": built" in r.stdout, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "cannot reach the cache" in ln]
    assert len(lines) == 1 and closed in lines[0] and "tried 2 times" in lines[0]
    # --require-cache with the cache down: the hint says the cache is down, not to push or trust a key
    r = rb("build", str(fleet["recipe"]), "--require-cache", "--json", env={**_home(tmp_path, "down"),
                                                                           "ROCMBUILD_DOWNLOAD_RETRIES": "1"})
    hint = _json(r)["error"]["hint"]
    assert r.returncode == 3 and f"{closed} could not be reached" in hint, hint
    assert "push it" not in hint and "[trust]" not in hint and "drop --require-cache" in hint
    # --offline: a local hit, no lookup (no line, no retry delay), no ls-remote (the git remote is gone)
    shutil.rmtree(fleet["monorepo"].path)
    start = time.monotonic()
    r = rb("build", str(fleet["recipe"]), "--offline", env=env)
    assert r.returncode == 0 and "cached (no configure, no compile)" in r.stdout, r.stderr
    assert "cannot reach" not in r.stderr and time.monotonic() - start < 20
    # a fresh machine offline: no cache asked, so --require-cache is exit 3 without a network line
    r = rb("build", str(fleet["recipe"]), "--offline", "--require-cache", "--json", env=_home(tmp_path, "fresh"))
    assert r.returncode == 3 and "cannot reach" not in r.stderr


def test_apply_of_a_cached_pinned_commit_works_with_the_remote_gone(fleet, target_env, tmp_path):
    m = fleet["monorepo"]
    recipe = fleet["recipe"]
    recipe.write_text(recipe.read_text().replace('ref = "rocm-7.1.0"', f'ref = "{m.c_release}"'))
    home = _home(tmp_path, "a")
    assert rb("build", str(recipe), "--json", env=home).returncode == 0
    shutil.rmtree(m.path)  # the git remote is gone
    env = target_env("3.5.0", compile_version="3.5.0")
    compiled = _compiles(fleet["count"])
    r = rb("apply", str(recipe), "--env", str(env.prefix), "--json", env=home)
    assert r.returncode == 0 and _json(r)["ok"], r.stderr
    assert _compiles(fleet["count"]) == compiled


def test_check_mode_says_where_the_artifact_would_come_from(fleet, oci_registry, target_env, tmp_path):
    """``apply --dry-run`` and ``plan``: would build / would substitute from URL (key, signer) /
    cached locally / would build (URL unreachable), in the text and the JSON; the lookup downloads
    no bundle, and --no-cache asks nothing."""
    url = oci_registry.url()
    _config([url], [fleet["public"]])
    env = target_env("3.5.0", compile_version="3.5.0", name="checked")
    fresh, builder = _home(tmp_path, "fresh"), _home(tmp_path, "builder")
    recipe = str(fleet["recipe"])

    def dry(home, *extra):
        d = _json(rb("apply", recipe, "--env", str(env.prefix), "--dry-run", "--json", *extra, env=home))
        assert d["changed"] is False
        return d["build"]["cache"]

    c = dry(fresh)
    assert c["action"] == "build" and c["substitute"] is None and c["unreachable"] == []
    built = _build_and_push(fleet, url, builder)
    c = dry(fresh)
    assert (c["action"], c["substitute"], c["signer"], c["key"]) == ("substitute", url, "lab-1", built["key"])
    words = f"would substitute from {url} (key {built['key'][:16]}, signed by lab-1)"
    assert words in rb("apply", recipe, "--env", str(env.prefix), "--dry-run", env=fresh).stdout
    assert words in rb("plan", recipe, env=fresh).stdout
    home = Path(fresh["ROCMBUILD_HOME"])
    assert not (home / "artifacts").exists() and not any((home / "downloads").glob("*"))  # no bundle pulled
    c = dry(fresh, "--no-cache")
    assert c["action"] == "build" and c["substitute"] is None and c["unreachable"] == []
    assert "would build" in rb("plan", recipe, "--no-cache", env=fresh).stdout
    c = dry(builder)
    assert c["action"] == "cached" and c["substitute"] is None
    assert "cached locally" in rb("plan", recipe, env=builder).stdout
    closed = f"oci://127.0.0.1:{registry.free_port()}/rocmbuild/cache"
    _config([closed], [fleet["public"]])
    quick = {**fresh, "ROCMBUILD_DOWNLOAD_RETRIES": "0"}
    c = dry(quick)
    assert c["action"] == "build" and c["unreachable"] == [closed]
    assert f"would build ({closed} unreachable)" in rb("plan", recipe, env=quick).stdout


def _provision(env: dict) -> subprocess.CompletedProcess:
    from tests.support.cli import REPO

    shim = Path(env["SHIM_DIR"]) / "rocmbuild-bin"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m rocmbuild "$@"\n')
    shim.chmod(0o755)
    full = {**os.environ, **env, "ROCMBUILD_BIN": str(shim)}
    return subprocess.run(["bash", str(REPO / "examples" / "provision.sh")], capture_output=True, text=True,
                          env=full, stdin=subprocess.DEVNULL, timeout=600)


def test_provision_sh_with_a_cache_url_and_key_compiles_nothing_on_the_second_machine(
        fleet, oci_registry, target_env, tmp_path):
    url = oci_registry.url()
    builder = _home(tmp_path, "builder")
    built = _build_and_push(fleet, url, builder)
    compiled = _compiles(fleet["count"])
    env = target_env("3.5.0", compile_version="3.5.0", name="machine-2")
    config = tmp_path / "etc" / "rocmbuild" / "config.toml"
    machine = {**_home(tmp_path, "2"), "SHIM_DIR": str(tmp_path), "ROCMBUILD_ENV": str(env.prefix),
               "ROCMBUILD_RECIPE": str(fleet["recipe"]), "ROCMBUILD_CACHE_URL": url,
               "ROCMBUILD_PUBLIC_KEY": fleet["public"], "ROCMBUILD_CONFIG": str(config),
               "ROCMBUILD_REQUIRE_CACHE": "1"}
    first = _provision(machine)
    assert first.returncode == 0, first.stderr
    [line] = first.stdout.splitlines()
    assert line.startswith(f"rocmbuild: ok apply changed env={env.prefix} source=recipe:{fleet['recipe']} txn=0001-")
    assert line.endswith("version=3.5.0->3.5.1 exit=0")
    assert _compiles(fleet["count"]) == compiled, "the second machine ran the compiler"
    assert f'url = "{url}"' in config.read_text() and fleet["public"] in config.read_text()
    status = _json(rb("status", "--env", str(env.prefix), "--json", env={**_home(tmp_path, "2")}))
    [eff] = status["changes"]["in_effect"]
    assert eff["substituted"]["url"] == url and eff["substituted"]["signer"] == "lab-1"
    assert Path(eff["artifact"]).name == built["key"]
    ino = config.stat().st_ino
    again = _provision(machine)  # every boot: nothing changes, the config file is not rewritten
    assert again.returncode == 0 and again.stdout.splitlines() == [
        f"rocmbuild: ok apply unchanged env={env.prefix} source=recipe:{fleet['recipe']} txn=none version=3.5.1 exit=0"]
    assert config.stat().st_ino == ino and _compiles(fleet["count"]) == compiled
    bad = _provision({**machine, "ROCMBUILD_PUBLIC_KEY": 'lab-1:abc"\n[sign]'})
    assert bad.returncode == 2 and "NAME:BASE64" in bad.stdout and config.stat().st_ino == ino
