"""Text from outside is shown, never acted on: an escape sequence, a carriage return or a newline
in a recipe's description, ref or ``[requires]`` hint, in a version read from the source, in a
stored history line or in a progress label reaches the terminal escaped (``\\x1b``), and cannot
print a line of its own (``FAKE: all good``). A version that is not a version is refused where it
is read; a target path that is not UTF-8 is refused with exit 2, never a traceback.

Every test runs the real ``rocmbuild`` (tests/support/cli.py) on real recipes, git repositories,
fake-torch venvs and the session's artifacts; ``--json`` keeps the exact strings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import REPO, rb
from tests.support.recipes import fixture_recipe
from tests.support.snapshots import snapshot
from tests.support.monorepo import small_repo

HOSTILE = "desc \x1b[2J\x1b]0;owned\x07 clear\r\nFAKE: all good"
HOSTILE_REF = "develop\x1b[31m\nFAKE: all good"
HOSTILE_HINT = "install it\x1b[2J\r\nFAKE: all good"
PROGRAM = "rocmbuild-no-such-program"


def _inert(*texts: str) -> None:
    """No raw control character a terminal acts on, and no line a hostile newline started."""
    for text in texts:
        assert "\x1b" not in text and "\r" not in text and "\x07" not in text, repr(text)
        assert not [line for line in text.splitlines() if line.lstrip().startswith("FAKE")], text


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def _hostile_recipe(directory: Path, url: str, *, programs=(PROGRAM,), **kw) -> Path:
    text = fixture_recipe(name="evil", description=HOSTILE, url=url, ref=HOSTILE_REF, programs=programs, **kw)
    if programs:
        text += f"[requires.hints]\n{PROGRAM} = {json.dumps(HOSTILE_HINT)}\n"
    return _write(directory, "evil", text)


# --------------------------------------------------------------------------------------------
# a recipe's free text: description, ref, hints


def test_show_recipes_plan_and_doctor_print_a_hostile_recipe_escaped(tmp_path):
    repo = small_repo(tmp_path / "upstream", {"CMakeLists.txt": "project(x)\n"})
    recipe = _hostile_recipe(tmp_path / "recipes", repo.as_uri())
    for args in (("show", recipe), ("recipes", "--recipes-dir", recipe.parent), ("plan", recipe),
                 ("doctor", recipe)):
        r = rb(*args)
        assert r.returncode in (0, 2), (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        _inert(r.stdout, r.stderr)
        both = r.stdout + r.stderr
        if args[0] in ("show", "recipes"):
            assert "desc \\x1b[2J\\x1b]0;owned\\x07 clear\\x0d\\x0aFAKE: all good" in both, both
        if args[0] == "plan":
            assert "develop\\x1b[31m\\x0aFAKE: all good" in both, both  # the ref: in the source line and the note
        if args[0] in ("plan", "doctor"):
            assert "install it\\x1b[2J\\x0d\\x0aFAKE: all good" in both, both  # the hint
    j = rb("show", recipe, "--json")
    assert j.returncode == 0, j.stderr
    assert json.loads(j.stdout)["description"] == HOSTILE  # JSON keeps the exact string


def test_a_build_refused_for_a_missing_program_shows_the_recipes_hint_escaped(tmp_path):
    recipe = _hostile_recipe(tmp_path / "recipes", "file:///nonexistent")
    r = rb("build", recipe)
    assert r.returncode == 2, r.stderr
    _inert(r.stdout, r.stderr)
    assert "hint: install it\\x1b[2J\\x0d\\x0aFAKE: all good" in r.stderr, r.stderr
    j = rb("build", recipe, "--json")
    assert json.loads(j.stdout)["error"]["details"]["missing"][0]["fix"] == HOSTILE_HINT
    _inert(j.stderr)


def test_a_fetch_failure_naming_a_hostile_ref_is_escaped(tmp_path):
    repo = small_repo(tmp_path / "upstream", {"CMakeLists.txt": "project(x)\n"})
    recipe = _hostile_recipe(tmp_path / "recipes", repo.as_uri(), programs=None)
    r = rb("build", recipe)
    assert r.returncode == 3, r.stderr
    _inert(r.stdout, r.stderr)
    assert "ref 'develop\\x1b[31m\\x0aFAKE: all good' not found" in r.stderr, r.stderr


def test_a_build_log_tail_keeps_its_lines_and_escapes_control_characters(tmp_path):
    cmake = ("cmake_minimum_required(VERSION 3.16)\nproject(fails C)\n"
             "add_custom_target(fail ALL COMMAND printf \"red \\\\033[31mtail\\\\rover\\\\n\" COMMAND false VERBATIM)\n")
    repo = small_repo(tmp_path / "upstream", {"CMakeLists.txt": cmake})
    recipe = _write(tmp_path / "recipes", "fails", fixture_recipe(
        name="fails", url=repo.as_uri(), ref="main", subdir=None, version=None, verify=None,
        generator="Unix Makefiles", jobs=1))
    r = rb("build", recipe)
    assert r.returncode == 3, r.stderr
    _inert(r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert "red \\x1b[31mtail\\x0dover" in lines, r.stderr  # one line of the tail, as a line
    assert any(line.startswith("--- last ") for line in lines), r.stderr  # the message keeps its lines


# --------------------------------------------------------------------------------------------
# names and versions where they enter


def test_a_version_read_from_the_source_that_is_not_a_version_is_refused(tmp_path):
    cmake = "project(x)\nrocm_setup_version(VERSION 3.5.1\x1b[2J\nFAKE: all good)\n"
    repo = small_repo(tmp_path / "upstream", {"CMakeLists.txt": cmake})
    loose = "{ file = \"CMakeLists.txt\", regex = 'rocm_setup_version\\(VERSION ([^)]+)\\)' }"
    recipe = _write(tmp_path / "recipes", "loose", fixture_recipe(
        name="loose", url=repo.as_uri(), ref="main", subdir=None, version=loose))
    r = rb("build", recipe)
    assert r.returncode == 2, r.stderr
    _inert(r.stdout, r.stderr)
    assert "is not a version" in r.stderr and "3.5.1\\x1b[2J\\x0aFAKE: all good" in r.stderr, r.stderr
    home = Path(os.environ["ROCMBUILD_HOME"])
    assert not any((home / "artifacts").glob("*/manifest.json")) if (home / "artifacts").exists() else True
    j = rb("build", recipe, "--json")
    assert j.returncode == 2 and json.loads(j.stdout)["error"]["type"] == "RecipeError"


def test_a_recipe_name_or_fixed_version_that_could_reach_a_path_or_a_terminal_is_refused(tmp_path):
    for name, version, key in (("../evil", "\"3.5.1\"", "name"), ("evil\x1b[2J", "\"3.5.1\"", "name"),
                               ("ok", json.dumps("3.5.1\nFAKE: all good"), "verify.version"),
                               ("ok", "\"../../3.5.1\"", "verify.version")):
        text = fixture_recipe(name="ok", version=None, verify=None).replace('name = "ok"', f"name = {json.dumps(name)}")
        recipe = _write(tmp_path / "recipes", "ok", text + f"[verify]\nversion = {version}\n")
        r = rb("show", recipe, "--json")
        assert r.returncode == 2, (name, version, r.stdout, r.stderr)
        _inert(r.stderr)
        assert json.loads(r.stdout)["error"]["details"]["key"] == key
    r = rb("show", "..")  # a name on the command line is never joined into a file name
    assert r.returncode == 2 and "not a recipe name" in r.stderr, r.stderr


# --------------------------------------------------------------------------------------------
# stored state replayed by every later command


def test_a_hostile_history_line_is_replayed_escaped_by_status_and_history(txn_home, target_env):
    env = target_env("3.5.0", compile_version="3.5.1")
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)
    assert r.returncode == 0, r.stderr
    hostile = {"recipe": "mini" + HOSTILE, "version_after": "3.5.1\x1b[2J\r\nFAKE: all good",
               "commit": "c" * 40 + "\x1b[2J\nFAKE: all good"}
    state = env.prefix / ".rocmbuild"
    history = state / "history.jsonl"  # what `history` replays
    records = [json.loads(line) for line in history.read_text().splitlines()]
    records[-1].update(hostile)
    history.write_text("".join(json.dumps(rec) + "\n" for rec in records))
    for journal in (state / "journal").glob("*.json"):  # what `status` replays
        data = json.loads(journal.read_text())
        data["plan"].update(hostile)
        journal.write_text(json.dumps(data))
    for verb in ("status", "history"):
        r = rb(verb, "--env", env.prefix)
        assert r.returncode in (0, 2), r.stderr
        assert "Traceback" not in r.stderr, r.stderr
        _inert(r.stdout, r.stderr)
        # shown escaped (or named, escaped, as a state file that cannot be read)
        assert "\\x1b[2J" in r.stdout + r.stderr, (verb, r.stdout, r.stderr)
    r = rb("history", "--env", env.prefix, env={"COLUMNS": "60"})  # a narrow terminal: one block per row
    _inert(r.stdout, r.stderr)


# --------------------------------------------------------------------------------------------
# progress


_PROGRESS = ("import time\nfrom rocmbuild import progress\n"
             "with progress.phase('fetch', {label!r}):\n    time.sleep(0.4)\n"
             "with progress.phase('build', {label!r}) as p:\n"
             "    p.line('[1/2] Building ' + {line!r})\n    time.sleep(0.6)\n")


def _progress(env: dict) -> subprocess.CompletedProcess:
    code = _PROGRESS.format(label=HOSTILE, line=HOSTILE.replace("\n", ""))  # a tool's line has no newline
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "COLUMNS": "200", **env})


def test_progress_labels_and_lines_are_escaped_off_and_on_a_terminal():
    plain = _progress({"ROCMBUILD_HEARTBEAT_S": "0.1"})  # stderr a pipe: plain lines and heartbeats
    assert plain.returncode == 0, plain.stderr
    _inert(plain.stderr)
    assert "Building desc \\x1b[2J" in plain.stderr, plain.stderr  # the step line (50%)
    assert "fetch: desc \\x1b[2J\\x1b]0;owned\\x07 clear\\x0d\\x0aFAKE" in plain.stderr  # a heartbeat: the label
    tty = _progress({"FORCE_COLOR": "1"})  # a (forced) terminal: rich draws, our text is escaped
    assert tty.returncode == 0, tty.stderr
    assert "\x1b[2J" not in tty.stderr and "\x1b]0;" not in tty.stderr and "\x07" not in tty.stderr
    assert "\\x1b[2J" in tty.stderr, tty.stderr
    assert not [line for line in tty.stderr.replace("\r", "\n").splitlines() if line.startswith("FAKE")]


# --------------------------------------------------------------------------------------------
# a target path that is not UTF-8


def test_a_target_path_that_is_not_utf8_is_refused_with_exit_2(txn_home, target_env, tmp_path):
    env = target_env("3.5.0", compile_version="3.5.1")
    raw = os.fsencode(str(tmp_path)) + b"/\xff-env"
    os.rename(env.prefix, raw)
    bad = os.fsdecode(raw)  # what a shell's $'...\xff-env' argument is to Python
    link = tmp_path / "utf8-link"
    os.symlink(raw, os.fsencode(str(link)))
    before = snapshot(bad)
    for args, env_vars in ((("status", "--env", bad), None), (("apply", txn_home.recipe("mini"), "--env", bad), None),
                           (("history", "--python", bad + "/bin/python"), None), (("rollback", "--env", link), None),
                           (("doctor", "--env", bad), None), (("status",), {"CONDA_PREFIX": bad})):
        r = rb(*args, env=env_vars)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and "UnicodeDecodeError" not in r.stderr, r.stderr
        assert "is not valid UTF-8; rocmbuild needs a UTF-8 path" in r.stderr, r.stderr
        assert "\\xff-env" in r.stderr, r.stderr  # the path, shown escaped
    j = rb("status", "--env", bad, "--json")
    out = json.loads(j.stdout)
    assert j.returncode == 2 and out["exit_code"] == 2 and out["error"]["type"] == "TargetError"
    assert snapshot(bad) == before
