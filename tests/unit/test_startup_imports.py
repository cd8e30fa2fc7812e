"""The CLI starts at once: importing the entry module, printing ``--version``/``--help`` and
answering the shell's Tab import none of the heavy dependencies nor the results/swap trees
(issue 28; ``benchmarks/startup.py`` prints the figures). Checked on ``sys.modules`` of a fresh
interpreter, so the guard holds without timing anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("rich", "requests", "urllib3", "cryptography", "elftools", "rocmbuild.results", "rocmbuild.swap",
         "rocmbuild.recipe", "rocmbuild.sources", "rocmbuild.builder", "rocmbuild.store",
         "rocmbuild.flows", "rocmbuild.environment", "rocmbuild.progress")

PROBE = """
import io, json, sys, contextlib
argv = json.loads(sys.argv[1])
if argv is not None:
    from rocmbuild.cli.app import main
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
else:
    import rocmbuild.cli.app
heavy = json.loads(sys.argv[2])
print(json.dumps(sorted(m for m in sys.modules if m in heavy)))
"""


@pytest.mark.parametrize("argv", [None, ["--version"], ["--help"], ["apply", "--help"], ["__complete", "ap"]],
                         ids=["import", "--version", "--help", "apply --help", "tab"])
def test_the_entry_point_imports_nothing_heavy(argv):
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [], f"imported for {argv}: {done.stdout}"


def test_a_verb_still_gets_what_it_needs():
    """The deferred imports happen when a verb runs: ``recipes`` lists the bundled recipes."""
    done = subprocess.run([sys.executable, "-m", "rocmbuild", "recipes", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["recipes"], done.stdout
