"""The probe runs the target as the user runs it: conda's activate.d scripts and conda-meta/state env
vars, a venv's bin/activate; both runs reported when they load different files; LD_* copies; where
the target came from.

Real: venvs laid out like conda envs (conda-meta/, etc/conda/activate.d/), bash sourcing the real
scripts, the real loader honouring LD_LIBRARY_PATH and LD_PRELOAD, real libMIOpen builds. The fake
torch's ``search`` knob stands in for the DT_RUNPATH of a real libtorch (tried after LD_LIBRARY_PATH).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocmbuild import doctor
from rocmbuild.cli import app as cli
from rocmbuild.errors import EXIT_INPUT, EXIT_OK, EXIT_VERIFY, TargetError
from rocmbuild.environment import activation
from rocmbuild.environment.target import discover
from tests.support.cli import REPO, rb
from tests.support.envs import stage_library
from tests.support.snapshots import snapshot

pytestmark = pytest.mark.slow

SCRIPT = "etc/conda/activate.d/rocm.sh"


def _other(fixture_libs, tmp_path, version="3.5.0") -> Path:
    """Another libMIOpen (another version) in a directory outside the env: a wheel's copy, /opt/rocm."""
    d = tmp_path / "other" / "lib"
    stage_library(fixture_libs(version), d)
    return d


def _by_name(checks):
    return {c.name: c for c in checks}


def _conda(env, *, state: dict | None = None, script: str | None = None):
    """Make a fake-torch env a conda env: conda-meta/ (with a state file) and an activate.d script;
    its torch finds libMIOpen.so.1 by name, LD_LIBRARY_PATH first, then the env's lib/ (the RUNPATH)."""
    (env.prefix / "conda-meta").mkdir(exist_ok=True)
    if state is not None:
        (env.prefix / "conda-meta" / "state").write_text(json.dumps(state))
    if script is not None:
        (env.prefix / SCRIPT).parent.mkdir(parents=True, exist_ok=True)
        (env.prefix / SCRIPT).write_text(script)
    env.configure(load="libMIOpen.so.1", search=[str(env.prefix / "lib")])


def _main_json(capsys, argv):
    code = cli.main(argv + ["--json"])
    return code, json.loads(capsys.readouterr().out)


def test_activate_d_puts_another_libmiopen_first(target_env, fixture_libs, tmp_path, capsys):
    env = target_env("3.5.1")
    other = _other(fixture_libs, tmp_path)
    _conda(env, script=f'export LD_LIBRARY_PATH="{other}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"\necho noise\n')
    own, theirs = os.path.realpath(env.libfile), os.path.realpath(other / "libMIOpen.so.1.0")

    code, data = _main_json(capsys, ["status", "--env", str(env.prefix)])
    assert code == EXIT_OK
    act, diff = data["target"]["activation"], data["target"]["unactivated"]
    assert act["kind"] == "conda" and act["files"] == [SCRIPT]
    assert [(c["var"], c["source"]) for c in act["changes"]] == [("LD_LIBRARY_PATH", SCRIPT)]
    assert diff["activated"] == [theirs] and diff["unactivated"] == [own]
    assert [c["source"] for c in diff["causes"]] == [SCRIPT]
    assert data["torch"]["version_int"] == 3005000  # the activated run is the one reported
    assert cli.main(["status", "--env", str(env.prefix)]) == EXIT_OK
    text = capsys.readouterr().out
    assert f"LD_LIBRARY_PATH set by {SCRIPT} puts {other} first: the activated environment loads {theirs}" in text
    assert f"without the activation it loads {own}" in text

    # verify judges the activated one: the env's own file is not what the user's shell loads
    code, data = _main_json(capsys, ["verify", "--env", str(env.prefix), "--expect-file", str(env.libfile)])
    assert code == EXIT_VERIFY and "identity" in data["error"]["details"]["failures"]
    assert SCRIPT in data["error"]["message"]
    code, data = _main_json(capsys, ["verify", "--env", str(env.prefix), "--expect", "3.5.0"])
    assert code == EXIT_OK

    checks = _by_name(doctor.check_activation(discover(env=str(env.prefix))))
    assert checks["target activation"].status == "warn" and SCRIPT in checks["target activation"].detail
    assert f"from {SCRIPT}" in checks["target activation"].fix


