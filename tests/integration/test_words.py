"""What a person reads, round 2: git's own words kept whole, a recipe's relative git path taken
against the recipe's directory, tables that never wrap off a terminal, labels cut in the middle,
and the odd words of issue 19 put right.

Every test runs the real ``rocmbuild`` (tests/support/cli.py) on real recipes and git remotes and
reads its output as a person (or ``grep``) would.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time

from tests.support.cli import REPO, rb
from tests.support.recipes import write_fixture_recipe
from tests.support.watch import screen


# --------------------------------------------------------------------------------------------
# git's words


def test_an_unreachable_remote_names_git_s_reason_not_its_boilerplate(tmp_path):
    not_a_repo = tmp_path / "miopen"
    not_a_repo.mkdir()
    recipe = write_fixture_recipe(tmp_path / "r", url=not_a_repo.as_uri())
    r = rb("lock", recipe, "-o", tmp_path / "x.lock.json")
    assert r.returncode == 3, r.stderr
    assert f"cannot reach git remote {not_a_repo.as_uri()}: '{not_a_repo}' does not appear to be a git repository" \
        in r.stderr, r.stderr
    assert "and the repository exists" not in r.stderr and "Could not read from remote" not in r.stderr
    assert "fatal:" not in r.stderr.split("hint:")[0]


def test_a_relative_git_path_is_taken_against_the_recipe_s_directory(tmp_path, monorepo):
    beside = tmp_path / "work"
    shutil.copytree(monorepo.path, beside / "miopen", symlinks=True)
    recipe = write_fixture_recipe(beside, url="miopen", ref="develop")
    assert not (REPO / "miopen").exists()  # rocmbuild runs in REPO: the current directory has no miopen
    r = rb("plan", recipe, "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["source"]["url"] == str(beside / "miopen")
    assert plan["source"]["commit"] == monorepo.c_develop
    # one level up works the same: ../miopen from a recipes/ folder
    nested = write_fixture_recipe(beside / "recipes", name="nested", url="../miopen", ref="develop")
    r = rb("plan", nested, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["source"]["url"] == str(beside / "miopen")


# --------------------------------------------------------------------------------------------
# the ref a recipe leaves out


def test_lock_and_plan_name_the_default_branch_when_the_recipe_sets_no_ref(tmp_path, monorepo):
    recipe = write_fixture_recipe(tmp_path, url=monorepo.url, ref=None)
    lock = rb("lock", recipe, "-o", tmp_path / "mini.lock.json")
    assert lock.returncode == 0, lock.stderr
    assert "@ None" not in lock.stdout
    assert "mini @ HEAD (the remote's default branch) -> " in lock.stdout, lock.stdout
    plan = rb("plan", recipe)
    assert plan.returncode == 0, plan.stderr
    assert "@ HEAD (the remote's default branch) -> " in plan.stdout, plan.stdout
    assert " @ - " not in plan.stdout


# --------------------------------------------------------------------------------------------
# piped: no cell wraps


def test_history_piped_keeps_each_row_on_one_line_for_grep(txn_home, target_env, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    env = target_env("3.5.0", layout="conda", compile_version="3.5.1")
    for args in (("apply", txn_home.recipe("mini")), ("apply", txn_home.recipe("mini-fix")), ("rollback",)):
        assert rb(*args, "--env", env.prefix).returncode == 0
    r = rb("history", "--env", env.prefix)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if re.match(r"^000\d ", line)]
    assert [x.split()[0] for x in rows] == ["0003", "0002", "0001"], r.stdout
    rollback = [x for x in r.stdout.splitlines() if "rollback" in x]  # `history | grep rollback`
    assert len(rollback) == 1, r.stdout
    assert re.match(r"^0003 rollback\s+\d{4}-\d\d-\d\d \d\d:\d\d", rollback[0]), rollback
    assert "(undoes 0002)" in rollback[0] and "3.5.1 -> 3.5.1" in rollback[0], rollback
    # the columns line up: each header starts where its cells start
    head = next(x for x in r.stdout.splitlines() if x.startswith("txn "))
    assert all(x[head.index("when") - 1] == " " and x[head.index("when")] != " " for x in rows), r.stdout


# --------------------------------------------------------------------------------------------
# what a terminal shows: a label cut in the middle, a stop on a line of its own

LONG_DIR = "/tmp/newcomer.R7Vj/" + "/".join(f"level-{i:02d}-of-a-deep-venv" for i in range(6))
LABEL = f"probing {LONG_DIR}/bin/python (importing torch)"
PHASE = f"""
import sys, time
from rocmbuild import progress
from rocmbuild.proc import stop
progress.configure()
with stop.handling():
    with progress.phase("probe", {LABEL!r}):
        time.sleep(60)
