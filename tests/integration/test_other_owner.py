"""Another user's code is never run as root (issue 26, class 8).

Run as root on an environment owned by another user (uid 1000 here, ``chown -R``), every verb
that runs the target's code -- its conda ``activate.d`` script, its Python (``.pth`` files run at
every start), torch -- runs it as that owner (``--run-as owner``, the default), or refuses with
exit 2 naming the owner (``--run-as refuse`` or the config's ``run_as``), or, asked, as root; the
read-only ``history`` and a ``recover`` with nothing to recover run none of it. The swap itself
runs as root and keeps the owner of what it replaces.

Each piece of the target's code appends ``<what> <uid>`` to a log: the uid that really ran it.
Real venvs of the system's Python (one uid 1000 can run: the session's interpreter lives under
``/root``, mode 0700) in a directory outside pytest's private tmp, real ``python -m rocmbuild``
processes as root, a real bash sourcing the script, real failpoints (``os._exit(137)``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli import rb
from tests.support.ownedenv import OWNER, logging_env
from tests.support.snapshots import inodes, snapshot

pytestmark = pytest.mark.slow

CANARY = b"outside every root\n"


@pytest.fixture
def world(fixture_libs):
    """(env, log, canary): a conda-like env owned by uid 1000 whose activate.d script and .pth
    file log the uid that ran them; a canary file outside every root."""
    with logging_env(fixture_libs, "rocmbuild-owner-") as (env, log, base):
        for root, dirs, files in os.walk(env.prefix):
            for n in dirs + files:
                os.chown(os.path.join(root, n), OWNER, OWNER, follow_symlinks=False)
        os.chown(env.prefix, OWNER, OWNER)
        os.chown(log, OWNER, OWNER)
        canary = base / "canary"
        canary.write_bytes(CANARY)
        yield env, log, canary


def _ran(log: Path) -> list[str]:
    """What ran since the last call, as ``what uid`` lines; the log emptied."""
    lines = log.read_text().splitlines()
    log.write_text("")
    return lines


def _as_owner(lines: list[str], *, activated: bool = True) -> None:
    assert lines, "the target's code did not run at all"
    assert {ln.split()[1] for ln in lines} == {str(OWNER)}, lines  # never as root
    assert any(ln.startswith("pth ") for ln in lines)
    if activated:
        assert any(ln.startswith("activate ") for ln in lines), lines


def _intact(canary: Path) -> None:
    assert canary.read_bytes() == CANARY and os.lstat(canary).st_nlink == 1


def _ok(*args: str) -> dict:
    r = rb(*args, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_status_activates_and_probes_as_the_owner(world):
    env, log, canary = world
    d = _ok("status", "--env", env.prefix)
    assert d["libraries"][0]["path"].startswith(str(env.prefix))
    _as_owner(_ran(log))
    _intact(canary)


def test_verify_runs_as_the_owner(world):
    env, log, canary = world
    _ok("verify", "--env", env.prefix, "--expect", "3.5.0")
    _as_owner(_ran(log))
    _intact(canary)


def test_history_runs_none_of_the_targets_code(world):
    env, log, canary = world
    d = _ok("history", "--env", env.prefix)
    assert d["prefix"] == str(env.prefix) and d["transactions"] == []
    assert _ran(log) == []  # read-only: not activated, not asked for its sys.prefix
    _intact(canary)


def test_apply_runs_the_targets_code_as_the_owner_and_keeps_its_files_its_own(txn_home, world):
    env, log, canary = world
    d = _ok("apply", txn_home.recipe("mini"), "--env", env.prefix)
    _as_owner(_ran(log))
    placed = Path(d["plan"]["library"])
    st = os.stat(placed)
    assert (st.st_uid, st.st_gid) == (OWNER, OWNER)  # the swap ran as root; the file stays the owner's
    assert os.stat(env.prefix / ".rocmbuild").st_uid == OWNER
    assert [t["verb"] for t in _ok("history", "--env", env.prefix)["transactions"]] == ["apply"]
    assert _ran(log) == []  # history with a transaction: still none of its code
    _intact(canary)


def test_rollback_runs_the_targets_code_as_the_owner(txn_home, world):
    env, log, canary = world
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    _ok("apply", txn_home.recipe("mini"), "--env", env.prefix)
    _ran(log)
    _ok("rollback", "--env", env.prefix)
    _as_owner(_ran(log))
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
    _intact(canary)


def test_recover_runs_nothing_when_nothing_is_unfinished_and_verifies_as_the_owner(txn_home, world):
    env, log, canary = world
    before = snapshot(env.prefix)
    _ok("recover", "--env", env.prefix)
    assert _ran(log) == []  # nothing to recover: the target's code never ran
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, env={"ROCMBUILD_FAILPOINTS": "after-swap"})
    assert r.returncode == 137, r.stderr
    _ran(log)
    d = _ok("recover", "--env", env.prefix)
    assert d["recovered"], d
    _as_owner(_ran(log))  # the verification of the restored state ran as the owner
    assert snapshot(env.prefix) == before
    _intact(canary)


def test_refused_with_exit_2_naming_the_owner_by_flag_or_config(world, tmp_path):
    env, log, canary = world
    for verb in (("status",), ("verify", "--expect", "3.5.0")):
        r = rb(*verb, "--env", env.prefix, "--run-as", "refuse", "--json")
        err = json.loads(r.stdout)["error"]
        assert r.returncode == 2 and "belongs to cloudsdk (uid 1000)" in err["message"], err
        assert "--run-as owner" in err["hint"] and err["details"]["owner_uid"] == OWNER
    cfg = tmp_path / "config.toml"
    cfg.write_text('run_as = "refuse"\n')
    r = rb("status", "--env", env.prefix, "--json", env={"ROCMBUILD_CONFIG": str(cfg)})
    assert r.returncode == 2 and "belongs to cloudsdk (uid 1000)" in r.stdout
    assert _ran(log) == []  # refused before any of its code ran
    r = rb("status", "--env", env.prefix, "--json", "--run-as", "owner", env={"ROCMBUILD_CONFIG": str(cfg)})
    assert r.returncode == 0, r.stderr  # the flag wins over the config
    _as_owner(_ran(log))
    _intact(canary)


def test_run_as_root_is_the_old_behaviour_said_on_stderr(world):
    env, log, canary = world
    r = rb("status", "--env", env.prefix, "--run-as", "root")
    assert r.returncode == 0, r.stderr
    assert "runs as root (--run-as root)" in r.stderr
    lines = _ran(log)
    assert lines and {ln.split()[1] for ln in lines} == {"0"}
    _intact(canary)