def test_conda_meta_state_env_vars_are_applied_before_the_scripts(target_env, fixture_libs, tmp_path, monkeypatch):
    env = target_env("3.5.1")
    other = _other(fixture_libs, tmp_path)
    monkeypatch.setenv("ROCMBUILD_TEST_GONE", "1")
    _conda(env, state={"env_vars": {"MY_ROCM": str(other.parent), "MIOPEN_FIND_MODE": "FAST",
                                    "ROCMBUILD_TEST_GONE": activation.UNSET}},
           script='export LD_LIBRARY_PATH="$MY_ROCM/lib"\n')  # reads a var conda-meta/state set
    t = discover(env=str(env.prefix))
    assert t.library().path == os.path.realpath(other / "libMIOpen.so.1.0")
    sources = {c.var: (c.after, c.source) for c in t.activation.changes}
    assert sources["MY_ROCM"] == (str(other.parent), "conda-meta/state")
    assert sources["MIOPEN_FIND_MODE"] == ("FAST", "conda-meta/state")
    assert sources["ROCMBUILD_TEST_GONE"] == (None, "conda-meta/state")
    assert sources["LD_LIBRARY_PATH"] == (str(other), SCRIPT)
    assert t.activation.files == ("conda-meta/state", SCRIPT)
    assert [(c.var, c.source) for c in t.difference.causes] == [("LD_LIBRARY_PATH", SCRIPT)]


def test_venv_bin_activate_exporting_ld_library_path(target_env, fixture_libs, tmp_path, capsys):
    env = target_env("3.5.1")
    other = _other(fixture_libs, tmp_path)
    env.configure(load="libMIOpen.so.1", search=[str(env.prefix / "lib")])
    with open(env.prefix / "bin" / "activate", "a") as f:  # the posted gfx1151 workaround
        f.write(f'\nexport LD_LIBRARY_PATH="{other}:$LD_LIBRARY_PATH"\n')
    code, data = _main_json(capsys, ["status", "--env", str(env.prefix)])
    assert code == EXIT_OK and data["target"]["activation"]["kind"] == "venv"
    diff = data["target"]["unactivated"]
    assert [(c["var"], c["source"]) for c in diff["causes"]] == [("LD_LIBRARY_PATH", "bin/activate")]
    assert diff["activated"] == [os.path.realpath(other / "libMIOpen.so.1.0")]


def test_an_activation_without_relevant_changes_probes_once(target_env, tmp_path):
    env = target_env("3.5.1")
    (env.prefix / "conda-meta").mkdir()
    (env.prefix / SCRIPT).parent.mkdir(parents=True)
    (env.prefix / SCRIPT).write_text("export SOME_TOOL_HOME=/x\n")
    t = discover(env=str(env.prefix))
    assert t.activation.kind == "conda" and t.activation.change("SOME_TOOL_HOME").source == SCRIPT
    assert t.activation.relevant() == () and t.unactivated is None and t.difference is None


def test_a_script_that_exits_is_a_target_error(target_env):
    env = target_env("3.5.1")
    (env.prefix / "conda-meta").mkdir()
    (env.prefix / SCRIPT).parent.mkdir(parents=True)
    (env.prefix / SCRIPT).write_text("exit 3\n")
    with pytest.raises(TargetError, match="rocm.sh ended the shell") as exc:
        discover(env=str(env.prefix))
    assert exc.value.exit_code == EXIT_INPUT


def test_conda_run_is_used_when_conda_is_found(target_env, fixture_libs, tmp_path, monkeypatch):
    env = target_env("3.5.1")
    other = _other(fixture_libs, tmp_path)
    _conda(env, script=f'export LD_LIBRARY_PATH="{other}"\n')
    conda = tmp_path / "bin" / "conda"  # a stand-in for `conda run -p PREFIX CMD...` (no conda here)
    conda.parent.mkdir()
    conda.write_text('#!/bin/bash\n[ "$1" = run ] && [ "$2" = -p ] || exit 9\np=$3; shift 3\n'
                     'export CONDA_PREFIX="$p" SET_BY_CONDA_RUN=1\n'
                     'for f in "$p"/etc/conda/activate.d/*.sh; do . "$f"; done\nexec "$@"\n')
    conda.chmod(0o755)
    monkeypatch.setenv("CONDA_EXE", str(conda))
    t = discover(env=str(env.prefix))
    assert t.activation.how == f"conda run ({conda})"
    assert t.activation.change("SET_BY_CONDA_RUN").source == "conda run"
    assert t.activation.change("LD_LIBRARY_PATH").source == SCRIPT
    assert t.library().path == os.path.realpath(other / "libMIOpen.so.1.0")