"""


def _on_a_terminal(code: str, columns: int, *, interrupt_after: float) -> tuple[int, list[str], str]:
    """Run ``code`` with stderr on a pty ``columns`` wide; SIGINT after ``interrupt_after`` s."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=slave, env=env, cwd=str(REPO), start_new_session=True)
    os.close(slave)
    data = b""
    deadline = time.monotonic() + interrupt_after
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                data += chunk
            if deadline and time.monotonic() > deadline:
                data += b"^C"  # as a terminal echoes Ctrl-C where the cursor is
                proc.send_signal(signal.SIGINT)
                deadline = 0
            if proc.poll() is not None and not ready:
                break
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return proc.returncode, screen(data), data.decode("utf-8", "replace")


def test_a_long_label_is_cut_in_the_middle_and_keeps_its_end_at_120_columns():
    _, _, raw = _on_a_terminal(PHASE, 120, interrupt_after=2.5)
    drawn = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", x) for x in raw.replace("\r", "\n").splitlines()]
    rows = [x for x in drawn if x.lstrip(" " + "".join(chr(c) for c in range(0x2800, 0x2900))).startswith("probing")]
    assert rows, raw
    row = rows[-1]
    assert "\u2026" in row and len(row.rstrip()) <= 120, row
    assert "probing /tmp/" in row and "bin/python (importing torch)" in row, row


def test_the_stop_message_starts_on_a_line_of_its_own():
    _, lines, raw = _on_a_terminal(PHASE, 120, interrupt_after=2.5)
    said = [x for x in lines if "SIGINT received" in x]
    assert said and all(x.startswith("rocmbuild: SIGINT received") for x in said), lines


# --------------------------------------------------------------------------------------------
# odd words put right


def test_a_gpu_typo_suggests_the_swapped_digits_first_and_only_names_listed_targets(tmp_path):
    recipe = write_fixture_recipe(tmp_path)
    r = rb("plan", recipe, "--gpu-targets", "gfx1115", "--offline", "--json")
    assert r.returncode == 2, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["hint"].startswith("did you mean gfx1151?"), err["hint"]
    listed = err["hint"].split("family:", 1)[1]
    assert all(s in listed for s in err["details"]["suggestions"]), err["hint"]
    assert "gfx1011" not in err["hint"]


def test_a_mistyped_verb_gets_did_you_mean():
    r = rb("aply")
    assert r.returncode == 2
    assert "invalid choice: 'aply': did you mean apply?" in r.stderr, r.stderr
    assert "did you mean list?" in rb("cache", "lst").stderr


