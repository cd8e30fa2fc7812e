"""First contact: --help, --version, global flags anywhere, -v, -n NAME, shell completion.

Every test runs the real ``rocmbuild`` as a process (tests/support/cli.py); completion scripts
are sourced into a real bash (and zsh when installed) and their completion function is called
as the shell would call it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmbuild.errors import EXIT_CODES
from tests.support.cli import REPO, rb
from tests.support.envs import make_env
from tests.support.recipes import write_fixture_recipe


# --------------------------------------------------------------------------------------------
# --help and --version


def test_help_says_what_the_tool_does_with_examples_exit_codes_and_environment():
    r = rb("--help")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "argparse" not in out and "_add_<verb>" not in out  # no source docstring
    # the first paragraph after the usage says what the tool does
    assert out.split("\n\n")[1].startswith("rocmbuild builds GPU libraries"), out[:400]
    for cmd in ("rocmbuild apply ", "rocmbuild status ", "rocmbuild rollback "):
        assert cmd in out, cmd
    for code, meaning in EXIT_CODES:  # the table comes from errors.py, not a copy
        assert re.search(rf"^\s+{re.escape(code)}\s+{re.escape(meaning.split()[0])}", out, re.M), code
    for var in ("ROCMBUILD_HOME", "ROCMBUILD_RECIPES", "ROCM_PATH", "CONDA_PREFIX", "VIRTUAL_ENV", "NO_COLOR"):
        assert var in out, var


def test_help_names_every_ROCMBUILD_variable_the_code_reads():
    read = set()
    for f in (REPO / "rocmbuild").rglob("*.py"):
        read |= set(re.findall(r"ROCMBUILD_[A-Z_]+[A-Z]", f.read_text()))
    out = rb("--help").stdout
    assert read and read <= set(re.findall(r"ROCMBUILD_[A-Z_]+[A-Z]", out)), sorted(read)
    # the variables only the tests set are named in their own note, not among what users set
    env, note = out.split("environment variables:", 1)[1].split("\n\nfor tests only", 1)
    for test_only in ("ROCMBUILD_FAILPOINTS", "ROCMBUILD_PAUSEPOINTS", "ROCMBUILD_PAUSE_SECONDS",
                      "ROCMBUILD_SYSFS_ROOT", "ROCMBUILD_NO_OPENAT2", "ROCMBUILD_ROOT"):
        assert test_only not in env and test_only in note, test_only
    # the README tells users to set this one (the CPU smoke test): explained among theirs (issue 27)
    assert re.search(r"^  ROCMBUILD_SMOKE_DEVICE\s+cpu: run the --smoke suite on the CPU", env, re.M)
    assert "ROCMBUILD_SMOKE_DEVICE" not in note
    explained = set(re.findall(r"^  (ROCMBUILD_[A-Z_]+[A-Z])\s", env, re.M))
    assert read <= explained | set(re.findall(r"ROCMBUILD_[A-Z_]+[A-Z]", note)), sorted(read - explained)


def test_every_verb_help_has_an_example():
    from rocmbuild.cli import app

    _parser, handlers = app.build_parser()
    for verb in handlers:
        r = rb(verb, "--help")
        assert r.returncode == 0, (verb, r.stderr)
        assert f"examples:\n  rocmbuild {verb}" in r.stdout, verb


def test_version_names_python_and_the_install_path():
    r = rb("--version")
    assert r.returncode == 0, r.stderr
    from rocmbuild import __version__

    lines = r.stdout.splitlines()
    assert lines[0] == f"rocmbuild {__version__}"
    assert lines[1].startswith(f"Python {sys.version.split()[0]} (") and sys.executable in lines[1]
    assert lines[2] == f"installed at {REPO / 'rocmbuild'}"


def test_dash_V_is_the_version():
    assert rb("-V").stdout == rb("--version").stdout != ""


@pytest.mark.parametrize("argv,near", [(("status", "--envv", "/x"), "--env"),
                                       (("rollback", "--undoo", "3"), "--undo"),
                                       (("cache", "list", "--remot", "oci://h/r"), "--remote"),
                                       (("--json", "history", "--limt=3"), "--limit")])
def test_a_mistyped_option_gets_a_did_you_mean_and_the_verbs_usage(argv, near):
    """Issue 27, item 9: options like the verbs: the nearest option of that verb, its usage."""
    r = rb(*argv, "--json")
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 2 and f"did you mean {near}?" in err["message"], err
    assert err["hint"].startswith(f"usage: rocmbuild {argv[1] if argv[0] == '--json' else argv[0]}"), err


@pytest.mark.parametrize("argv", [("rollback", "--t", "0"), ("history", "--lim", "2"), ("status", "--hash"[:4]),
                                  ("apply", "x", "--dry")])
def test_abbreviated_options_are_refused_not_guessed(argv):
    """``--t 0`` was taken as ``--to 0`` (argparse's abbreviations): in a script a typo must fail."""
    r = rb(*argv, "--json")
    assert r.returncode == 2 and "unrecognized arguments" in json.loads(r.stdout)["error"]["message"], r.stdout


def test_counted_and_combined_short_flags_still_work():
    r = rb("-vv", "recipes", "-qv", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["verb"] == "recipes", r.stderr


# --------------------------------------------------------------------------------------------
# global flags


@pytest.mark.parametrize("argv", [("--json", "recipes"), ("recipes", "--json"), ("--json", "-q", "recipes"),
                                  ("-q", "recipes", "--json", "--debug"), ("--debug", "--json", "recipes", "-v")])
def test_global_flags_before_or_after_the_verb(argv):
    r = rb(*argv)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["verb"] == "recipes" and data["ok"] is True


def test_global_flags_on_a_usage_error_keep_the_json_contract():
    r = rb("--json", "recipes", "--no-such-flag")
    assert r.returncode == 2
    assert json.loads(r.stdout)["error"]["type"] == "InputError"


def test_verbose_shows_the_commands_run_and_quiet_wins(target_env):
    env = target_env("3.5.1")
    r = rb("-v", "status", "--env", env.prefix)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^running: .*python.* -c ", r.stderr, re.M), r.stderr  # the resolve step
    plain = rb("status", "--env", env.prefix)
    assert plain.returncode == 0 and "running:" not in plain.stderr
    quiet = rb("status", "--env", env.prefix, "-v", "-q")
    assert quiet.returncode == 0 and "running:" not in quiet.stderr, quiet.stderr


# --------------------------------------------------------------------------------------------
# -n NAME: a conda env by name


def _conda_env(root: Path, fixture_libs) -> Path:
    env = make_env(root, layout="conda", lib_dir=fixture_libs("3.5.1"))
    (Path(env.prefix) / "conda-meta").mkdir()
    return Path(env.prefix)


def _no_conda_path(tmp_path: Path) -> str:
    """PATH without any conda (this machine has none; make sure)."""
    dirs = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "conda").exists()]
    return os.pathsep.join(dirs)


