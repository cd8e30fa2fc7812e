"""``changed`` in the JSON of every verb that can change something (docs/json.md, "changed"):
for each, one run that changes something (true) and one that does not (false), through the
real CLI; a read-only verb has no ``changed`` key at all. What each run left is checked too
(the file's inode kept, the artifact in the cache), so ``changed`` cannot simply be a constant."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.cli import rb


def _run(*args, env=None) -> dict:
    r = rb(*args, "--json", env=env)
    assert r.stdout.strip(), r.stderr
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["ok"], (r.returncode, r.stderr, d.get("error"))
    return d


def _copy_home(world, home: Path) -> dict:
    for art in world.artifacts.values():
        shutil.copytree(art.path, home / "artifacts" / art.path.name, symlinks=True)
    return {"ROCMBUILD_HOME": str(home)}


def test_apply_rollback_recover(txn_home, target_env):
    p = target_env("3.5.0", layout="conda", compile_version="3.5.1").prefix
    mini = txn_home.recipe("mini")
    assert _run("apply", mini, "--env", p, "--dry-run")["changed"] is False
    assert _run("apply", mini, "--env", p)["changed"] is True
    assert _run("apply", mini, "--env", p)["changed"] is False  # already applied
    assert _run("apply", mini, "--env", p, "--dry-run")["changed"] is False
    assert _run("rollback", "--env", p, "--if-applied")["changed"] is True
    assert _run("rollback", "--env", p, "--if-applied")["changed"] is False  # nothing to roll back
    assert _run("recover", "--env", p)["changed"] is False
    killed = rb("apply", mini, "--env", p, "--json", env={"ROCMBUILD_FAILPOINTS": "mid-swap"})
    assert killed.returncode == 137
    assert _run("recover", "--env", p)["changed"] is True
    for verb in ("status", "history"):
        assert "changed" not in _run(verb, "--env", p)


def test_export_and_lock_leave_an_identical_file_alone(txn_home, tmp_path):
    mini = txn_home.recipe("mini")
    bundle = tmp_path / "mini.tar.gz"
    assert _run("export", mini, "-o", bundle)["changed"] is True
    assert _run("export", mini, "-o", bundle)["changed"] is False  # reproducible: the same bytes
    bundle.write_bytes(bundle.read_bytes()[:-1] + b"x")  # the same size, other bytes
    assert _run("export", mini, "-o", bundle)["changed"] is True
    lock = tmp_path / "mini.lock.json"
    first = _run("lock", mini, "-o", lock)
    assert first["changed"] is True
    ino = lock.stat().st_ino
    again = _run("lock", mini, "-o", lock)
    assert again["changed"] is False and lock.stat().st_ino == ino and again["lock"] == first["lock"]
    assert _run("lock", mini, "-o", lock, "-D", "FOO=1")["changed"] is True and lock.stat().st_ino != ino
    assert "changed" not in _run("plan", mini)


def test_build_push_key_and_substitution(txn_home, tmp_path):
    mini = txn_home.recipe("mini")
    key = txn_home.artifacts["mini"].key
    assert _run("build", mini)["changed"] is False  # a cache hit
    secret = tmp_path / "lab.secret"
    made = _run("key", "generate", "lab", "--out", str(secret))
    assert made["changed"] is True
    url = f"file://{tmp_path / 'cache'}"
    assert _run("push", key, "--to", url, "--sign-key", str(secret))["changed"] is True
    assert _run("push", key, "--to", url, "--sign-key", str(secret))["changed"] is False  # already there
    config = tmp_path / "fleet.toml"
    config.write_text(f'[[caches]]\nurl = "{url}"\n\n[trust]\npublic_keys = ["{made["public_key"]}"]\n')
    fresh = {"ROCMBUILD_HOME": str(tmp_path / "fresh-home"), "ROCMBUILD_CONFIG": str(config)}
    first = _run("build", mini, "--require-cache", env=fresh)  # substituted: no compiler can run
    assert first["changed"] is True and first["substituted"]["url"] == url
    assert Path(first["artifact"]).is_dir()
    again = _run("build", mini, "--require-cache", env=fresh)
    assert again["changed"] is False and again["artifact"] == first["artifact"]
    assert "changed" not in _run("cache", "list", "--remote", url)


def test_cache_verify_and_gc(txn_world, tmp_path):
    env = _copy_home(txn_world, tmp_path / "home")
    assert _run("cache", "verify", env=env)["changed"] is False
    victim = Path(env["ROCMBUILD_HOME"]) / "artifacts" / txn_world.artifacts["mini"].key / "tree/share/miopen/db/gfx1151.db.txt"
    victim.chmod(0o644)
    victim.write_bytes(b"fixture perf DB\n")
    r = rb("cache", "verify", "--json", env=env)
    assert r.returncode == 3 and json.loads(r.stdout)["changed"] is True  # quarantined
    assert "changed" not in _run("cache", "list", env=env)
    assert _run("cache", "gc", "--keep-days", "0", "--dry-run", env=env)["changed"] is False
    assert _run("cache", "gc", "--keep-days", "0", env=env)["changed"] is True
    assert _run("cache", "gc", "--keep-days", "0", env=env)["changed"] is False
