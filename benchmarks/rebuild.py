"""Benchmark: a second `rocmbuild build` with the same inputs vs the first (cold) one.

Target (issue #2): the cached run takes under 5% of the cold run's time and starts zero
compiler processes.

Set-up: a synthetic monorepo (projects/miopen is the fixture library, made to compile
``--sources`` generated C files so the cold build does real compiler work), a recipe for it, and
PATH shims for cmake, cc, c++, gcc, g++, make and ninja that count every invocation before
exec'ing the real tool. Both runs go through the real CLI entry point in a fresh process
(``python -m rocmbuild build``), so interpreter start-up is included on both sides.

Run from the repository root: ``python benchmarks/rebuild.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import COMPILERS, bench_recipe, make_monorepo, make_shims, run_counted  # noqa: E402


def run_build(recipe: Path, env: dict[str, str], log: Path) -> tuple[float, dict, dict[str, int]]:
    return run_counted(["build", str(recipe)], env, log)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", type=int, default=800, help="generated C files in the cold build")
    ap.add_argument("--repeat", type=int, default=5, help="cached runs to take the median of")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="rocmbuild-bench-") as tmp_:
        tmp = Path(tmp_)
        repo = make_monorepo(tmp / "rocm-libraries", big_mb=1)
        recipe = tmp / "bench.toml"
        recipe.write_text(bench_recipe(repo.url, args.sources))
        log = tmp / "invocations.log"
        make_shims(tmp / "shims", log)
        env = dict(os.environ, ROCMBUILD_HOME=str(tmp / "home"), PATH=f"{tmp / 'shims'}:{os.environ['PATH']}")

        cold, first, cold_counts = run_build(recipe, env, log)
        cached_times, cached_counts, second = [], None, None
        for _ in range(args.repeat):
            t, second, counts = run_build(recipe, env, log)
            cached_times.append(t)
            cached_counts = counts
        assert second is not None and cached_counts is not None
        warm = statistics.median(cached_times)

    ratio = warm / cold
    compilers_cold = sum(cold_counts[c] for c in COMPILERS)
    compilers_warm = sum(cached_counts[c] for c in COMPILERS)
    print(f"fixture library with {args.sources} generated C files, Ninja, {os.cpu_count()} cores")
    print(f"{'run':28}{'wall time':>12}{'cmake':>8}{'compilers':>11}{'ninja':>8}  cached")
    print(f"{'cold (fetch+configure+build)':28}{cold:>11.2f}s{cold_counts['cmake']:>8}{compilers_cold:>11}"
          f"{cold_counts['ninja']:>8}  {first['cached']}")
    print(f"{'cached (median of ' + str(args.repeat) + ')':28}{warm:>11.2f}s{cached_counts['cmake']:>8}"
          f"{compilers_warm:>11}{cached_counts['ninja']:>8}  {second['cached']}")
    print(f"ratio cached/cold: {ratio:.1%} of the time")
    met = ratio < 0.05 and compilers_warm == 0 and cached_counts["cmake"] == 0 and second["cached"]
    print(f"target: under 5% of the cold time with zero compiler processes -> {'MET' if met else 'NOT MET'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