def test_name_finds_the_env_through_conda(tmp_path, fixture_libs):
    prefix = _conda_env(tmp_path / "somewhere" / "torch-rocm", fixture_libs)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    listing = {"envs": [str(tmp_path / "root"), str(prefix)], "root_prefix": str(tmp_path / "root")}
    conda = bindir / "conda"
    conda.write_text(f"#!{sys.executable}\nimport json, sys\n"
                     "assert sys.argv[1:] == ['info', '--envs', '--json'], sys.argv\n"
                     f"print(json.dumps({listing!r}))\n")
    conda.chmod(0o755)
    env = {"PATH": f"{bindir}{os.pathsep}{_no_conda_path(tmp_path)}", "HOME": str(tmp_path / "home")}
    r = rb("status", "-n", "torch-rocm", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["target"]["prefix"] == str(prefix)
    bad = rb("status", "--name", "nope", "--json", env=env)
    assert bad.returncode == 2
    err = json.loads(bad.stdout)["error"]
    assert err["type"] == "TargetError" and "'nope'" in err["message"]
    assert "torch-rocm" in err["message"] and "base" in err["message"]  # the names found


def test_name_without_conda_searches_the_usual_envs_dirs(tmp_path, fixture_libs):
    home = tmp_path / "home"
    prefix = _conda_env(home / "miniforge3" / "envs" / "yolo", fixture_libs)
    other = _conda_env(tmp_path / "extra-envs" / "other", fixture_libs)
    (home / "miniforge3" / "envs" / "not-an-env").mkdir()  # no conda-meta: not listed
    env = {"PATH": _no_conda_path(tmp_path), "HOME": str(home), "CONDA_ENVS_PATH": str(tmp_path / "extra-envs")}
    for name, want in (("yolo", prefix), ("other", other)):
        r = rb("status", "-n", name, "--json", env=env)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["target"]["prefix"] == str(want)
    bad = rb("history", "-n", "missing", env=env)
    assert bad.returncode == 2
    assert "found: other, yolo" in bad.stderr and "not-an-env" not in bad.stderr, bad.stderr


def test_name_before_the_verb(tmp_path, fixture_libs):
    home = tmp_path / "home"
    prefix = _conda_env(home / "miniforge3" / "envs" / "yolo", fixture_libs)
    env = {"PATH": _no_conda_path(tmp_path), "HOME": str(home)}
    r = rb("-n", "yolo", "status", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["target"]["prefix"] == str(prefix)
    no_target = rb("-n", "yolo", "recipes", "--json", env=env)
    assert no_target.returncode == 2 and "takes no target" in json.loads(no_target.stdout)["error"]["message"]
    two = rb("-n", "yolo", "status", "--env", str(prefix), "--json", env=env)
    assert two.returncode == 2 and "give one target" in json.loads(two.stdout)["error"]["message"]


@pytest.mark.parametrize("name", ["..", "../yolo", "/etc", "a/../../b", "."])
def test_name_that_is_a_path_is_refused_before_any_search(tmp_path, fixture_libs, name):
    home = tmp_path / "home"
    _conda_env(home / "miniconda3" / "envs" / "yolo", fixture_libs)
    canary = _conda_env(home / "miniconda3" / "canary", fixture_libs)  # ../canary from envs/
    before = sorted(p.name for p in canary.rglob("*"))
    r = rb("apply", "mini", "-n", name, "--json", env={"PATH": _no_conda_path(tmp_path), "HOME": str(home)})
    assert r.returncode == 2
    assert "not an environment name" in json.loads(r.stdout)["error"]["message"]
    assert sorted(p.name for p in canary.rglob("*")) == before


def test_name_and_env_are_exclusive():
    r = rb("status", "-n", "x", "--env", "/tmp", "--json")
    assert r.returncode == 2 and "not allowed with" in json.loads(r.stdout)["error"]["message"]


# --------------------------------------------------------------------------------------------
# completion


def _script(tmp_path: Path, shell: str, env: dict) -> Path:
    r = rb("completion", shell, env=env)
    assert r.returncode == 0, r.stderr
    path = tmp_path / f"rocmbuild.{shell}"
    path.write_text(r.stdout)
    return path


BASH_DRIVER = r'''
source "$1"; shift
line="$1"
read -ra COMP_WORDS <<< "$line"
[[ "$line" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE="$line"; COMP_POINT=${#line}
_rocmbuild
printf '%s\n' "${COMPREPLY[@]}"
'''


def _bash(script: Path, line: str, cwd: Path, env: dict) -> list[str]:
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", BASH_DRIVER, "bash", str(script), line],
                          capture_output=True, text=True, cwd=cwd, env={**os.environ, **env}, timeout=30)
    assert done.returncode == 0, done.stderr
    return [w for w in done.stdout.splitlines() if w]


@pytest.fixture
def completion_world(tmp_path, fixture_libs):
    recipes = tmp_path / "recipes"
    write_fixture_recipe(recipes, "mini-complete")
    home = tmp_path / "home"
    _conda_env(home / "miniconda3" / "envs" / "torch-env", fixture_libs)
    work = tmp_path / "work"
    (work / "envs-here").mkdir(parents=True)
    (work / "local.toml").write_text("name = 'x'\n")
    (work / "notes.txt").write_text("")
    bindir = rocmbuild_on_path(tmp_path / "bin")
    path = f"{bindir}{os.pathsep}{_no_conda_path(tmp_path)}"
    return {"ROCMBUILD_RECIPES": str(recipes), "HOME": str(home), "PATH": path}, work


def rocmbuild_on_path(bindir: Path) -> Path:
    """A ``rocmbuild`` command running this checkout: the script calls it back at Tab time."""
    bindir.mkdir(parents=True, exist_ok=True)
    exe = bindir / "rocmbuild"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m rocmbuild \"$@\"\n")
    exe.chmod(0o755)
    return bindir