def test_doctor_flags_a_callers_ld_library_path_copy(target_env, fixture_libs, tmp_path, monkeypatch):
    env = target_env("3.5.1")  # loads its lib by path: the copy on LD_LIBRARY_PATH is not loaded, but could be
    other = _other(fixture_libs, tmp_path)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(other))
    t = discover(env=str(env.prefix))
    copies = [c for c in doctor.check_activation(t) if c.name == "library copy"]
    assert len(copies) == 1 and copies[0].status == "warn"
    assert f"LD_LIBRARY_PATH entry {other} (from the caller's environment) holds another copy" in copies[0].detail
    assert str(other / "libMIOpen.so.1.0") in copies[0].detail and "unset it" in copies[0].fix


def test_doctor_flags_a_callers_ld_preload_copy(target_env, fixture_libs, tmp_path, monkeypatch):
    env = target_env("3.5.1")
    other = _other(fixture_libs, tmp_path)
    monkeypatch.setenv("LD_PRELOAD", str(other / "libMIOpen.so.1.0"))
    checks = doctor.run(env=str(env.prefix))
    copies = [c for c in checks if c.name == "library copy"]
    assert [c.detail.split(" holds")[0] for c in copies] == [
        f"LD_PRELOAD entry {other / 'libMIOpen.so.1.0'} (from the caller's environment)"]
    assert _by_name(checks)["target torch"].status == "fail"  # two libMIOpen mapped


def test_doctor_flags_a_copy_the_activation_adds(target_env, fixture_libs, tmp_path):
    env = target_env("3.5.1")  # loads by path; the activation's entry only holds a copy
    other = _other(fixture_libs, tmp_path)
    with open(env.prefix / "bin" / "activate", "a") as f:
        f.write(f'\nexport LD_LIBRARY_PATH="{other}"\n')
    checks = _by_name(doctor.check_activation(discover(env=str(env.prefix))))
    assert checks["target activation"].status == "ok"  # the same file either way
    assert f"LD_LIBRARY_PATH entry {other} (set by bin/activate) holds another copy" in checks["library copy"].detail


def test_implicit_target_says_where_it_came_from(target_env, capsys, monkeypatch):
    env = target_env("3.5.1")
    monkeypatch.setenv("VIRTUAL_ENV", str(env.prefix))
    code, data = _main_json(capsys, ["status"])
    assert code == EXIT_OK and data["target"]["from"] == "$VIRTUAL_ENV"
    assert data["target"]["activation"]["how"] == "already active"
    assert cli.main(["status"]) == EXIT_OK
    out, err = capsys.readouterr()
    assert f"target: {env.prefix} (from $VIRTUAL_ENV)" in err
    assert f"target: {env.prefix} (from $VIRTUAL_ENV; python" in out
    code, data = _main_json(capsys, ["status", "--env", str(env.prefix)])
    assert data["target"]["from"] == "--env"


def test_the_database_report_reads_the_activated_environment(target_env, tmp_path, capsys, monkeypatch):
    """MIOPEN_CUSTOM_CACHE_DIR and MIOPEN_SYSTEM_DB_PATH set by an activate.d script are the ones the
    user's process has: the report judges the dirs they name, not the caller's."""
    env = target_env("3.5.1")
    for var in ("MIOPEN_CUSTOM_CACHE_DIR", "MIOPEN_SYSTEM_DB_PATH"):
        monkeypatch.delenv(var, raising=False)
    custom, system = tmp_path / "miopen-cache", tmp_path / "team-db"
    custom.mkdir()
    system.mkdir()
    (custom / "gfx1151_40.ukdb").write_bytes(b"kernels of another build\n")
    (system / "gfx1151_40.kdb").write_bytes(b"a shared kernel db\n")
    _conda(env, script=f'export MIOPEN_CUSTOM_CACHE_DIR="{custom}"\nexport MIOPEN_SYSTEM_DB_PATH="{system}"\n')
    code, data = _main_json(capsys, ["status", "--env", str(env.prefix)])
    assert code == EXIT_OK
    db = data["databases"]
    assert db["db_dir"] == str(system) and db["custom_cache"] == str(custom)
    assert db["custom_foreign"] == [str(custom / "gfx1151_40.ukdb")]
    assert any(n.startswith(f"MIOPEN_SYSTEM_DB_PATH={system} replaces the dir beside the library") for n in db["notes"])
    assert cli.main(["status", "--env", str(env.prefix)]) == EXIT_OK
    text = capsys.readouterr().out
    assert f"MIOpen databases: {system}" in text and f"rm -rf -- {custom / 'gfx1151_40.ukdb'}" in text


