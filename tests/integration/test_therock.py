"""TheRock's wheels, both generations: torch loads MIOpen through ``rocm_sdk``'s preload (the first
sorted ``libMIOpen.so*`` in the libraries package's ``lib/``), so apply, verify and rollback work
there, stray names matching that glob are found, reported and refused (or moved aside and put
back), and nothing rocmbuild makes ever matches it.

Real venvs with the stand-in ``rocm_sdk`` and a fake torch whose ``_rocm_init.py`` preloads
through it (tests/support/therock.py), real libMIOpen builds, the session's real artifacts, real
``python -m rocmbuild`` processes; the crash points are the protocol's failpoints (a real
``os._exit(137)``).
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import rb
from tests.support.snapshots import inodes, snapshot
from tests.support.therock import GENERATIONS, preload_path

pytestmark = pytest.mark.slow

STRAY = "libMIOpen.so.1.0.backup_system"  # the manual procedure's backup


def _json(r):
    assert r.stdout, r.stderr
    return json.loads(r.stdout)


def _status(env, extra_env=None):
    r = rb("status", "--env", env.prefix, "--json", env=extra_env)
    assert r.returncode == 0, r.stderr
    return _json(r)


def _miopen(status):
    return [x for x in status["libraries"] if x["kind"] == "miopen"]


def _glob(libdir: Path) -> list[str]:
    return sorted(n for n in os.listdir(libdir) if fnmatch.fnmatchcase(n, "libMIOpen.so*"))


@pytest.mark.parametrize("generation", GENERATIONS)
def test_both_generations_apply_verify_and_roll_back_under_the_preload(txn_home, therock_env, generation):
    env = therock_env("3.5.0", generation=generation, compile_version="3.5.1")
    libdir = env.libfile.parent
    assert preload_path(env) == str(env.libfile)  # the stand-in preloads the package's file
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    [lib] = _miopen(_status(env))
    assert lib["path"] == str(env.libfile) and lib["layout"] == "therock" and lib["strays"] == []
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    data = _json(r)
    assert data["plan"]["layout"] == "therock" and Path(data["plan"]["library"]) == env.libfile
    assert env.libfile.read_bytes() == txn_home.artifacts["mini"].file("lib/libMIOpen.so.1.0").read_bytes()
    assert _glob(libdir) == ["libMIOpen.so.1"]  # no name added: the preload's first is the placed file
    v = rb("verify", "--env", env.prefix, "--expect", "3.5.1", "--expect-file", env.libfile)
    assert v.returncode == 0, v.stderr
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids


@pytest.mark.parametrize("generation", GENERATIONS)
def test_a_stray_backup_is_reported_refused_then_moved_aside_and_restored(txn_home, therock_env, generation):
    env = therock_env("3.5.0", generation=generation, compile_version="3.5.1")
    stray = env.libfile.parent / STRAY
    shutil.copy2(env.libfile, stray)  # the seed's `cp ... .backup_system`
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    [lib] = _miopen(_status(env))
    assert [(s["path"], s["first"]) for s in lib["strays"]] == [(str(stray), False)]
    assert "TheRock's preload" in lib["strays"][0]["why"]
    text = rb("status", "--env", env.prefix)
    assert f"stray {stray}" in text.stdout + text.stderr
    doc = _json(rb("doctor", "--env", env.prefix, "--json"))
    [check] = [c for c in doc["checks"] if c["name"] == "stray files"]
    assert check["status"] == "fail" and str(stray) in check["detail"] and "--move-strays" in check["fix"]
    for args in (("--dry-run",), ()):
        r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, *args)
        assert r.returncode == 2, r.stderr
        assert str(stray) in r.stderr and "TheRock's preload" in r.stderr and "--move-strays" in r.stderr
        assert snapshot(env.prefix) == before and inodes(env.prefix) == ids  # nothing changed, no state dir
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--move-strays", "--json")
    assert r.returncode == 0, r.stderr
    data = _json(r)
    assert [a["path"] for a in data["plan"]["actions"] if a["role"] == "stray"] == [str(stray)]
    assert _glob(env.libfile.parent) == ["libMIOpen.so.1"]
    backups = [p for p in (env.prefix / ".rocmbuild/backups").rglob("*") if p.name.endswith(STRAY)]
    assert len(backups) == 1 and backups[0].stat().st_ino == ids[str(stray.relative_to(env.prefix))][1]
    assert _miopen(_status(env))[0]["strays"] == []
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids  # the stray is back, its own inode


def test_a_stray_sorted_first_is_what_the_preload_loads(txn_home, therock_env):
    """A hand copy ``libMIOpen.so`` sorts before ``libMIOpen.so.1``: the process really loads it
    (the probe sees the preload's choice), apply refuses it, and with --move-strays the new bytes
    go to the package's ``libMIOpen.so.1`` -- which the preload then loads; rollback brings the
    stray back, and it loads again."""
    env = therock_env("3.5.0", compile_version="3.5.1")
    first = env.libfile.parent / "libMIOpen.so"
    shutil.copy2(env.libfile, first)
    assert preload_path(env) == str(first)
    [lib] = _miopen(_status(env))
    assert lib["path"] == str(first)  # /proc/self/maps after `import torch`: the preload's pick
    assert [(s["path"], s["first"]) for s in lib["strays"]] == [(str(first), True)]
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)
    assert r.returncode == 2
    assert "libMIOpen.so (file): sorted first, it is what TheRock's preload loads" in r.stderr
    assert snapshot(env.prefix) == before
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--move-strays", "--json")
    assert r.returncode == 0, r.stderr
    data = _json(r)
    assert data["plan"]["library"] == str(env.libfile) and data["plan"]["library_before"] == str(first)
    assert not first.exists() and _miopen(_status(env))[0]["path"] == str(env.libfile)
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
    assert _miopen(_status(env))[0]["path"] == str(first)


def test_ROCM_SDK_PRELOAD_LIBRARIES_is_honoured_by_the_probe(therock_env):
    """A torch whose ``_rocm_init`` does not name miopen loads it only when the caller's
    ``ROCM_SDK_PRELOAD_LIBRARIES`` does: the probe runs with that environment and reports it."""
    env = therock_env("3.5.0", preload=())
    r = rb("status", "--env", env.prefix, "--json")  # torch's _C then finds no libMIOpen.so.1 loaded
    assert r.returncode == 2 and "libMIOpen.so.1" in _json(r)["error"]["message"], r.stdout
    s = _status(env, {"ROCM_SDK_PRELOAD_LIBRARIES": " miopen ;"})  # split on , and ;, stripped
    assert [x["path"] for x in _miopen(s)] == [str(env.libfile)]


@pytest.mark.parametrize("point", ["after-stage", "after-backup", "mid-swap", "after-swap"])
def test_no_name_rocmbuild_makes_matches_the_preload_glob(txn_home, therock_env, point):
    """Killed at each step of an apply that also moves a stray: every name in the lib dir that
    matches ``libMIOpen.so*`` is the package's file or the stray the user made; rocmbuild's temps
    are there (dot names) but outside the glob, its backups are in the state dir, and the preload
    loads a whole library."""
    env = therock_env("3.5.0", compile_version="3.5.1")
    stray = env.libfile.parent / STRAY
    shutil.copy2(env.libfile, stray)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--move-strays",
           env={"ROCMBUILD_FAILPOINTS": point})
    assert r.returncode == 137, r.stderr
    names = os.listdir(env.libfile.parent)
    assert set(_glob(env.libfile.parent)) <= {"libMIOpen.so.1", STRAY}
    assert "libMIOpen.so.1" in names
    temps = [n for n in names if "rocmbuild" in n]
    assert all(n.startswith(".") for n in temps)
    if point == "after-stage":
        assert temps  # the staged file is there, under a name the glob never matches
    assert preload_path(env) == str(env.libfile)
    assert _miopen(_status(env))  # recovery first, then a loadable library
