"""The crash campaign (benchmarks/crashes.py) in CI: a short seeded campaign finds nothing broken,
and the same campaign against a planted recovery bug reports the break and exits 1.

The campaign is run as a user runs it (``python benchmarks/crashes.py``, a real process in its
own session); it builds its own world and kills only processes it started.

Decision: the default run makes a short campaign (:data:`SHORT` runs: each verb killed once
aimed and once at random); the long one is the same test with ``--crash-runs N`` (or
``ROCMBUILD_CRASH_RUNS=N``), or the benchmark itself (``python3 -m benchmarks.crashes --runs 300``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.cli import REPO, kill_group

pytestmark = pytest.mark.slow

SEED = 20261201
# the short campaign's seed: its six runs kill each verb once aimed and once at random, with every
# random kill in the first half of the verb's timed duration (so none ends before its kill), on
# both layouts, recovering an interrupted rollback and an interrupted apply
CAMPAIGN_SEED = 35
SHORT = 6


def crash_runs(config) -> int:
    """The campaign's size: ``--crash-runs``, else ``$ROCMBUILD_CRASH_RUNS``, else :data:`SHORT`."""
    runs = config.getoption("--crash-runs") or int(os.environ.get("ROCMBUILD_CRASH_RUNS") or SHORT)
    if runs < SHORT:
        pytest.fail(f"--crash-runs {runs}: at least {SHORT} (each verb killed aimed and at random)", pytrace=False)
    return runs


def campaign(*args: str, env: dict | None = None, timeout: float = 900) -> tuple[int, str]:
    e = dict(os.environ, **(env or {}))
    proc = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "crashes.py"), *args], cwd=str(REPO),
                            env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        kill_group(proc)
    return proc.returncode, out


def test_a_campaign_breaks_nothing(tmp_path, pytestconfig):
    n = crash_runs(pytestconfig)
    rc, out = campaign("--runs", str(n), "--seed", str(CAMPAIGN_SEED), "--jobs", "2", "--dir", str(tmp_path),
                       timeout=900 + 30 * n)
    assert rc == 0 and f"tried {n}, broken 0 (seed {CAMPAIGN_SEED}" in out, out
    runs = [line for line in out.splitlines() if line.startswith("run ")]
    assert len(runs) == n and all(": ok (" in line for line in runs), out
    for verb in ("apply", "rollback", "recover"):  # every verb was killed, aimed and at random
        for how in ("aimed", "random"):
            assert any(f" {verb} " in line and f" {how} " in line and "killed" in line for line in runs), out


# A recovery that does not put the originals back: in `rocmbuild recover` processes of the
# campaign's runs (not its timed set-up runs), the rename of each `.NAME.rocmbuild-old-TXN` restore
# temp over its destination is skipped. Planted through sitecustomize, outside rocmbuild's code, and
# decided at each call (argv, environment), so the fork server's children have it too.
PLANT = textwrap.dedent("""
    import os
    import sys

    _replace = os.replace


    def _skip_restores(src, dst, *args, **kwargs):
        if (".rocmbuild-old-" in os.fsdecode(src) and sys.argv[1:2] == ["recover"]
                and os.environ.get("ROCMBUILD_CRASH_RUN", "timing") != "timing"):
            return None
        return _replace(src, dst, *args, **kwargs)


    os.replace = _skip_restores
""")


def test_a_planted_recovery_bug_is_reported_with_its_seed_and_run(tmp_path):
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(PLANT)
    path = os.pathsep.join(p for p in (str(plant), os.environ.get("PYTHONPATH", "")) if p)
    work = tmp_path / "work"
    work.mkdir()
    # run 3 of any seed: a recover of a transaction interrupted after its first rename (aimed)
    rc, out = campaign("--seed", str(SEED), "--only", "3", "--jobs", "1", "--dir", str(work),
                       env={"PYTHONPATH": path})
    assert rc == 1, out
    assert "tried 1, broken 1" in out, out
    assert f"run 3 (seed {SEED}; again: python benchmarks/crashes.py --seed {SEED} --only 3)" in out, out
    assert "BROKEN:" in out, out
