#!/usr/bin/env python3
"""Benchmark: how long the CLI takes to start -- ``rocmbuild --version`` / ``--help`` vs ``pip --version``.

    python benchmarks/startup.py [--runs 7]

Prints, in one run, the median wall time of ``python -m rocmbuild --version``, ``python -m
rocmbuild --help``, ``python -m rocmbuild __complete`` (what bash runs on every Tab) and
``python -m pip --version`` (each a fresh process, interleaved so that load on the machine hits
them alike), the ratios to pip, then the ten heaviest imports of ``import rocmbuild.cli.app``
(cumulative microseconds, ``python -X importtime``).

Decisions:
* The sources are byte-compiled first (``compileall``), as ``pip install`` leaves them: this
  machine may set ``PYTHONDONTWRITEBYTECODE``, which would otherwise compile every module on every
  start and measure the compiler, not the imports.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = {
    "rocmbuild --version": [sys.executable, "-m", "rocmbuild", "--version"],
    "rocmbuild --help": [sys.executable, "-m", "rocmbuild", "--help"],
    "rocmbuild __complete (Tab)": [sys.executable, "-m", "rocmbuild", "__complete", "ap"],
    "pip --version": [sys.executable, "-m", "pip", "--version"],
}


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def heaviest_imports(n: int = 10) -> list[tuple[int, str]]:
    """The ``n`` largest cumulative import times (us, module) of ``import rocmbuild.cli.app``."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import rocmbuild.cli.app"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
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
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "rocmbuild")], check=True, capture_output=True)
    for argv in COMMANDS.values():  # warm the page cache once, untimed
        timed(argv)
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for _ in range(args.runs):
        for name, argv in COMMANDS.items():
            times[name].append(timed(argv))
    load = os.getloadavg()[0]
    print(f"start-up, median of {args.runs} runs each, interleaved (load average {load:.1f} on {os.cpu_count()} CPUs):")
    pip = statistics.median(times["pip --version"])
    for name, ts in times.items():
        med = statistics.median(ts)
        ratio = "" if name == "pip --version" else f"   {med / pip * 100:4.0f}% of pip --version"
        print(f"  {name:28} {med * 1000:7.1f} ms  (min {min(ts) * 1000:.1f}, max {max(ts) * 1000:.1f}){ratio}")
    print("\nthe ten heaviest imports of `import rocmbuild.cli.app` (cumulative, python -X importtime):")
    for us, name in heaviest_imports():
        print(f"  {us / 1000:8.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
