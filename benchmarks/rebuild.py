"""Benchmark: a second `rocmbuild build` with the same inputs vs the first (cold) one; with
``--patch-change``, the rebuild after a one-line change to one patch vs the cold build.

Target (issue #2): the cached run takes under 5% of the cold run's time and starts zero
compiler processes.

Target (issue #28, ``--patch-change``): after a one-line change to one of the recipe's patches
(a new key, a new build tree) the rebuild through ccache takes <= 10% of the cold build; both
times and ccache's hit rate of each build are printed (benchmarks/_patchchange.py says how).
On the fixture library by default; on the real MIOpen (examples/rocm7) inside a ROCm 7.2 root
(as root) with ``--rocm7-root DIR --root-python PY --miopen-source URL``: by default both builds
compile the same subset of libMIOpen's objects (``_patchchange.MIOPEN_OBJECTS``: about 1/20 of
them, the library is not linked), ``--all-objects`` the whole library (45 minutes cold, quiet).

Set-up: a synthetic monorepo (projects/miopen is the fixture library, made to compile
``--sources`` generated C files so the cold build does real compiler work), a recipe for it, and
PATH shims for cmake, cc, c++, gcc, g++, make and ninja that count every invocation before
exec'ing the real tool. Both runs go through the real CLI entry point in a fresh process
(``python -m rocmbuild build``), so interpreter start-up is included on both sides.

Run from the repository root: ``python benchmarks/rebuild.py [--patch-change]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _patchchange  # noqa: E402
from benchmarks._common import COMPILERS, bench_recipe, make_monorepo, make_shims, run_counted  # noqa: E402


def run_build(recipe: Path, env: dict[str, str], log: Path) -> tuple[float, dict, dict[str, int]]:
    return run_counted(["build", str(recipe)], env, log)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", type=int, default=None,
                    help="generated C files in the cold build (default 800; 200 with --patch-change)")
    ap.add_argument("--repeat", type=int, default=5, help="cached runs to take the median of")
    ap.add_argument("--patch-change", action="store_true",
                    help="issue 28: the rebuild after a one-line patch change, through ccache")
    ap.add_argument("--weight", type=int, default=40, help="--patch-change: functions per generated C file")
    ap.add_argument("--rocm7-root", type=Path, help="--patch-change on the real MIOpen inside this ROCm 7.2 root")
    ap.add_argument("--root-python", default="/usr/bin/python3",
                    help="a Python inside the root with rocmbuild's dependencies")
    ap.add_argument("--miopen-source", default="https://github.com/ROCm/MIOpen.git",
                    help="the MIOpen repository (a URL or path inside the root)")
    ap.add_argument("--gpu-targets", default="gfx1151")
    ap.add_argument("--all-objects", action="store_true", help="build the whole of libMIOpen (hours)")
    ap.add_argument("--reuse-ccache", nargs=2, metavar=("DIR", "SECONDS"),
                    help="--rocm7-root: no cold build; a copy of DIR (a ccache inside the root that a cold "
                         "build of the unchanged recipe filled, through rocmbuild) and that build's SECONDS")
    args = ap.parse_args()
    if args.patch_change:
        return patch_change(args)
    args.sources = args.sources or 800

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


def patch_change(args: argparse.Namespace) -> int:
    if shutil.which("ccache") is None and args.rocm7_root is None:
        print("ccache is not installed: nothing to measure (apt-get install ccache)")
        return 1
    if args.rocm7_root is not None:
        cold, again = _patchchange.miopen(args.rocm7_root.resolve(), args.root_python, args.miopen_source,
                                          args.gpu_targets, all_objects=args.all_objects,
                                          reuse=(args.reuse_ccache[0], float(args.reuse_ccache[1]))
                                          if args.reuse_ccache else None)
        what = (f"the real MIOpen 3.3.0 (examples/rocm7) for {args.gpu_targets} in {args.rocm7_root}, "
                + ("the whole library" if args.all_objects else
                   f"{len(_patchchange.MIOPEN_OBJECTS)} of its 421 objects (no link)"))
    else:
        with tempfile.TemporaryDirectory(prefix="rocmbuild-bench-") as tmp:
            cold, again = _patchchange.fixture(Path(tmp), args.sources or 200, args.weight)
        what = f"fixture library, {args.sources or 200} generated C files of {args.weight} functions, Ninja"
    return 0 if _patchchange.report(f"{what}, {os.cpu_count()} cores", cold, again) else 1


if __name__ == "__main__":
    sys.exit(main())
