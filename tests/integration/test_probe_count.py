"""One probe before, one after (issue 28): an apply starts the target's Python for the plan's
probe and the verification probe, nothing else; after a real build the target is probed again
only when something that decides what loads changed meanwhile.

The count is real: the env's ``bin/python`` is replaced by a wrapper that appends a line to a
file on each start and execs the interpreter (the venv's own link, so it is still the venv).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import rb

pytestmark = pytest.mark.slow


def _counting(env, log: Path) -> None:
    py = Path(env.python)
    real = py.with_name("python-counted")
    os.rename(py, real)  # the venv's link to the interpreter, still under the venv's bin/
    py.write_text(f'#!/bin/sh\necho start >> "{log}"\nexec "{real}" "$@"\n')
    py.chmod(0o755)
    log.write_text("")


def _starts(log: Path) -> int:
    return len(log.read_text().split())


def test_a_cached_apply_starts_the_targets_python_twice(txn_home, target_env, tmp_path):
    env = target_env("3.5.0", compile_version="3.5.1")
    log = tmp_path / "starts"
    _counting(env, log)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"]["ok"]
    assert _starts(log) == 2, "the plan's probe and the verification probe only"


def test_an_apply_that_builds_probes_once_before_and_once_after(txn_home, target_env, tmp_path, monkeypatch):
    home = tmp_path / "home"  # a copy of the session's home: this test's build must not land in it
    shutil.copytree(txn_home.home, home, symlinks=True)
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))
    env = target_env("3.5.0", compile_version="3.5.1")
    log = tmp_path / "starts"
    _counting(env, log)
    r = rb("apply", txn_home.recipe("mini"), "-D", "ROCMBUILD_TEST_PROBE_COUNT=1", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"]["ok"]
    assert _starts(log) == 2, "the target did not change during the build: it is not probed again"


def test_a_target_changed_during_the_build_is_probed_again(txn_home, target_env, tmp_path, monkeypatch):
    """The skipped probe is one whose answer is proven unchanged: a cmake that drops a file in the
    env's library dir (as a conda install during the build would) makes the apply probe again."""
    home = tmp_path / "home"
    shutil.copytree(txn_home.home, home, symlinks=True)
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))
    env = target_env("3.5.0", compile_version="3.5.1")
    log = tmp_path / "starts"
    _counting(env, log)
    shims = tmp_path / "shims"
    shims.mkdir()
    real = shutil.which("cmake")
    assert real is not None
    (shims / "cmake").write_text(f'#!/bin/sh\ntouch "{env.libfile.parent}/libunrelated.so"\nexec "{real}" "$@"\n')
    (shims / "cmake").chmod(0o755)
    r = rb("apply", txn_home.recipe("mini"), "-D", "ROCMBUILD_TEST_PROBE_COUNT=2", "--env", env.prefix, "--json",
           env={"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"]["ok"]
    assert _starts(log) == 3, "a library dir that changed during the build: probed before, again after it, verified"