def test_bash_completion_from_the_real_parser(tmp_path, completion_world):
    env, work = completion_world
    script = _script(tmp_path, "bash", env)
    assert subprocess.run(["bash", "-n", str(script)], timeout=30).returncode == 0

    def c(line):
        return _bash(script, line, work, env)

    assert c("rocmbuild ") == ["recipes", "show", "plan", "build", "status", "verify", "doctor", "cache", "log", "export",
                               "lock", "apply", "rollback", "redo", "history", "recover", "demo", "push", "key", "config",
                               "completion"]
    assert c("rocmbuild ro") == ["rollback"]
    assert c("rocmbuild --json st") == ["status"]  # a global flag before the verb
    assert set(c("rocmbuild apply --")) >= {"--env", "--name", "--python", "--dry-run", "--json", "--verbose",
                                            "--allow-outside-prefix", "--wait-timeout"}
    assert "--dry-run" not in c("rocmbuild status --")
    assert c("rocmbuild apply --launcher ") == ["auto", "none", "ccache", "sccache"]
    assert c("rocmbuild verify --encoding c") == ["cudnn"]
    assert c("rocmbuild completion ") == ["bash", "zsh", "fish"]
    assert "verify" in c("rocmbuild cache ")
    recipes = c("rocmbuild apply ")
    assert "mini-complete" in recipes and "miopen-3.5.1" in recipes and "local.toml" in recipes
    assert "notes.txt" not in recipes
    assert c("rocmbuild apply mini-c") == ["mini-complete"]
    assert c("rocmbuild apply x --env env") == ["envs-here"]  # a directory
    assert c("rocmbuild status -n tor") == ["torch-env"]
    assert c("rocmbuild apply x --expect ") == []  # a version: nothing to offer


