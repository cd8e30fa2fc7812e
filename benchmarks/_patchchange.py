"""The rebuild after a one-line patch change (issue 28): what ``benchmarks/rebuild.py --patch-change``
runs, on the fixture library or on the real MIOpen inside a ROCm 7.2 root.

Both builds go through the real CLI (``python -m rocmbuild build``) with the ``auto`` launcher,
so through ccache with the cache rocmbuild gives it (``$ROCMBUILD_HOME/ccache``: a fresh home
per run, so the cache starts empty and holds only what the cold build put there). Between the
builds exactly one line of one patch changes: a new key, a new build tree, and the compile of
the one patched file is the only work ccache should not answer. ``ccache -z`` before each
build and ``ccache --print-stats`` after it give the hit rate of that build alone.

Decisions:

* The wall time of each ``rocmbuild build`` process is measured whole (interpreter start,
  fetch, configure, compile, install, sealing). The cold build's fetch is of a local
  repository (seconds).
* The real MIOpen takes 45 minutes cold on 2 cores (quiet), so by default both builds compile
  the same subset (``[build] targets``: :data:`MIOPEN_OBJECTS`, every 21st of the 421 objects
  of ``libMIOpen`` in the example recipe's configuration, in name order, plus the patched
  ``find_controls.cpp``); the library is then not linked and the install step fails, which is
  the expected end of a subset build (anything else fails the benchmark). ``--all-objects``
  builds the whole library. A failed subset build keeps its tree (as any failed build); it is
  removed before the rebuild, so the rebuild starts from no tree, as after a successful build
  (otherwise the retry seeding, not ccache, would be measured). ``--reuse-ccache DIR SECONDS``
  skips the cold build: the rebuild starts from a copy of a cache an earlier cold build of the
  unchanged recipe filled, and the ratio is taken against that build's given time.
* In the root, rocmbuild runs from this checkout (copied into the root, on ``PYTHONPATH``)
  with a Python that has its dependencies (``--root-python``); ``/proc`` and ``/dev`` are
  mounted only when the root has none, and unmounted afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import ROOT, rocm7_argv, rocm7_mounts

#: the fixture project's patched file and line (tests/fixtures/miopen/src/miopen.c)
FIXTURE_PATCH = """--- a/src/miopen.c
+++ b/src/miopen.c
@@ -24 +24 @@
-const char* miopenFixtureMarker(void) {{ return "stock"; }}
+const char* miopenFixtureMarker(void) {{ return "{word}"; }}
"""

#: examples/rocm7's recipe, its second patch, and the line the rebuild changes in it
MIOPEN_RECIPE = "miopen-3.3.0-rocm7.toml"
MIOPEN_PATCH = "patches/miopen-3.3.0-rocm7/0002-find-controls-boost-optional.patch"
MIOPEN_LINE = "+        return boost::make_optional(res);"
MIOPEN_CHANGED = MIOPEN_LINE + "  // changed by benchmarks/rebuild.py"

_O = "src/CMakeFiles/MIOpen.dir/"
#: every 21st of the 421 objects of libMIOpen (example recipe, gfx1151), in name order, and
#: the file the patch touches (db_path.cpp is one of the five that MIOpen's version tweak,
#: which follows the patches, legitimately recompiles)
MIOPEN_OBJECTS = tuple(_O + p for p in (
    "__/db_path.cpp.o", "__/inlined_kernels/batch_22.cpp.o", "__/inlined_kernels/batch_41.cpp.o",
    "__/inlined_kernels/batch_60.cpp.o", "__/inlined_kernels/batch_8.cpp.o", "__/inlined_kernels/batch_99.cpp.o",
    "check_numerics.cpp.o", "dropout.cpp.o", "graphapi/enginecfg.cpp.o", "hip/hiperrors.cpp.o",
    "mha/problem_description.cpp.o", "operator.cpp.o", "rnn/Solutions/Base/bw_weights_modular.cpp.o",
    "softmax_api.cpp.o", "solver/batchnorm/forward_training_ck.cpp.o",
    "solver/conv/conv_asm_implicit_gemm_wrw_v4r1_dynamic.cpp.o",
    "solver/conv/conv_hip_implicit_gemm_fwd_v4r4_xdlops.cpp.o", "solver/conv/conv_ocl_dir2D_bwdWrW_53.cpp.o",
    "solver/groupnorm/forward_groupnorm.cpp.o", "solver/reduce/forward_argmin.cpp.o",
    "transformers_adam_w_api.cpp.o", "find_controls.cpp.o"))


@dataclass(frozen=True)
class Run:
    """One ``rocmbuild build``: its wall time, its JSON answer and ccache's counters for it."""

    seconds: float
    answer: dict
    hits: int
    misses: int

    @property
    def hit_rate(self) -> float:
        return self.hits / (self.hits + self.misses) if self.hits + self.misses else 0.0


