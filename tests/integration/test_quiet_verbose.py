"""What a person sees with ``-q``, ``-v`` and ``-vv``: real processes, real builds, real envs.

``-q`` is one line per result on stdout (doctor: only what fails) and nothing on stderr but
warnings and errors; ``-v`` streams a build's own output live on stderr (and still logs it);
``-vv`` adds rocmbuild's debug lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmbuild.builder.requirements import DoctorCheck
from rocmbuild.cli import app as cli
from tests.support.cli import rb
from tests.support.recipes import write_fixture_recipe

pytestmark = pytest.mark.slow


def _no_chatter(stderr: str) -> None:
    """-q: stderr holds warnings and errors only."""
    assert all(line.startswith(("warning:", "error:", "hint:")) for line in stderr.splitlines()), stderr


def test_quiet_apply_rollback_history_status_print_one_line_each(txn_home, target_env):
    env = target_env("3.5.0", compile_version="3.5.1")
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "-q")
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()
    assert line.startswith("applied ") and "3.5.0 -> 3.5.1" in line and str(env.prefix) in line
    _no_chatter(r.stderr)

    again = rb("-q", "apply", txn_home.recipe("mini"), "--env", env.prefix)  # -q before the verb too
    assert again.returncode == 0 and again.stdout.splitlines() == [
        f"already applied: mini 3.5.1 in {env.prefix}"], again.stdout
    _no_chatter(again.stderr)

    st = rb("status", "--env", env.prefix, "-q")
    assert st.returncode == 0 and len(st.stdout.splitlines()) == 1, st.stdout

    back = rb("rollback", "--env", env.prefix, "-q")
    assert back.returncode == 0, back.stderr
    (line,) = back.stdout.splitlines()
    assert line.startswith("rolled back ") and "3.5.1 -> 3.5.0" in line
    _no_chatter(back.stderr)

    hist = rb("history", "--env", env.prefix, "-q")
    rows = hist.stdout.splitlines()
    assert len(rows) == 2 and rows[0].split()[1] == "rollback" and rows[1].split()[1] == "apply", rows
    assert rows[0].endswith("(done; `redo` undoes it)") and "(undone by" in rows[1], rows  # the state, as the table

    redo = rb("redo", "--env", env.prefix, "-q")  # a redo reads as a redo (issue 27), not a rollback
    assert redo.returncode == 0, redo.stderr
    (line,) = redo.stdout.splitlines()
    undone = back.stdout.split()[2]  # the apply the rollback undid, in effect again
    assert line.startswith(f"redid {undone} (undid the rollback ") and "3.5.0 -> 3.5.1" in line, line
    rows = rb("history", "--env", env.prefix, "-q").stdout.splitlines()
    assert rows[0].split()[1] == "redo" and rows[2].endswith("redone by " + rows[0].split()[0][:4] + ")"), rows
    assert rb("rollback", "--env", env.prefix).returncode == 0

    none = rb("rollback", "--env", env.prefix, "-q", "--if-applied")
    assert none.returncode == 0 and len(none.stdout.splitlines()) == 1


def test_quiet_doctor_prints_only_the_failed_checks(tmp_path):
    r = rb("doctor", "-q")
    full = json.loads(rb("doctor", "--json").stdout)
    failed = full["failed"]
    lines = r.stdout.splitlines()
    assert len(lines) == len(failed), r.stdout
    assert all(line.startswith("[fail] ") for line in lines)
    assert "ok]" not in r.stdout and "[warn]" not in r.stdout
    assert r.returncode == (2 if failed else 0)


def test_quiet_doctor_prints_nothing_when_all_is_ok(mocker, capsys):
    mocker.patch("rocmbuild.doctor.run", return_value=[DoctorCheck("git", "ok", "git 2.40"),
                                                        DoctorCheck("disk", "warn", "low", "free some")])
    assert cli.main(["doctor", "-q"]) == 0
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert cli.main(["doctor"]) == 0
    assert "ok] git" in capsys.readouterr().out  # without -q: every check


def test_quiet_recipes_and_cache_list(tmp_path, txn_home):
    r = rb("recipes", "-q", "--recipes-dir", str(txn_home.recipes))
    assert r.returncode == 0 and "mini" in r.stdout.splitlines() and "/" not in r.stdout
    c = rb("cache", "list", "-q")
    assert c.returncode == 0 and c.stdout.strip(), c.stderr
    assert all(len(line.split()) == 4 for line in c.stdout.splitlines())  # key recipe version path
    assert "artifact(s)" not in c.stdout


def _recipe(tmp_path: Path, url: str) -> Path:
    return write_fixture_recipe(tmp_path / "recipes", url=url, generator="Ninja",
                                defines={"MIOPEN_FIXTURE_PAD_MB": 0})


def test_verbose_streams_the_build_output_and_still_logs_it(tmp_path, monorepo):
    recipe = _recipe(tmp_path, monorepo.url)
    r = rb("build", str(recipe), "-v")
    assert r.returncode == 0, r.stderr
    compile_lines = [line for line in r.stderr.splitlines() if line.startswith("[") and "Building C object" in line]
    assert compile_lines, r.stderr  # ninja's own line ("[1/3] Building C object ..."), on stderr as it came
    assert "debug:" not in r.stderr
    logs = [p for p in (Path(tmp_path) / "rocmbuild-home" / "logs").rglob("*.log") if not p.is_symlink()]
    text = "".join(p.read_text() for p in logs)
    assert all(line.strip() in text for line in compile_lines)  # still in the log

    q = rb("build", str(recipe), "-q", "-D", "MIOPEN_FIXTURE_PAD_MB=1")
    assert q.returncode == 0, q.stderr
    assert "Building C object" not in q.stderr and "[1/" not in q.stderr and len(q.stdout.splitlines()) == 1
    assert q.stdout.startswith("built ")


def test_very_verbose_adds_rocmbuild_debug_lines(tmp_path, txn_home):
    r = rb("build", txn_home.recipe("mini"), "-vv")
    assert r.returncode == 0, r.stderr
    debug = [line for line in r.stderr.splitlines() if line.startswith("debug: ")]
    assert any("cache lookup" in line for line in debug), r.stderr
    assert any(line.startswith("debug: proc.runner: start git") for line in debug), r.stderr
    one = rb("build", txn_home.recipe("mini"), "-v")
    assert "debug:" not in one.stderr
    quiet = rb("build", txn_home.recipe("mini"), "-vv", "-q")
    assert "debug:" not in quiet.stderr  # -q wins