ZSH_DRIVER = r'''
compdef() { : }
source "$1"
compadd() { [[ "$1" == -- ]] && shift; print -rl -- "$@" }
_files() { print -r -- "<files $*>" }
words=(${=2})
[[ "$2" == *" " ]] && words+=("")
CURRENT=${#words}
_rocmbuild
'''


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_parses_and_completes(tmp_path, completion_world):
    env, work = completion_world
    script = _script(tmp_path, "zsh", env)
    assert script.read_text().startswith("#compdef rocmbuild\n")
    assert subprocess.run(["zsh", "-n", str(script)], timeout=30).returncode == 0

    def c(line):
        done = subprocess.run(["zsh", "-f", "-c", ZSH_DRIVER, "zsh", str(script), line], capture_output=True,
                              text=True, cwd=work, env={**os.environ, **env}, timeout=30)
        assert done.returncode in (0, 1), done.stderr
        return [w for w in done.stdout.splitlines() if w]

    assert "rollback" in c("rocmbuild ") and "completion" in c("rocmbuild ")
    assert "--dry-run" in c("rocmbuild apply --") and "--name" in c("rocmbuild apply --")
    assert c("rocmbuild apply --launcher ") == ["auto", "none", "ccache", "sccache"]
    assert "mini-complete" in c("rocmbuild apply ") and "<files -g *.toml>" in c("rocmbuild apply ")
    assert c("rocmbuild apply x --env ") == ["<files -/>"]
    assert c("rocmbuild status -n ") == ["torch-env"]


def test_completion_json_is_one_object_and_an_unknown_shell_is_refused():
    r = rb("completion", "bash", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["shell"] == "bash" and "complete -o filenames -F _rocmbuild rocmbuild" in data["script"]
    assert "__complete" in data["script"]  # it asks rocmbuild at Tab time
    bad = rb("completion", "tcsh")
    assert bad.returncode == 2 and "invalid choice: 'tcsh'" in bad.stderr


def test_cache_help_says_where_the_state_dir_is_printed():
    """``cache dir`` prints the cache dir alone (like ``pip cache dir``); the state dir is in --json."""
    assert "--json: also the state dir" in rb("cache", "--help").stdout
    r = rb("cache", "dir")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 1 and r.stderr == ""
    assert json.loads(rb("cache", "dir", "--json").stdout)["state"]
