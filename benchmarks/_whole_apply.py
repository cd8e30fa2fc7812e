"""The whole apply, end to end, as a user runs it (benchmarks/swap.py's second figure).

* **rocmbuild**: ``python -m rocmbuild apply RECIPE --env ENV --json`` in a fresh process, the
  artifact already in the cache (built once beforehand by ``python -m rocmbuild build``): start-up,
  recipe and cache key (one ``git ls-remote`` of the fixture monorepo), recovery check, the probe
  of the target, planning, preflight, lock, journal, the target's own copy of the library, backup
  (hardlink), renames, commit, and the verification probe -- everything.
* **manual**: the DESIGN.md story end to end, made durable as a careful admin does it, real
  processes started as a shell starts them (a plain fork and exec each, not under rocmbuild's
  supervisor, whose cost is rocmbuild's): ``cp`` the library to ``.backup_system``,
  ``cp`` the cache's new one over it, ``ln -sf`` the two links, ``sync`` (a power cut after a bare
  ``cp`` over a library can leave it torn), then ``python -c "import torch;
  print(torch.backends.cudnn.version())"`` in the env (the user's check that it loads).
* **floor**: what any durable procedure must pay: one write of the library's bytes with an fsync,
  plus one ``import torch`` in the env (the check). rocmbuild's figure is printed as a ratio to
  both the manual procedure and this floor.
* **fixed costs, one by one**: one more apply (untimed) runs with benchmarks/costs/ on PYTHONPATH;
  it reports the start-up (process start to the apply flow), each probe of the target, the
  journal's saves, the fsyncs outside them, the library's copy, the other processes it starts
  (git, the activation's bash, ...: each by name), the ELF reads before the swap, and the output;
  the rest is printed as "other" (recipe, cache key, lock, plan, renames). The processes started
  beside the probe by another thread (the ref's ``git ls-remote``) are printed apart and not
  added: they are not on the apply's path.

The world is the tests' (tests/support via benchmarks/_common.py): the fixture monorepo, the
fixture recipe with ``MIOPEN_FIXTURE_PAD_MB`` so that the built libMIOpen is ``size + 1 MiB``
(two builds differ in size), and per run a fresh conda-layout venv whose fake ``torch`` really
``dlopen``s its libMIOpen 3.5.0, a real build padded to ``size``. Each run gets three fresh envs
(one per procedure: the floor imports torch in its own), each synced to disk before its clock
starts (left idle for 3 s more, every procedure was slower and spread more here, the floor
0.9-1.5 s instead of 0.5-1.0 s: not done), and runs the three procedures in the order :data:`ORDERS` gives it (rotated run by run,
printed). benchmarks/swap.py runs this on burned-in loop-mounted filesystems, so that the three
meet blocks of one kind (its docstring: "Like with like", and the figures measured here).

One more rocmbuild apply runs with benchmarks/hashcount/ on PYTHONPATH, untimed and before the
timed runs (a warm-up: the first library written after the world's build is slow whoever writes
it, and run 1 starts with rocmbuild): it records
how ``disk.copy_fd`` made the target's copy (reflink / copy_file_range / copy) and what was
hashed, so the figure says which path was measured without a hook in rocmbuild itself.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import ROOT, build_library, fixture_recipe, make_env, make_monorepo

REAL = "libMIOpen.so.1.0"
GOAL = 0.60  # rocmbuild's whole apply / the durable manual procedure
FLOOR_GOAL = 1.1  # rocmbuild's whole apply / the floor


@dataclass(frozen=True)
class World:
    recipe: Path
    stock: Path  # the staged lib dir of the env's libMIOpen 3.5.0 (padded)
    env: dict  # the process environment: ROCMBUILD_HOME
    work: Path


def make_world(work: Path, size_mib: int) -> World:
    """The monorepo, the padded recipe built into a fresh home, the padded stock library."""
    print(f"whole apply: building the fixture libMIOpen 3.5.0 ({size_mib} MiB) and the recipe's 3.5.1 "
          f"({size_mib + 1} MiB, `rocmbuild build`) ...", flush=True)
    work.mkdir(parents=True)
    repo = make_monorepo(work / "rocm-libraries", big_mb=1)
    recipe = work / "bench.toml"
    recipe.write_text(fixture_recipe(name="bench", url=repo.url, ref="rocm-7.1.0", data=None,
                                     defines={"MIOPEN_FIXTURE_PAD_MB": size_mib + 1}))
    stock = build_library("3.5.0", work / "stock", pad_mb=size_mib)
    shutil.rmtree(work / "stock" / "build")  # its 1 GiB object and link output: not needed
    env = dict(os.environ, ROCMBUILD_HOME=str(work / "home"))
    done = subprocess.run([sys.executable, "-m", "rocmbuild", "build", str(recipe)], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"rocmbuild build failed ({done.returncode}):\n{done.stderr}")
    compiled(ROOT / "rocmbuild")
    return World(recipe, stock, env, work)


def rocmbuild_apply(w: World, prefix: Path, env: dict | None = None) -> tuple[float, dict]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rocmbuild", "apply", str(w.recipe), "--env", str(prefix), "--json"],
                          env=env or w.env, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"rocmbuild apply failed ({done.returncode}):\n{done.stderr}\n{done.stdout}")
    res = json.loads(done.stdout)
    if res.get("already_applied") or not res["verdict"]["ok"]:
        sys.exit(f"rocmbuild apply did not swap and verify: {done.stdout}")
    return seconds, res


def manual_apply(new: Path, lib: Path, python: Path) -> tuple[float, str]:
    """The manual procedure as a shell runs it: each command a plain fork and exec (not under
    rocmbuild's supervisor, whose start is rocmbuild's cost, not the user's)."""
    start = time.perf_counter()
    for argv in (["cp", lib / REAL, lib / f"{REAL}.backup_system"], ["cp", new, lib / REAL],
                 ["ln", "-sf", REAL, lib / "libMIOpen.so.1"], ["ln", "-sf", "libMIOpen.so.1", lib / "libMIOpen.so"],
                 ["sync"]):
        subprocess.run(argv, check=True)
    out = subprocess.run([python, "-c", "import torch; print(torch.backends.cudnn.version())"], check=True,
                         capture_output=True, text=True).stdout.strip()
    return time.perf_counter() - start, out


def compiled(*dirs: Path) -> None:
    """Byte-compile ``dirs`` as ``pip install`` does: a user's rocmbuild and torch start from .pyc
    files (this machine may set PYTHONDONTWRITEBYTECODE, which would recompile them every run)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", *map(str, dirs)], check=True, capture_output=True)


def fresh_env(w: World, name: str):
    e = make_env(w.work / name, layout="conda", lib_dir=w.stock, compile_version="3.5.0")
    compiled(e.site_packages)
    os.sync()
    return e


def counted(w: World) -> dict:
    """One untimed apply with benchmarks/hashcount/: the copies made and the bytes hashed."""
    out = w.work / "counts.jsonl"
    e = fresh_env(w, "env-counted")
    path = os.pathsep.join([str(ROOT / "benchmarks" / "hashcount"), str(ROOT)])
    rocmbuild_apply(w, e.prefix, dict(w.env, ROCMBUILD_BENCH_HASHES=str(out), PYTHONPATH=path))
    shutil.rmtree(e.prefix)
    seen = [json.loads(line) for line in out.read_text().splitlines()]
    return {"copies": [c for s in seen for c in s.get("copies", [])],
            "hashed": sum(s["bytes"] + s.get("fd_bytes", 0) for s in seen),
            "paths": [p for s in seen for p in s["paths"]]}


def torch_import(python: Path) -> float:
    """Seconds of the user's check alone: ``import torch`` in the env (part of the floor)."""
    start = time.perf_counter()
    subprocess.run([python, "-c", "import torch; print(torch.backends.cudnn.version())"], check=True,
                   capture_output=True)
    return time.perf_counter() - start


def costs(w: World) -> dict:
    """One untimed apply with benchmarks/costs/: its fixed costs one by one (see that module)."""
    out = w.work / "costs.jsonl"
    e = fresh_env(w, "env-costs")
    path = os.pathsep.join([str(ROOT / "benchmarks" / "costs"), str(ROOT)])
    spawned = time.time()
    total, _res = rocmbuild_apply(w, e.prefix, dict(w.env, ROCMBUILD_BENCH_COSTS=str(out), PYTHONPATH=path,
                                                    ROCMBUILD_BENCH_COSTS_PREFIX=sys.prefix))
    ended = spawned + total
    shutil.rmtree(e.prefix)
    seen = next(json.loads(line) for line in out.read_text().splitlines() if json.loads(line)["entered"])
    main = [c for c in seen["children"] if not c.get("beside")]
    parts = {
        "start-up (interpreter, imports, parsing)": seen["entered"] - spawned,
        f"probes of the target ({len(seen['probes'])} starts of its Python)": sum(seen["probes"]),
        f"journal ({seen['journal'][0]} atomic saves, their fsyncs included)": seen["journal"][1],
        f"other fsyncs ({seen['fsyncs'][0]})": seen["fsyncs"][1],
        f"the library's copy ({len(seen['copies'])} copy_fd)": sum(c["seconds"] for c in seen["copies"]),
        f"other processes ({_programs(main)}; each under its supervisor)": sum(c["seconds"] for c in main),
        f"ELF reads before the swap ({seen['elf'][0]}: SONAMEs of the mapped libraries, DT_NEEDED)": seen["elf"][1],
        "output and exit": ended - seen["left"],
    }
    parts["other (recipe, cache key, lock, plan, renames)"] = total - sum(parts.values())
    beside = [c for c in seen["children"] if c.get("beside")]
    return {"total": total, "parts": parts,
            "beside": {f"beside the probe, in a thread, not added ({_programs(beside)})": sum(c["seconds"] for c in beside)}
            if beside else {}}


def _programs(children: list[dict]) -> str:
    """``git x2, bash x1``: the programs started, by name, in order of first start."""
    names: dict[str, int] = {}
    for c in children:
        names[c["program"]] = names.get(c["program"], 0) + 1
    return ", ".join(f"{n} x{k}" for n, k in names.items()) or "none"


def durable_write(work: Path, size_mib: int) -> float:
    """Seconds to write ``size_mib`` MiB to a new file and fsync it: the disk's floor for any
    procedure that puts a library's bytes on disk durably (rocmbuild must, before its commit; the
    manual ``cp`` leaves them in the page cache)."""
    block, path = os.urandom(1 << 20), work / "durable-write-floor"
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(size_mib):
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)
    seconds = time.perf_counter() - start
    path.unlink()
    return seconds


