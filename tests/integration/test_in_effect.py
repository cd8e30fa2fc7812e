"""One model of "in effect" (swap/ineffect.py) as a person reads it: status's headline and list,
history's state column, rollback --to N (the state after N), redo, cache list's words, and the
one-line pruning note -- the CLI's text and its --json, on real fake-torch envs."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.support.cli import rb
from tests.support.snapshots import snapshot

pytestmark = pytest.mark.slow


def _ok(*args, json_out: bool = True):
    r = rb(*args, *(["--json"] if json_out else []))
    assert r.returncode == 0, (args, r.stderr[-2000:])
    return json.loads(r.stdout) if json_out else r


@pytest.fixture
def env(target_env):
    return target_env("3.5.0", layout="conda", compile_version="3.5.1")


@pytest.fixture
def private_home(txn_world, tmp_path, monkeypatch):
    """A private copy of the cache: a test that writes a target file in place must not reach the
    shared artifacts."""
    home = tmp_path / "home"
    shutil.copytree(txn_world.home, home, symlinks=True)
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))
    return txn_world


def test_after_applies_and_rollbacks_status_and_history_never_call_a_rollback_in_effect(txn_home, env):
    p = env.prefix
    ids = []
    for recipe in ("mini", "mini-fix", "mini"):
        ids.append(_ok("apply", txn_home.recipe(recipe), "--env", p)["txn"])
        _ok("rollback", "--env", p)
    s = _ok("status", "--env", p)
    assert s["changes"]["in_effect"] == [] and s["summary"].startswith("stock 3.5.0: every apply")
    assert s["changes"]["redo"]["reapplies"] == [ids[-1]] and s["version_drift"] is None
    text = _ok("status", "--env", p, json_out=False).stdout
    assert "in effect (oldest first)" not in text and "rollback" not in text.split("\n")[0]
    assert f"`rocmbuild redo` would re-apply {ids[-1][:4]}" in text
    h = _ok("history", "--env", p)["transactions"]
    assert [t["kind"] for t in h] == ["apply", "rollback"] * 3
    assert not any(t["in_effect"] for t in h)
    assert [t["undone_by"] for t in h if t["kind"] == "apply"] == [h[1]["id"], h[3]["id"], h[5]["id"]]
    assert [t["redo_next"] for t in h] == [False] * 5 + [True]
    rows = [line for line in _ok("history", "--env", p, json_out=False).stdout.splitlines() if " rollback " in line]
    assert len(rows) == 3 and not any("in effect" in r for r in rows), rows
    assert any(f"undone by {h[5]['id'][:4]}" in line for line in _ok("history", "--env", p, json_out=False).stdout.splitlines())
    # one apply in effect: status lists it alone, over stock
    a = _ok("apply", txn_home.recipe("mini"), "--env", p)["txn"]
    s = _ok("status", "--env", p)
    assert [t["id"] for t in s["changes"]["in_effect"]] == [a] and s["changes"]["redo"] is None
    assert s["summary"] == f"mini 3.5.1 (txn {a[:4]}) over stock 3.5.0"


def test_the_headline_says_drift_when_torch_loads_another_version():
    """The history says 3.5.1 is in place, torch loads 3.5.0 (a library written over, a forced
    rollback over drift): DRIFT in the headline, and ``version_drift`` in the JSON."""
    from rocmbuild.results import InEffect, StatusChanges, Stock
    from rocmbuild.results.stateresult import summary, version_drift

    top = InEffect("0001-20260101T000000Z", "apply", "miopen-demo", None, "3.5.0", "3.5.1", ())
    c = StatusChanges(in_effect=(top,), stock=Stock("0001-20260101T000000Z", "3.5.0"))
    assert version_drift(c, "3.5.0") == {"placed": "3.5.1", "loaded": "3.5.0"}
    assert summary(c, "3.5.0") == ("miopen-demo 3.5.1 (txn 0001) over stock 3.5.0; DRIFT: torch loads 3.5.0, "
                                   "not the 3.5.1 rocmbuild's history says is in place")
    assert version_drift(c, "3.5.1") is None and "DRIFT" not in summary(c, "3.5.1")
    undone = StatusChanges(stock=Stock("0001-20260101T000000Z", "3.5.0"))
    assert "DRIFT: torch loads 3.5.1" in summary(undone, "3.5.1")


def test_rollback_to_n_is_the_state_after_n_and_redo_brings_back_what_a_rollback_undid(txn_home, env):
    p = env.prefix
    s0 = snapshot(p)
    a = _ok("apply", txn_home.recipe("mini"), "--env", p)["txn"]
    s_a = snapshot(p)
    b = _ok("apply", txn_home.recipe("mini-fix"), "--env", p)["txn"]
    s_b = snapshot(p)
    r = _ok("rollback", "--env", p, "--to", a[:4].lstrip("0"))  # `--to 1`: a stays in effect
    assert r["undoes"] == [b] and r["in_effect"] == [a] and r["restores_to"] == a and snapshot(p) == s_a
    text = rb("redo", "--env", p)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"redid {b}") and snapshot(p) == s_b
    assert _ok("status", "--env", p)["changes"]["in_effect"][-1]["redone_by"]
    # nothing to redo now: exit 2 with a hint
    r = rb("redo", "--env", p, "--json")
    assert r.returncode == 2 and "nothing to redo" in json.loads(r.stdout)["error"]["message"]
    assert "rollback" in json.loads(r.stdout)["error"]["hint"]
    # --to 0: the stock state; the text says what is in effect now and how to redo
    out = _ok("rollback", "--env", p, "--to", "0", json_out=False).stdout
    assert "in effect now: no apply (the stock state); `rocmbuild redo` re-applies what this undid" in out
    assert snapshot(p) == s0
    # cache list says in words what the redo role means
    listing = _ok("cache", "list", json_out=False).stdout
    assert f"applied by txn {b[:4]}, undone by a rollback; `rocmbuild redo` re-applies it" in listing
    assert "(redo, txn" not in listing


def test_rollback_undo_txn_is_the_state_right_before_that_apply(txn_home, env):
    """``--undo TXN`` (what a rollout undoes its own apply with): TXN and every apply after it out of
    effect; again with --if-applied: nothing to do, exit 0; an id that is no apply: exit 2."""
    p = env.prefix
    s0 = snapshot(p)
    a = _ok("apply", txn_home.recipe("mini"), "--env", p)["txn"]
    s1 = snapshot(p)
    b = _ok("apply", txn_home.recipe("mini-fix"), "--env", p)["txn"]
    d = _ok("rollback", "--env", p, "--undo", b)
    assert d["undoes"] == [b] and d["in_effect"] == [a] and snapshot(p) == s1
    _ok("redo", "--env", p)
    d = _ok("rollback", "--env", p, "--undo", a[:4])
    assert sorted(d["undoes"]) == sorted([a, b]) and d["in_effect"] == [] and snapshot(p) == s0
    again = _ok("rollback", "--env", p, "--undo", a, "--if-applied")
    assert again["nothing_to_roll_back"] is True and again["changed"] is False
    r = rb("rollback", "--env", p, "--undo", d["txn"], "--json")
    assert r.returncode == 2 and "not an apply that took effect" in json.loads(r.stdout)["error"]["message"]
    r = rb("rollback", "--env", p, "--undo", a, "--to", "0", "--json")
    assert r.returncode == 2 and "not both" in json.loads(r.stdout)["error"]["message"]
    for bad, says in (("0009", "--undo 0009: no transaction"), ("", "--undo needs a transaction")):
        r = rb("rollback", "--env", p, "--undo", bad, "--json")  # the error names the option given
        err = json.loads(r.stdout)["error"]
        assert r.returncode == 2 and err["message"].startswith(says), err
        assert "--to" not in err["message"] + err["hint"]


def test_pruning_says_so_once_only_for_applies_in_effect_and_never_with_q(txn_home, env):
    p = env.prefix
    notes = []
    for n in range(4):
        r = rb("apply", txn_home.recipe("mini" if n % 2 else "mini-fix"), "--env", p, "--keep", "2")
        assert r.returncode == 0, r.stderr
        notes.append(r.stderr.count("removed the backups"))
    assert notes[:2] == [0, 0] and all(n <= 1 for n in notes) and sum(notes) >= 1
    r = rb("apply", txn_home.recipe("mini-fix"), "--env", p, "--keep", "2", "-q")
    assert r.returncode == 0 and "backups" not in r.stderr
    # a rollback that prunes only undone transactions' backups says nothing about them
    r = rb("rollback", "--env", p, "--keep", "1")
    assert r.returncode == 0 and "removed the backups" not in r.stderr
    # redo works: the backups of the one just rolled back were kept
    assert rb("redo", "--env", p, "--keep", "1").returncode == 0
    assert os.path.isdir(p / ".rocmbuild/backups")


def _runtime_version(status_text: str) -> str:
    """The version on status's runtime line (``torch ...; compiled against X, runtime Y, ...``)."""
    line = next(x for x in status_text.splitlines() if ", runtime " in x)
    return line.split(", runtime ", 1)[1].split(",", 1)[0]


