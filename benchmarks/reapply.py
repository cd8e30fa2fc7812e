"""Benchmark: a repeated `rocmbuild apply` of an already-applied artifact vs the first apply.

Target (issue #5): the repeat takes under 2% of the first apply's time, starts no compiler and
no cmake, and writes no file in the target -- so a provisioning script can run it on every boot.

Set-up: a synthetic monorepo whose projects/miopen is the fixture library (made to compile
``--sources`` generated C files, so the first apply's build does real compiler work), a recipe
for it, and a target venv laid out like a conda env whose small ``torch`` package really
``dlopen``s its libMIOpen 3.5.0 (tests/support/envs.py). PATH shims count every cmake, compiler, make and
ninja process. Each run is the real CLI in a fresh process (``python -m rocmbuild apply``).

Figures: the first apply (cold: fetch + build + swap + verify); the same with the artifact
already cached (transaction only), for reference; the median of ``--repeat`` repeated applies;
and whether any path under the target changed (type, size, mtime, inode) in the repeats.

The repeat's cost is fixed (interpreter start-up, one probe of the target, one ``git ls-remote``);
the first apply's cost is the build, so the ratio depends on how much the build compiles: the
default ``--sources`` makes it about 20 s here.

Run from the repository root: ``python benchmarks/reapply.py``. On a real ROCm machine the first
apply builds MIOpen for an hour or more and the probe imports the real torch (seconds), so the
ratio there is far smaller than here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (  # noqa: E402
    COMPILERS, bench_recipe, build_library, listing, make_env, make_monorepo, make_shims, run_counted,
)


def identity(st: os.stat_result) -> tuple:
    """What "changed" means for a path of the target: type and mode, size, mtime, inode."""
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)


def apply(recipe: Path, prefix: Path, env: dict[str, str], log: Path) -> tuple[float, dict, dict[str, int]]:
    return run_counted(["apply", str(recipe), "--env", str(prefix)], env, log)


def hashed_by_a_repeat(recipe: Path, prefix: Path, env: dict[str, str], out: Path, log: Path) -> dict:
    """One more repeated apply with benchmarks/hashcount/ on PYTHONPATH: the files its processes
    hashed (summed over every rocmbuild process it ran)."""
    root = Path(__file__).resolve().parents[1]
    path = os.pathsep.join([str(root / "benchmarks" / "hashcount"), str(root)])
    run_counted(["apply", str(recipe), "--env", str(prefix)],
                dict(env, ROCMBUILD_BENCH_HASHES=str(out), PYTHONPATH=path), log)
    seen = [json.loads(line) for line in out.read_text().splitlines()]
    return {"files": sum(s["files"] for s in seen), "bytes": sum(s["bytes"] for s in seen),
            "paths": [p for s in seen for p in s["paths"]], "processes": len(seen)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", type=int, default=2000, help="generated C files in the first build")
    ap.add_argument("--repeat", type=int, default=5, help="repeated applies to take the median of")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="rocmbuild-bench-") as tmp_:
        tmp = Path(tmp_)
        repo = make_monorepo(tmp / "rocm-libraries", big_mb=1)
        recipe = tmp / "bench.toml"
        recipe.write_text(bench_recipe(repo.url, args.sources, ref="rocm-7.1.0"))
        stock = build_library("3.5.0", tmp / "stock")
        log = tmp / "invocations.log"
        make_shims(tmp / "shims", log)
        env = dict(os.environ, ROCMBUILD_HOME=str(tmp / "home"), PATH=f"{tmp / 'shims'}:{os.environ['PATH']}")

        target = make_env(tmp / "env-cold", layout="conda", lib_dir=stock, compile_version="3.5.0")
        first, res1, c1 = apply(recipe, target.prefix, env, log)
        assert res1["already_applied"] is False

        warm_target = make_env(tmp / "env-warm", layout="conda", lib_dir=stock, compile_version="3.5.0")
        first_cached, res_w, _ = apply(recipe, warm_target.prefix, env, log)
        assert res_w["already_applied"] is False

        before = listing(target.prefix, identity)
        times, counts, res = [], {}, {}
        for _ in range(args.repeat):
            t, res, counts = apply(recipe, target.prefix, env, log)
            times.append(t)
        hashed = hashed_by_a_repeat(recipe, target.prefix, env, tmp / "hashes.jsonl", log)
        after = listing(target.prefix, identity)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        repeat = statistics.median(times)

    ratio = repeat / first
    compilers = sum(counts[c] for c in COMPILERS)
    print(f"fixture library with {args.sources} generated C files; conda-style venv target; {os.cpu_count()} cores")
    print(f"{'run':44}{'wall time':>11}{'cmake':>7}{'compilers':>11}")
    print(f"{'first apply (fetch + build + swap + verify)':44}{first:>10.2f}s{c1['cmake']:>7}"
          f"{sum(c1[c] for c in COMPILERS):>11}")
    print(f"{'first apply, artifact already cached':44}{first_cached:>10.2f}s")
    print(f"{'repeated apply (median of ' + str(args.repeat) + ')':44}{repeat:>10.2f}s{counts['cmake']:>7}{compilers:>11}"
          f"   already_applied={res['already_applied']}")
    print(f"files hashed by a repeated apply: {hashed['files']} ({hashed['bytes']} bytes)"
          + (f": {', '.join(hashed['paths'][:5])}" if hashed["paths"] else ""))
    print(f"paths changed in the target by the repeats: {len(changed)}" + (f" ({', '.join(changed[:5])})" if changed else ""))
    print(f"ratio repeated/first: {ratio:.1%} (vs the cached first apply: {repeat / first_cached:.0%})")
    met = ratio < 0.02 and compilers == 0 and counts["cmake"] == 0 and not changed and res["already_applied"]
    met = met and hashed["files"] == 0
    print(f"target: under 2% of the first apply, no compiler or cmake, no file written or hashed -> "
          f"{'MET' if met else 'NOT MET'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
