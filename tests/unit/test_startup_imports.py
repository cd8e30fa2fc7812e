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


OTHER_VERBS_RESULTS = ("rocmbuild.results.stateresult", "rocmbuild.results.fleetresult",
                       "rocmbuild.results.cacheresult", "rocmbuild.results.demoresult", "rocmbuild.results.shellresult")


BUNDLE_AND_LOCK = ("rocmbuild.store.bundle", "rocmbuild.store.unbundle", "rocmbuild.flows.export")


def test_apply_imports_only_its_own_results():
    """``rocmbuild.results`` re-exports its names lazily: the apply flow (and the CLI's apply
    verb) import the txn and build results, not status's, fleet's, cache's, demo's or the shell's
    (about 30 ms of every apply's start-up here), nor the bundle and lock-file modules a cached
    recipe does not use (about 35 ms more)."""
    code = ("import json, sys\nfrom rocmbuild.cli.commands import cmd_apply\nfrom rocmbuild.flows import apply\n"
            "from rocmbuild.results import ApplyResult, DryRunResult\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('rocmbuild.results', 'rocmbuild.store',"
            " 'rocmbuild.flows')))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert "rocmbuild.results.txnresult" in loaded
    assert not [m for m in loaded if m in OTHER_VERBS_RESULTS + BUNDLE_AND_LOCK], loaded


def test_every_result_name_is_still_exported():
    """The lazy re-export misses no name: each name of ``__all__`` resolves to the object its
    module defines, ``from rocmbuild.results import *`` gives them all, and an unknown name is an
    AttributeError (an ImportError for ``from ... import``)."""
    code = """
import importlib, json, sys
import rocmbuild.results as r
names = sorted(r.__all__)
where = {n: type(getattr(r, n)).__name__ for n in names}
ns = {}
exec("from rocmbuild.results import *", ns)
missing_star = [n for n in names if n not in ns]
assert r.CacheVerifyResult is importlib.import_module("rocmbuild.results.cacheresult").CacheVerifyResult
assert r.Outcome is importlib.import_module("rocmbuild.results.txnresult").Outcome
assert r.HistoryRow is importlib.import_module("rocmbuild.results.stateresult").HistoryRow
try:
    r.NoSuchResult
    unknown = "no error"
except AttributeError as exc:
    unknown = str(exc)
try:
    exec("from rocmbuild.results import NoSuchResult", {})
    unknown_from = "no error"
except ImportError:
    unknown_from = "ImportError"
print(json.dumps([len(names), missing_star, unknown, unknown_from, sorted(dir(r)) == names]))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    count, missing_star, unknown, unknown_from, listed = json.loads(done.stdout.splitlines()[-1])
    assert count >= 40 and missing_star == [] and listed
    assert "NoSuchResult" in unknown and unknown_from == "ImportError"


PHASES = """
import json, sys
from rocmbuild import progress
progress.configure(json=sys.argv[1] == "json")
with progress.phase("build", "building") as p:
    for n in (1, 50, 100):
        p.line(f"[{n}/100] Building C object x{n}.o")
print(json.dumps(sorted(m for m in sys.modules if m == "rich" or m.startswith(("rich.", "rocmbuild.progressbar")))))
"""


@pytest.mark.parametrize("mode", ["json", "plain"])
def test_progress_off_a_terminal_imports_no_rich_progress(mode):
    """A build's phase with steps, off a terminal: ``--json`` imports no rich at all, plain lines
    (stderr a pipe) rich's console and text only; the terminal's display (rocmbuild.progressbar,
    rich.progress) is not imported. Both still say what they say (a JSON event, a plain line)."""
    done = subprocess.run([sys.executable, "-c", PHASES, mode], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert "rocmbuild.progressbar" not in loaded and "rich.progress" not in loaded, loaded
    if mode == "json":
        assert loaded == [] and '"state": "done"' in done.stderr
    else:
        assert "rich.console" in loaded and "built in" in done.stderr