def test_a_library_written_over_then_applied_and_rolled_back_reads_drift_in_the_headline(private_home, target_env,
                                                                                       fixture_libs):
    """Issue 19: apply, overwrite the library in place, apply again, ``rollback --force``. The
    rollback brings back what was on disk before the second apply (the 3.5.0 bytes written over
    the first apply's file), so torch loads 3.5.0 while the history says the first apply's 3.5.1
    is in place: the headline says DRIFT, agreeing with the runtime line and with ``verify``."""
    env = target_env("3.5.0", layout="wheel", compile_version="3.5.1")
    p = env.prefix
    a = _ok("apply", private_home.recipe("mini"), "--env", p)["txn"]
    ino = os.stat(env.libfile).st_ino
    with open(fixture_libs("3.5.0") / "libMIOpen.so.1.0", "rb") as src, open(env.libfile, "r+b") as dst:
        dst.truncate(0)
        dst.write(src.read())  # in place, as `cp` does: the same inode, other bytes
    assert os.stat(env.libfile).st_ino == ino
    before = _ok("status", "--env", p, json_out=False).stdout
    assert "DRIFT" in before.splitlines()[0] and _runtime_version(before) == "3.5.0"
    b = _ok("apply", private_home.recipe("mini"), "--env", p)["txn"]
    r = rb("rollback", "--force", "--env", p)
    assert r.returncode == 0, r.stderr[-2000:]
    text = _ok("status", "--env", p, json_out=False).stdout
    headline = text.splitlines()[0]
    assert _runtime_version(text) == "3.5.0"
    assert headline.startswith(f"mini 3.5.1 (txn {a[:4]}) over stock 3.5.0"), headline
    assert "DRIFT: torch loads 3.5.0, not the 3.5.1 rocmbuild's history says is in place" in headline
    s = _ok("status", "--env", p)
    assert s["version_drift"] == {"placed": "3.5.1", "loaded": "3.5.0"}
    assert [t["id"] for t in s["changes"]["in_effect"]] == [a] and b not in s["summary"]
    assert rb("verify", "--env", p, "--expect", "3.5.1").returncode == 4
    # whenever the runtime line's version is not the headline's, the headline says DRIFT
    for state in (before, text):
        first = state.splitlines()[0]
        if _runtime_version(state) not in first.split(" over ", 1)[0]:
            assert "DRIFT" in first, first


