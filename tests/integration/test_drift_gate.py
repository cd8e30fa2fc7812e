"""The health check fails when the fix is gone (issue 27, item 1): after a later ``pip install``
writes the stock library over what rocmbuild placed, ``verify`` exits 4 with a ``drift`` check and
``status --check`` exits 4; plain ``status`` still reports (exit 0) and says what to do. Nothing is
judged while a transaction runs; a target rocmbuild never touched has no drift check."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.support.cli import rb
from tests.support.watch import Watched

pytestmark = pytest.mark.slow


def _json(r):
    return json.loads(r.stdout)


def _reinstall_stock(env, fixture_libs) -> None:
    """What pip or conda does: a new file renamed over the placed one."""
    tmp = env.libfile.with_name(env.libfile.name + ".pip-tmp")
    shutil.copyfile(fixture_libs("3.5.0") / "libMIOpen.so.1.0", tmp)
    os.replace(tmp, env.libfile)


def test_verify_and_status_check_fail_when_the_placed_library_is_written_over(txn_home, target_env, fixture_libs):
    env = target_env("3.5.0", layout="wheel", compile_version="3.5.1")
    p = str(env.prefix)
    assert rb("apply", txn_home.recipe("mini"), "--env", p).returncode == 0
    ok = rb("verify", "--env", p, "--json")
    assert ok.returncode == 0, ok.stderr[-2000:]
    (gate,) = [c for c in _json(ok)["checks"] if c["name"] == "drift"]
    assert gate["ok"] and "mini 3.5.1" in gate["expected"]
    assert rb("status", "--env", p, "--check").returncode == 0

    _reinstall_stock(env, fixture_libs)
    v = rb("verify", "--env", p)
    assert v.returncode == 4, v.stdout + v.stderr
    assert "verified" not in v.stdout
    assert "drift: expected mini 3.5.1" in v.stderr and "torch loads 3.5.0" in v.stderr
    assert f"rocmbuild apply mini --env {p}` again" in v.stderr and f"rocmbuild rollback --force --env {p}" in v.stderr
    vj = rb("verify", "--env", p, "--json")
    assert vj.returncode == 4 and _json(vj)["error"]["type"] == "VerifyError"
    assert _json(vj)["error"]["details"]["failures"] == ["drift"]

    s = rb("status", "--env", p)  # a report: exit 0, and it says what to do, once
    assert s.returncode == 0, s.stderr
    assert "DRIFT: torch loads 3.5.0" in s.stdout.splitlines()[0]
    assert s.stdout.count(f"`rocmbuild apply mini --env {p}` again") == 1
    assert "status --check" in s.stdout and s.stderr.count("error") == 0
    c = rb("status", "--env", p, "--check", "--json")
    assert c.returncode == 4
    d = _json(c)
    assert d["ok"] is False and d["exit_code"] == 4 and d["error"]["type"] == "VerifyError"
    assert d["drift_check"]["ok"] is False and d["version_drift"] == {"placed": "3.5.1", "loaded": "3.5.0"}
    assert "rocmbuild apply mini" in d["error"]["hint"]
    t = rb("status", "--env", p, "--check")
    assert t.returncode == 4 and "rocmbuild apply mini" not in t.stdout  # the hint is on stderr, not twice
    assert t.stderr.count("rocmbuild apply mini") == 1

    # what the hint says works: apply again, and the gate passes
    assert rb("apply", txn_home.recipe("mini"), "--env", p).returncode == 0
    assert rb("verify", "--env", p).returncode == 0
    assert rb("status", "--env", p, "--check").returncode == 0


def test_a_target_rocmbuild_never_changed_has_no_drift_check(target_env):
    env = target_env("3.5.0", layout="conda")
    v = rb("verify", "--env", env.prefix, "--json")
    assert v.returncode == 0, v.stderr[-2000:]
    assert "drift" not in {c["name"] for c in _json(v)["checks"]}
    s = rb("status", "--env", env.prefix, "--check", "--json")
    assert s.returncode == 0 and _json(s)["drift_check"] is None


def test_nothing_is_judged_while_a_transaction_runs_and_an_interrupted_one_fails_the_gate(txn_home, target_env):
    env = target_env("3.5.0", layout="conda", compile_version="3.5.1")
    run = Watched(["apply", txn_home.recipe("mini"), "--env", env.prefix], tty=False,
                  env={"ROCMBUILD_PAUSEPOINTS": "after-swap", "ROCMBUILD_PAUSE_SECONDS": "30"})
    try:
        run.wait_for(lambda w: "pausepoint after-swap" in w.text(), what="the pausepoint")
        s = rb("status", "--env", env.prefix, "--check", "--json")
        assert s.returncode == 0, s.stderr
        gate = _json(s)["drift_check"]
        assert gate["ok"] and gate["skipped"] and "in progress" in gate["found"]
        assert "DRIFT" not in rb("status", "--env", env.prefix).stdout
    finally:
        run.kill()
    s = rb("status", "--env", env.prefix, "--check")  # killed: an interrupted transaction
    assert s.returncode == 4 and "UNFINISHED" in s.stderr and "rocmbuild recover" in s.stderr
    assert rb("recover", "--env", env.prefix).returncode == 0
    assert rb("status", "--env", env.prefix, "--check").returncode == 0