def ccache_counters(text: str) -> tuple[int, int]:
    """(hits, misses) from ``ccache --print-stats`` (``name<TAB>value`` lines)."""
    values = dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)
    hits = int(values.get("direct_cache_hit", 0)) + int(values.get("preprocessed_cache_hit", 0))
    return hits, int(values.get("cache_miss", 0))


class Place:
    """Where the builds run: this machine (``argv`` as is) or a ROCm root (``argv`` chrooted)."""

    def __init__(self, root: Path | None = None, python: str = sys.executable, env: dict[str, str] | None = None):
        self.root, self.python, self.env = root, python, env or {}

    def argv(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str] | None]:
        if self.root is None:
            return argv, {**os.environ, **self.env, **env}
        return rocm7_argv(self.root, argv, {**self.env, **env}), None

    def run(self, argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        full, penv = self.argv(argv, env)
        return subprocess.run(full, env=penv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)

    def host(self, path: str) -> Path:
        """A path of the place as this machine sees it."""
        return Path(path) if self.root is None else self.root / path.lstrip("/")


def build_once(place: Place, home: str, build_args: list[str], *, subset: bool, timeout: float) -> Run:
    """``ccache -z``, one ``rocmbuild build``, ``ccache --print-stats``."""
    cc_env = {"CCACHE_DIR": f"{home}/ccache"}
    place.run(["ccache", "-z"], cc_env, 120)
    start = time.perf_counter()
    done = place.run([place.python, "-m", "rocmbuild", "build", *build_args, "--json"],
                     {"ROCMBUILD_HOME": home, "NO_COLOR": "1"}, timeout)
    seconds = time.perf_counter() - start
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        answer = {}
    message = str((answer.get("error") or {}).get("message", ""))
    if done.returncode != 0 and not (subset and "install failed" in message):
        sys.exit(f"rocmbuild build failed ({done.returncode}):\n{done.stderr[-4000:]}\n{done.stdout[-2000:]}")
    stats = place.run(["ccache", "--print-stats"], cc_env, 120)
    hits, misses = ccache_counters(stats.stdout)
    return Run(seconds, answer, hits, misses)


def fixture(tmp: Path, sources: int, weight: int) -> tuple[Run, Run]:
    """The fixture library with ``sources`` generated C files of ``weight`` functions each and a
    patch on ``src/miopen.c``: cold, then again after that patch's one changed line."""
    from benchmarks._common import make_monorepo, write_fixture_recipe

    repo = make_monorepo(tmp / "rocm-libraries", big_mb=1)
    recipe = write_fixture_recipe(tmp / "recipes", name="bench", url=repo.url, generator="Ninja", data=None,
                                  defines={"MIOPEN_FIXTURE_EXTRA_SOURCES": sources,
                                           "MIOPEN_FIXTURE_SOURCE_WEIGHT": weight},
                                  source_extra='patches = ["0001-marker.patch"]')
    patch = tmp / "recipes" / "patches" / "bench" / "0001-marker.patch"
    patch.parent.mkdir(parents=True)
    place, home, runs = Place(), str(tmp / "home"), []
    for word in ("patched", "patched-again"):
        patch.write_text(FIXTURE_PATCH.format(word=word))
        runs.append(build_once(place, home, [str(recipe)], subset=False, timeout=3600))
    return runs[0], runs[1]


def miopen(root: Path, python: str, source: str, gpu: str, *, all_objects: bool,
           reuse: tuple[str, float] | None = None) -> tuple[Run, Run]:
    """The real MIOpen (examples/rocm7) inside ``root``: cold, then after a one-line change to
    its second patch. Everything is made under ``root/tmp/rocmbuild-bench-<pid>`` and removed.
    ``reuse`` (a ccache dir inside the root that a cold build of the unchanged recipe filled, and
    that build's measured seconds): no cold build here; a copy of that cache is the home's."""
    inner = f"/tmp/rocmbuild-bench-{os.getpid()}"
    work = root / inner.lstrip("/")
    shutil.copytree(ROOT / "rocmbuild", work / "src" / "rocmbuild", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "examples" / "rocm7", work / "recipes")
    toml = work / "recipes" / MIOPEN_RECIPE
    if not all_objects:
        targets = json.dumps(list(MIOPEN_OBJECTS))
        toml.write_text(toml.read_text().replace("\n[build]\n", f"\n[build]\ntargets = {targets}\n", 1))
    patch = work / "recipes" / MIOPEN_PATCH
    original = patch.read_text()
    if original.count(MIOPEN_LINE + "\n") != 1:
        sys.exit(f"{MIOPEN_PATCH} no longer holds the line this benchmark changes: {MIOPEN_LINE!r}")
    place = Place(root, python, {"PYTHONPATH": f"{inner}/src"})
    home = f"{inner}/home"
    args = [f"{inner}/recipes/{MIOPEN_RECIPE}", "--source", source, "--ref", "develop", "--gpu-targets", gpu]
    try:
        with rocm7_mounts(root):
            probe = place.run([python, "-c", "import rocmbuild, rich, requests, packaging, cryptography, elftools"],
                              {}, 120)
            if probe.returncode != 0:
                sys.exit(f"{python} inside {root} cannot import rocmbuild's dependencies: {probe.stderr.strip()[-500:]}\n"
                         "hint: --root-python a venv inside the root where rocmbuild was pip-installed")
            if reuse is None:
                cold = build_once(place, home, args, subset=not all_objects, timeout=6 * 3600)
                shutil.rmtree(place.host(f"{home}/build"), ignore_errors=True)
            else:
                shutil.copytree(place.host(reuse[0]), place.host(f"{home}/ccache"))
                cold = Run(reuse[1], {"key": "(given)"}, 0, 0)
            patch.write_text(original.replace(MIOPEN_LINE + "\n", MIOPEN_CHANGED + "\n"))
            again = build_once(place, home, args, subset=not all_objects, timeout=6 * 3600)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return cold, again


def report(what: str, cold: Run, again: Run, target: float = 0.10) -> bool:
    """Print both builds, their ratio and the hit rates; True when the rebuild met ``target``."""
    ratio = again.seconds / cold.seconds
    print(what)
    print(f"{'build':40}{'wall time':>12}{'ccache hits':>13}{'misses':>8}{'hit rate':>10}")
    first = "cold (empty ccache)" if cold.answer.get("key") != "(given)" else "cold (given, --reuse-ccache)"
    for name, r in ((first, cold), ("rebuild after a one-line patch change", again)):
        print(f"{name:40}{r.seconds:>11.1f}s{r.hits:>13}{r.misses:>8}{r.hit_rate:>10.1%}")
    print(f"keys: {cold.answer.get('key', '?')[:16]} -> {again.answer.get('key', '?')[:16]}")
    print(f"ratio rebuild/cold: {ratio:.1%} of the time")
    met = ratio <= target
    print(f"target: the rebuild <= {target:.0%} of the cold build -> {'MET' if met else 'NOT MET'}")
    return met