#: The order of the three procedures in run ``i`` is ``ORDERS[i % 3]``: each goes first, second and
#: third once in three runs, so whatever drifts in the machine during a run (the disk's write-back,
#: another job's load) does not always fall on the same one.
ORDERS = (("rocmbuild", "manual", "floor"), ("manual", "floor", "rocmbuild"), ("floor", "rocmbuild", "manual"))


def run(work: Path, size_mib: int, runs: int, label: str) -> bool:
    """Build the world in ``work``, print ``runs`` runs and the summary; True when the goal is met."""
    w = make_world(work, size_mib)
    # The untimed counted apply goes first, as a warm-up: the first library written after the
    # world's build is slow whoever writes it (an apply's copy 1.73 s there, then 0.49 and 0.41 s,
    # its source in the page cache all along), and run 1 starts with rocmbuild (ORDERS[0]).
    c = counted(w)
    rb: list[float] = []
    man: list[float] = []
    floors: list[float] = []
    imports: list[float] = []
    new: Path | None = None  # the cache's new library, which the manual procedure copies (run 1 starts with rocmbuild)
    for i in range(runs):
        order = ORDERS[i % len(ORDERS)]
        version = ""
        for what in order:
            if what == "rocmbuild":
                e = fresh_env(w, f"env-rb-{i}")
                t, res = rocmbuild_apply(w, e.prefix)
                shutil.rmtree(e.prefix)
                new = next((Path(res["artifact"]) / "tree").rglob(REAL))
                rb.append(t)
            elif what == "manual":
                assert new is not None, "ORDERS[0] starts with rocmbuild: its result names the cache's library"
                m = fresh_env(w, f"env-manual-{i}")
                mt, version = manual_apply(new, m.prefix / "lib", m.python)
                shutil.rmtree(m.prefix)
                man.append(mt)
            else:
                f = fresh_env(w, f"env-floor-{i}")
                written = durable_write(w.work, size_mib)
                imports.append(torch_import(f.python))
                shutil.rmtree(f.prefix)
                floors.append(written + imports[-1])
        print(f"whole apply run {i + 1} (order: {', '.join(order)}): rocmbuild {rb[-1]:6.2f} s   "
              f"manual {man[-1]:6.2f} s   floor {floors[-1]:6.2f} s   "
              f"(manual's torch.backends.cudnn.version() -> {version})", flush=True)
    fixed = costs(w)
    hows = sorted({x["how"] for x in c["copies"] if x["bytes"] >= size_mib << 20}) or ["(no large copy)"]
    r, m = statistics.median(rb), statistics.median(man)
    met = r <= GOAL * m
    print()
    print(f"summary: whole apply end to end, {label} ({size_mib} MiB library, median of {runs} runs, "
          f"the order of the three procedures rotated run by run; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    print(f"  the target's copy of the library was made by: {', '.join(hows)}; "
          f"bytes hashed by the apply: {c['hashed']}" + (f" ({', '.join(c['paths'][:3])})" if c["paths"] else ""))
    f = statistics.median(floors)
    print(f"  `rocmbuild apply` {r:.2f} s   manual (cp, cp, ln -sf x2, sync, import torch) {m:.2f} s   "
          f"floor (one fsync'd {size_mib} MiB write + one import torch) {f:.2f} s")
    print(f"  ratios: rocmbuild / manual {r / m:.2f} (goal <= {GOAL:.2f}: {'MET' if met else 'NOT MET'})   "
          f"rocmbuild / floor {r / f:.2f}x (goal <= {FLOOR_GOAL:.1f}x: {'MET' if r <= FLOOR_GOAL * f else 'NOT MET'})   "
          f"manual / floor {m / f:.2f}x   (import torch alone: {statistics.median(imports):.2f} s)")
    print(f"  fixed costs of one more apply (untimed run, {fixed['total']:.2f} s in all), one by one:")
    for what, seconds in (fixed["parts"] | fixed["beside"]).items():
        print(f"    {seconds:7.3f} s  {what}")
    return met