def test_doctor_on_an_auto_recipe_without_a_gpu_and_a_distribution_rocm(tmp_path, fake_gpu, monkeypatch):
    fake_gpu()  # a machine without a GPU
    usr = tmp_path / "machine" / "usr"
    (usr / "bin").mkdir(parents=True)
    (usr / "bin" / "hipcc").write_text("")
    (usr / "lib/x86_64-linux-gnu/cmake/hip").mkdir(parents=True)  # Debian's layout
    (usr / "lib/x86_64-linux-gnu/cmake/hip/hip-config.cmake").write_text("")
    monkeypatch.delenv("ROCM_PATH", raising=False)
    r = rb("doctor", "miopen-develop", env={"ROCMBUILD_ROOT": str(tmp_path / "machine")})
    text = r.stdout
    assert "names no GPU targets" not in text, text
    line = next(x for x in text.splitlines() if "GPU targets:" in x)
    assert "GPU_TARGETS = \"auto\" (this machine's GPUs), and no AMD GPU was found here" in line, line
    assert "--gpu-targets ARCH" in text
    rocm = next(x for x in text.splitlines() if "] ROCm:" in x)
    assert rocm.endswith(f"ROCm: {usr} (the distribution's packages)"), rocm
    assert rocm.count("distribution") == 1


def test_show_with_overrides_says_what_the_command_line_changed(tmp_path):
    recipe = write_fixture_recipe(tmp_path, jobs=2)
    r = rb("show", recipe, "-D", "FOO=1", "--jobs", "4")
    assert r.returncode == 0, r.stderr
    file_part, _, note = r.stdout.partition("# the command line overrides the file (these are in effect):")
    assert "jobs = 2" in file_part and note, r.stdout  # the file as written, then what is in effect
    assert '#   build.defines.FOO = "1"' in note and "#   build.jobs = 4" in note, note
    j = json.loads(rb("show", recipe, "-D", "FOO=1", "--jobs", "4", "--json").stdout)["recipe"]
    assert j["build"]["jobs"] == 4
    plain = rb("show", recipe).stdout
    assert "the command line overrides" not in plain


def test_recipe_hints_point_at_something_an_installed_wheel_has(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    r = rb("show", bad)
    assert r.returncode == 2 and "docs/recipes.md" not in r.stderr and "`rocmbuild show miopen-3.5.1`" in r.stderr
    typed = tmp_path / "typed.toml"
    typed.write_text(write_fixture_recipe(tmp_path / "t").read_text().replace('ref = "develop"', "ref = 3"))
    r = rb("show", typed)
    assert r.returncode == 2 and "docs/recipes.md" not in r.stderr and "rocmbuild show" in r.stderr, r.stderr
    assert rb("show", "miopen-3.5.1").returncode == 0  # the recipe the hints name is bundled


def test_the_batchnorm_smoke_row_has_a_check_name():
    from rocmbuild.environment.probe import SmokeCheck, SmokeResult
    from rocmbuild.environment.smoke import check_smoke
    from rocmbuild.results.verdict import Check

    class Report:
        smoke = SmokeResult("passed", device="cpu", checks=(SmokeCheck("install", "passed"),
                                                             SmokeCheck("batchnorm", "passed")))

    checks = check_smoke(Report())
    rows = [c.render() for c in checks]
    assert rows[1].startswith("[  ok] smoke: batchnorm: expected BatchNorm2d"), rows
    assert [c.name for c in checks] == ["smoke: install", "smoke"]  # the JSON name is unchanged
    assert Check("smoke", False, "x", "crashed").render().startswith("[FAIL] smoke: batchnorm:")


def test_export_names_the_bundle_without_dot_dot(txn_world, tmp_path):
    (tmp_path / "kept").mkdir()
    key = next(iter(txn_world.artifacts.values())).key
    r = rb("export", key, "-o", f"{tmp_path}/kept/../demo.tar.gz", env={"ROCMBUILD_HOME": str(txn_world.home)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == str(tmp_path / "demo.tar.gz"), r.stdout
    assert "/../" not in r.stdout and (tmp_path / "demo.tar.gz").is_file()


def test_one_job_is_one_job(tmp_path, monorepo):
    recipe = write_fixture_recipe(tmp_path, url=monorepo.url, jobs=1)
    r = rb("build", recipe, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "building with 1 job (log:" in r.stderr, r.stderr