def test_builds_that_differ_by_a_define_are_told_apart_in_cache_list_history_and_status(private_home, env):
    """Issue 27, item 8: three builds of one recipe at one commit, differing by a -D define, read as
    three different lines: ``cache list``, ``history`` and ``status`` say what differs (-v: all)."""
    recipe, p = private_home.recipe("mini"), env.prefix
    for value in ("1", "2"):
        assert rb("build", recipe, "-D", f"MIOPEN_FIXTURE_PAD_MB={value}").returncode == 0
    listed = _ok("cache", "list", json_out=False).stdout
    flavored = [ln.strip() for ln in listed.splitlines() if "MIOPEN_FIXTURE_PAD_MB" in ln]
    assert sorted(flavored) == ["build: -DMIOPEN_FIXTURE_PAD_MB unset", "build: -DMIOPEN_FIXTURE_PAD_MB=1",
                                "build: -DMIOPEN_FIXTURE_PAD_MB=2"], listed
    arts = [a for a in _ok("cache", "list")["artifacts"] if a["recipe"] == "mini"]
    assert {a["build"].get("-DMIOPEN_FIXTURE_PAD_MB") for a in arts} == {None, "1", "2"}
    everything = rb("cache", "list", "-v").stdout
    assert "build type Release" in everything and "build type" not in listed  # what is the same: only with -v

    _ok("apply", recipe, "--env", p, "-D", "MIOPEN_FIXTURE_PAD_MB=1")
    _ok("apply", recipe, "--env", p, "-D", "MIOPEN_FIXTURE_PAD_MB=2")
    hist = rb("history", "--env", p).stdout
    assert "(-DMIOPEN_FIXTURE_PAD_MB=1)" in hist and "(-DMIOPEN_FIXTURE_PAD_MB=2)" in hist, hist
    text = _ok("status", "--env", p, json_out=False).stdout
    assert "    build: -DMIOPEN_FIXTURE_PAD_MB=2" in text and "    build: -DMIOPEN_FIXTURE_PAD_MB=1" in text, text
    top = _ok("status", "--env", p)["changes"]["in_effect"][-1]
    assert top["build"]["-DMIOPEN_FIXTURE_PAD_MB"] == "2" and top["differs"] == {"-DMIOPEN_FIXTURE_PAD_MB": "2"}
    assert "MiB on disk" in hist  # backups in KiB/MiB, as cache list says sizes, not bytes
