#!/usr/bin/env python3
"""Benchmark: how long the CLI takes to start -- ``rocmbuild --version`` / ``--help`` vs ``pip --version``.

    python benchmarks/startup.py [--runs 7]

Prints, in one run, the median wall time of ``python -m rocmbuild --version``, ``python -m
rocmbuild --help``, ``python -m rocmbuild __complete`` (what bash runs on every Tab) and
``python -m pip --version`` (each a fresh process, interleaved so that load on the machine hits
them alike), the ratios to pip, then the ten heaviest imports of ``import rocmbuild.cli.app``
(cumulative microseconds, ``python -X importtime``).

Decisions:
* Every command runs with its byte code cached alike, as ``pip install`` leaves a package: all
  run with ``PYTHONPYCACHEPREFIX`` pointed at one temp dir (and without ``PYTHONDONTWRITEBYTECODE``,
  which this machine may set), filled by one untimed warm-up run of each. Otherwise a module
  without a ``.pyc`` (some of pip's vendored ones here) is compiled on every start, and the figure
  measures the compiler, not the imports. Nothing is written beside the installed packages.
* Each command runs ``--runs`` times round robin; the median is printed with the spread (min-max).
  The figures are only comparable within one run (pip is the yardstick measured beside them).
* ``rocmbuild`` runs as ``python -m rocmbuild`` from this checkout (the console script adds the
  same interpreter start-up as ``python -m pip`` does).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = {
    "rocmbuild --version": [sys.executable, "-m", "rocmbuild", "--version"],
    "rocmbuild --help": [sys.executable, "-m", "rocmbuild", "--help"],
    "rocmbuild __complete (Tab)": [sys.executable, "-m", "rocmbuild", "__complete", "ap"],
    "pip --version": [sys.executable, "-m", "pip", "--version"],
}


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def heaviest_imports(env: dict[str, str], n: int = 10) -> list[tuple[int, str]]:
    """The ``n`` largest cumulative import times (us, module) of ``import rocmbuild.cli.app``."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import rocmbuild.cli.app"], cwd=ROOT,
                          env=env, capture_output=True, text=True, check=True)
    rows: dict[str, int] = {}  # a package and its submodule of the same name appear twice: the larger
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = line.removeprefix("import time:").split("|")
        rows[name.strip()] = max(rows.get(name.strip(), 0), int(cumulative))
    return sorted(((us, name) for name, us in rows.items()), reverse=True)[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocmbuild-startup-pyc-") as pyc:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pyc
        for argv in COMMANDS.values():  # byte code and page cache, once, untimed
            timed(argv, env)
        times: dict[str, list[float]] = {k: [] for k in COMMANDS}
        for _ in range(args.runs):
            for name, argv in COMMANDS.items():
                times[name].append(timed(argv, env))
        heaviest = heaviest_imports(env)
    load = os.getloadavg()[0]
    print(f"start-up, median of {args.runs} runs each, interleaved (load average {load:.1f} on {os.cpu_count()} CPUs):")
    pip = statistics.median(times["pip --version"])
    for name, ts in times.items():
        med = statistics.median(ts)
        ratio = "" if name == "pip --version" else f"   {med / pip * 100:4.0f}% of pip --version"
        print(f"  {name:28} {med * 1000:7.1f} ms  (min {min(ts) * 1000:.1f}, max {max(ts) * 1000:.1f}){ratio}")
    print("\nthe ten heaviest imports of `import rocmbuild.cli.app` (cumulative, python -X importtime):")
    for us, name in heaviest:
        print(f"  {us / 1000:8.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
