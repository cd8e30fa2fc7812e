"""rocmbuild's state lives under ``$XDG_STATE_HOME/rocmbuild``, not in the cache: the state of an
``--allow-outside-prefix`` target survives ``rm -rf ~/.cache/rocmbuild``, and state an older
release left in the cache moves on the first run, with one note (swap/migrate.py)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from rocmbuild.home import state_home
from rocmbuild.swap import migrate
from tests.support.cli import rb
from tests.support.envs import stage_library
from tests.support.snapshots import snapshot

pytestmark = pytest.mark.slow


def test_state_home_rules(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCMBUILD_HOME", str(tmp_path / "h"))
    assert state_home() == tmp_path / "h" / "state"  # hermetic: one directory holds everything
    monkeypatch.setenv("ROCMBUILD_STATE_HOME", str(tmp_path / "s"))
    assert state_home() == tmp_path / "s"
    monkeypatch.delenv("ROCMBUILD_STATE_HOME")
    monkeypatch.delenv("ROCMBUILD_HOME")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_home() == tmp_path / "xdg" / "rocmbuild"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert state_home() == tmp_path / "user" / ".local" / "state" / "rocmbuild"


@pytest.fixture
def outside_env(target_env, fixture_libs, tmp_path):
    env = target_env("3.5.0", compile_version="3.5.1")
    system = tmp_path / "opt-rocm" / "lib"
    stage_library(fixture_libs("3.5.0"), system)
    env.configure(load=str(system / "libMIOpen.so.1"))
    return env, system


def test_old_state_moves_once_and_rollback_survives_rm_of_the_cache(txn_home, outside_env, tmp_path):
    env, system = outside_env
    cache = tmp_path / "xdg-cache"
    # an older release: the state inside the cache home
    old = {"ROCMBUILD_HOME": "", "XDG_CACHE_HOME": str(cache), "ROCMBUILD_STATE_HOME": str(cache / "rocmbuild")}
    sys_before, env_before = snapshot(system.parent), snapshot(env.prefix)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--allow-outside-prefix", "--json", env=old)
    assert r.returncode == 0, r.stderr
    sdir = Path(json.loads(r.stdout)["target"]["state_dir"])
    assert sdir.parent == cache / "rocmbuild" / "targets" and (sdir / "journal").is_dir()
    assert list((cache / "rocmbuild" / "known-targets").glob("*.json"))

    new = {"ROCMBUILD_HOME": "", "ROCMBUILD_STATE_HOME": "", "XDG_CACHE_HOME": str(cache),
           "XDG_STATE_HOME": str(tmp_path / "xdg-state")}
    moved_to = tmp_path / "xdg-state" / "rocmbuild"
    first = rb("history", "--env", env.prefix, env=new)
    assert first.returncode == 0, first.stderr
    second = rb("history", "--env", env.prefix, "--json", env=new)
    assert len(json.loads(second.stdout)["transactions"]) == 1
    third = rb("history", "--env", env.prefix, env=new)
    notes = [line for r in (first, second, third) for line in r.stderr.splitlines() if "moved rocmbuild's state" in line]
    assert len(notes) == 1 and notes[0].startswith("note: ") and str(moved_to) in notes[0], first.stderr
    assert not (cache / "rocmbuild" / "targets").exists() and not (cache / "rocmbuild" / "known-targets").exists()
    assert (moved_to / "targets" / sdir.name / "journal").is_dir()
    (record,) = (moved_to / "known-targets").glob("*.json")
    assert json.loads(record.read_text())["state_dir"] == str(moved_to / "targets" / sdir.name)
    listing = json.loads(rb("cache", "list", "--json", env=new).stdout)
    assert [(t["state_dir"], t["exists"]) for t in listing["targets"]] == [(str(moved_to / "targets" / sdir.name), True)]

    shutil.rmtree(cache)  # what users do to a cache
    back = rb("rollback", "--env", env.prefix, env=new)
    assert back.returncode == 0, back.stderr
    assert snapshot(system.parent) == sys_before and snapshot(env.prefix) == env_before


def test_the_note_is_printed_once(tmp_path):
    cache, state = tmp_path / "cache", tmp_path / "state"
    (cache / "rocmbuild" / "known-targets").mkdir(parents=True)
    rec = {"state_dir": "/env/.rocmbuild", "prefix": "/env", "registered": "2025-01-01T00:00:00+00:00"}
    (cache / "rocmbuild" / "known-targets" / "0123456789abcdef.json").write_text(json.dumps(rec))
    env = {"ROCMBUILD_HOME": "", "XDG_CACHE_HOME": str(cache), "XDG_STATE_HOME": str(state)}
    first = rb("recipes", env=env)
    assert first.returncode == 0, first.stderr
    assert [line for line in first.stderr.splitlines() if line.startswith("note: moved rocmbuild's state")], first.stderr
    assert json.loads((state / "rocmbuild" / "known-targets" / "0123456789abcdef.json").read_text()) == rec
    second = rb("recipes", env=env)
    assert "moved" not in second.stderr


def test_a_state_dir_in_use_stays_until_the_next_run(tmp_path, capsys):
    cache, state = tmp_path / "cache", tmp_path / "state"
    sdir = cache / "targets" / "0123456789abcdef"
    (sdir / "journal").mkdir(parents=True)
    (sdir / "journal" / "0001.json").write_text("{}")
    (sdir / "lock").write_text("")
    fd = os.open(sdir / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a transaction runs on it
        assert migrate.migrate(cache, state) == 0
        assert (sdir / "journal" / "0001.json").is_file() and "in use by a running rocmbuild" in capsys.readouterr().err
    finally:
        os.close(fd)
    assert migrate.migrate(cache, state) == 1
    assert (state / "targets" / sdir.name / "journal" / "0001.json").read_text() == "{}"
    assert not (cache / "targets").exists()


def test_an_entry_in_both_places_is_never_overwritten(tmp_path, capsys):
    cache, state = tmp_path / "cache", tmp_path / "state"
    for root, text in ((cache, "old"), (state, "new")):
        (root / "targets" / "0123456789abcdef").mkdir(parents=True)
        (root / "targets" / "0123456789abcdef" / "history.jsonl").write_text(text)
    assert migrate.migrate(cache, state) == 0
    assert "exists already" in capsys.readouterr().err
    assert (state / "targets" / "0123456789abcdef" / "history.jsonl").read_text() == "new"
    assert (cache / "targets" / "0123456789abcdef" / "history.jsonl").read_text() == "old"
