"""rocmbuild.proc.runas on real files: who owns a target (a venv's ``bin/python`` link is the owner's
even when it points at root's interpreter), the three policies, and nothing changes for a run
that is not root's; the supervisor really drops a child to that user."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from rocmbuild.proc import runas
from rocmbuild.proc import runner
from rocmbuild.errors import TargetError

OWNER = 1000


@pytest.fixture(autouse=True)
def _policy():
    yield
    runas.set_policy("owner")


def _tree(tmp_path: Path, *, owned: str) -> Path:
    """prefix/bin/python -> sys.executable; ``owned``: which path is chowned to uid 1000."""
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    py = prefix / "bin" / "python"
    os.symlink(sys.executable, py)
    target = {"prefix": prefix, "bin": prefix / "bin", "link": py}.get(owned)
    if target is not None:
        os.chown(target, OWNER, OWNER, follow_symlinks=False)
    return py


@pytest.mark.parametrize("owned", ["prefix", "bin", "link"])
def test_the_owner_is_the_first_path_not_roots(tmp_path, owned):
    if os.geteuid() != 0:
        pytest.fail("run as root (chown)")
    py = _tree(tmp_path, owned=owned)
    assert runas.owner(py) == (OWNER, OWNER)
    assert runas.owner(None, py.parent.parent) == ((OWNER, OWNER) if owned == "prefix" else None)
    who = runas.for_target(py)
    assert who is not None and who.uid == OWNER and OWNER in (who.gid, *who.groups)


def test_root_owned_is_nobodys_and_a_run_that_is_not_roots_changes_nothing(tmp_path, monkeypatch):
    py = _tree(tmp_path, owned="none")
    assert runas.owner(py) is None and runas.for_target(py) is None
    py2 = _tree(tmp_path / "b", owned="prefix")
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    assert runas.for_target(py2) is None


def test_refuse_names_the_owner_with_exit_2_and_root_warns_once(tmp_path, capsys):
    py = _tree(tmp_path, owned="prefix")
    runas.set_policy("refuse")
    with pytest.raises(TargetError) as e:
        runas.for_target(py, py.parent.parent)
    assert e.value.exit_code == 2 and f"(uid {OWNER})" in e.value.message and "--run-as owner" in e.value.hint
    runas.set_policy("root")
    runas._state["warned"] = False
    assert runas.for_target(py) is None and runas.for_target(py) is None
    assert capsys.readouterr().err.count("runs as root (--run-as root)") == 1


def test_the_supervisor_drops_the_child_to_the_user(tmp_path):
    who = runas.identity(OWNER, OWNER)
    done = runner.capture(["/usr/bin/id", "-u"], user=who, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == str(OWNER), done.stderr
    done = runner.capture(["/usr/bin/env"], user=who, timeout=30)
    env = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert env.get("HOME") == who.home and env.get("USER") == who.name
    assert runner.capture(["/usr/bin/id", "-u"], timeout=30).stdout.strip() == str(os.geteuid())
