"""The CLI's exit (rocmbuild/cli/app.py ``entry``): the process ends as the interpreter would end
it, minus the modules' teardown: output whole, exit code kept, atexit handlers run, a running
non-daemon thread joined. Real ``python`` processes, stdout a pipe (block-buffered)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time
    from pathlib import Path
    out = Path(sys.argv[1])

    class Torn:  # finalized by the interpreter's teardown of this module, not by os._exit
        def __del__(self):
            (out / "teardown").write_text("ran")

    keep = Torn()
    atexit.register(lambda: (out / "atexit").write_text("ran"))
    if sys.argv[2] == "thread":
        threading.Thread(target=lambda: (time.sleep(0.5), (out / "thread").write_text("joined"))).start()
    print("x" * 300000)  # more than a pipe holds: still in stdout's buffer when the verb ends
    sys.argv = ["rocmbuild", *sys.argv[3:]]
    from rocmbuild.cli.app import entry
    entry()
""")


def _run(tmp_path: Path, mode: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), ROCMBUILD_HOME=str(tmp_path / "home"))
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), mode, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_exit_skips_the_teardown_but_runs_atexit_and_flushes_everything(tmp_path):
    r = _run(tmp_path, "plain", "recipes", "--json")
    assert r.returncode == 0, r.stderr
    first, rest = r.stdout.split("\n", 1)
    assert first == "x" * 300000
    assert json.loads(rest)["verb"] == "recipes"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "teardown").exists()  # os._exit: the modules were not torn down


def test_a_failing_verb_keeps_its_exit_code(tmp_path):
    r = _run(tmp_path, "plain", "show", "no-such-recipe", "--json")
    out = json.loads(r.stdout.split("\n", 1)[1])
    assert r.returncode == out["exit_code"] != 0
    assert out["error"]["message"]
    assert (tmp_path / "atexit").read_text() == "ran"


def test_a_running_non_daemon_thread_takes_the_interpreters_exit_and_is_joined(tmp_path):
    r = _run(tmp_path, "thread", "recipes", "--json")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "teardown").read_text() == "ran"  # the interpreter's own exit, teardown and all


def test_python_dash_m_rocmbuild_exits_with_the_verbs_code(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), ROCMBUILD_HOME=str(tmp_path / "home"))
    r = subprocess.run([sys.executable, "-m", "rocmbuild", "show", "no-such-recipe"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no-such-recipe" in r.stderr