def test_a_target_found_by_name_says_so(target_env, capsys, monkeypatch):
    env = target_env("3.5.1")
    (env.prefix / "conda-meta").mkdir(exist_ok=True)  # a conda env: what -n finds
    monkeypatch.setenv("CONDA_ENVS_PATH", str(env.prefix.parent))
    for var in ("CONDA_PREFIX", "VIRTUAL_ENV"):
        monkeypatch.delenv(var, raising=False)
    code, data = _main_json(capsys, ["status", "-n", env.prefix.name])
    assert code == EXIT_OK, data
    assert data["target"]["from"] == f"-n {env.prefix.name}"
    assert data["target"]["prefix"] == str(env.prefix)
    assert cli.main(["status", "-n", env.prefix.name]) == EXIT_OK
    assert f"(from -n {env.prefix.name}; python" in capsys.readouterr().out


def test_rocmbuilds_own_venv_is_not_the_target(tmp_path):
    venv = tmp_path / ".venv"  # the README's venv: rocmbuild's dependencies, no torch
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    e = {k: v for k, v in os.environ.items() if k not in ("CONDA_PREFIX", "PYTHONHOME")}
    e.update(VIRTUAL_ENV=str(venv), PYTHONPATH=str(REPO))
    for verb in ("status", "doctor"):
        done = subprocess.run([str(venv / "bin" / "python"), "-m", "rocmbuild", verb, "--json"], env=e,
                              capture_output=True, text=True, cwd=str(REPO), timeout=120, start_new_session=True)
        data = json.loads(done.stdout)
        if verb == "status":
            assert done.returncode == EXIT_INPUT, done.stderr
            assert "the environment rocmbuild itself runs from, and it has no torch" in data["error"]["message"]
            assert "--env" in data["error"]["hint"] and data["error"]["details"]["own_environment"] is True
        else:
            target = [c for c in data["checks"] if c["name"] == "target"]
            assert target and target[0]["status"] == "warn" and "$VIRTUAL_ENV" in target[0]["detail"]


def test_own_venv_check_is_not_made_for_other_envs(target_env, monkeypatch):
    env = target_env("3.5.1")
    monkeypatch.setenv("CONDA_PREFIX", str(env.prefix))  # not sys.prefix: judged as usual
    assert discover().origin == "$CONDA_PREFIX"


def test_apply_and_rollback_judge_the_activated_env(txn_home, target_env, fixture_libs, tmp_path):
    env = target_env("3.5.0", compile_version="3.5.1")
    other = _other(fixture_libs, tmp_path)  # 3.5.0 too, outside the prefix, first on the activated LD_LIBRARY_PATH
    _conda(env, script=f'export LD_LIBRARY_PATH="{other}"\n')
    before, other_before = snapshot(env.prefix), snapshot(other.parent)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)
    assert r.returncode == EXIT_INPUT, r.stderr  # the file the activated env loads is outside the prefix
    assert "outside the prefix" in r.stderr and snapshot(env.prefix) == before

    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--allow-outside-prefix", "--json")
    assert r.returncode == EXIT_OK, r.stderr
    sdir = Path(json.loads(r.stdout)["target"]["state_dir"])
    assert snapshot(other.parent) != other_before  # the copy the user's shell loads got the new bytes
    assert snapshot(env.prefix) == before
    status = json.loads(rb("status", "--env", env.prefix, "--json").stdout)
    assert status["torch"]["runtime_version"] == "3.5.1" and status["target"]["unactivated"] is not None
    r = rb("rollback", "--env", env.prefix)
    assert r.returncode == EXIT_OK, r.stderr
    assert snapshot(other.parent) == other_before
    shutil.rmtree(sdir)  # the session home is shared
