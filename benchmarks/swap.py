#!/usr/bin/env python3
"""Benchmark: installing a 1 GiB library -- rocmbuild's transaction vs the manual procedure.

    python benchmarks/swap.py [--size-mib 1024] [--runs 5] [--dir DIR] [--no-reflink] [--no-whole]
                              [--workdir-figures]

Two figures, each on a loop-mounted ext4 and (unless ``--no-reflink``) a loop-mounted reflink
filesystem (XFS ``reflink=1``, else btrfs), both BURNED IN (below): (a) the install phase alone,
in-process (below); (b) the WHOLE apply end to end as a user runs it -- a real ``python -m
rocmbuild apply RECIPE --env ENV`` of a cached artifact, probes included, vs the manual procedure
made durable (cp, cp, ln -sf x2, ``sync``, ``import torch``) and vs the floor (one fsync'd write of
the library plus one ``import torch``), the three in an order rotated run by run, with the apply's
fixed costs printed one by one -- goals "the whole apply <= 60% of the manual procedure and <=
1.1x the floor", judged on the ext4 figure (benchmarks/_whole_apply.py; ``--no-whole`` skips it).
Each figure says how the target's copy was made (``disk.copy_fd``: reflink, copy_file_range or
copy). ``--workdir-figures`` adds both figures on the work dir's own filesystem, not burned in.

Like with like (decisions):

* This VM's disk writes a block its filesystem has never written several times slower than one it
  has (1 GiB fsync'd: 2.9-3.6 s onto fresh blocks, 0.6 s onto just-freed ones, measured here), so
  on the work dir's filesystem the three procedures met different kinds of blocks and the ratio
  measured the VM. A backing file fully written before ``mkfs`` did not help (inside the loop
  mount 1 GiB still took 3.2-3.5 s on blocks the inner filesystem had not written): what does is
  writing every free block *through* the mounted filesystem once, fsynced, then deleting it
  (``benchmarks/_loopfs.py``). Every block any procedure meets has then been written once.
* The image is allocated whole (``posix_fallocate``), ``mkfs`` does not discard it (``-E
  nodiscard`` / ``-K``; ext4 also without lazy inode-table init, which would write in the
  background during the runs), and the loop device does direct I/O (``losetup
  --direct-io=on``), as a disk does: buffered, it caches each byte twice and an fsync inside
  waits on the outer filesystem's write-back (1 GiB: 2.1-4.1 s buffered, 0.76-0.95 s direct).
* The order of the three procedures is rotated run by run (printed with each run), so a drift in
  the machine during a run does not always fall on the same one; each procedure gets a fresh
  env synced to disk before its clock starts.
* The manual procedure's ``sync`` flushes every dirty page of the machine, other jobs' included:
  on a loaded machine it is slower than on a quiet one (the load average is printed).

What the install phase figure measures (median of ``--runs``), on one filesystem (``--dir``, default a temp dir):

* **rocmbuild**: the install phase of a real :func:`rocmbuild.swap.protocol.execute` -- plan
  (``lstat`` only), journal, stage (the target's *own* copy of the artifact file, never a hardlink
  into the cache: a reflink where the filesystem can, else ``copy_file_range(2)`` kernel-side --
  not hashed again while the cache file's sealed identity holds; only an untrusted source is
  streamed through sha256), backup (hardlink of the original), swap (``rename``), commit and
  history -- with a no-op verification (the probe's cost does not depend on the library size).
  On ext4 the install phase is therefore one kernel-side copy where it used to be a hardlink: the
  figure says so, and the "< 5% of manual" target applies to the reflink figure.
* **reflink**: the same, on a loop-mounted XFS image made with ``mkfs.xfs -m reflink=1`` (or
  btrfs) inside the work dir, when the tools exist and the machine allows loop mounts (root);
  otherwise the output says why there is no reflink figure. ``--no-reflink`` skips it.
* **manual**: what users do by hand (DESIGN.md): ``cp`` the library to a ``.backup_system`` file,
  ``cp`` the new one over it, ``ln -sf`` the two links -- real ``cp``/``ln`` processes started
  through :mod:`rocmbuild.proc.runner` (argv lists). Note: the manual ``cp`` does not fsync, rocmbuild
  does (journal and directories), which only favours the manual figure.
* **extra bytes**: ``statvfs`` used space before and after each install phase (rocmbuild's copy
  shows here on ext4; a reflink shares the extents and adds next to nothing); backups are
  hardlinks of the originals and add +0 bytes everywhere.
* **SIGBUS**: a process that has the library loaded (``dlopen``) and mapped as a whole (``mmap``,
  as a 1 GiB libMIOpen's code and data are), reading every page in a loop, is started; the manual
  ``cp`` over the file truncates the inode it has mapped (it dies with SIGBUS), rocmbuild's
  swap leaves that inode alone (it keeps running).

Measured here on 2026-12-06 19:00 UTC on the final code, ``python3 -m benchmarks.swap --size-mib
1024 --runs 5``, the machine quiet (load average 0.37 at the start, about 1 during: the benchmark
itself), medians of 5, the manual procedure's commands started as a shell starts them:

* ext4 (loop, burned in, direct I/O): whole apply 1.27 s (runs 1.18-1.39), manual made durable
  1.50 s (1.36-1.54), floor 0.77 s (0.46-0.81; import torch 0.03 s): 0.85 of manual (goal 0.60:
  NOT MET), 1.65x the floor (goal 1.1x: NOT MET). Fixed costs of one more apply (untimed):
  start-up 0.22 s, 2 probes 0.14 s, journal (9 saves) 0.03 s, other fsyncs (15) 0.02 s, the
  library's copy 0.92 s, other processes (bash x1, git x2, each under its supervisor) 0.09 s, ELF
  reads before the swap (13) 0.05 s, output 0.03 s, the rest 0.03 s. On this disk one
  procedure's figure spreads by a third from run to run, so each ratio is good to about +-0.15.
* Until 18:55 the manual commands ran under rocmbuild's supervisor (about 27 ms each a shell does
  not pay); the figures of 18:18 (``--runs 3``) were 1.46 / 2.12 / 0.55 s on ext4 (0.69, 2.64x),
  under load (18:08) 1.80 / 1.98 / 0.58 s. A 3 s idle disk before each procedure's clock made
  all three slower and more spread (tried at 18:53: not done).
* XFS reflink=1 (loop, burned in): whole apply 0.61 s for 1 GiB, manual 0.05 s (cp reflinks too),
  floor 0.81 s (its write varied 0.3-3.2 s): 0.76x the floor (met), 11.7x manual; fixed costs
  start-up 0.22 s, 2 probes 0.14 s, other processes 0.08 s, ELF reads 0.05 s, copy 0 s.
* Install phase alone (in-process): ext4 467 ms vs manual 1034 ms (45%, copy_file_range); XFS
  29 ms vs 125 ms (23%, a reflink; cp reflinks too).
* The copy itself is at the floor: on the same kind of burned-in loop ext4, 1 GiB took 0.56 s
  with ``kcopy.copy_file_range`` + fsync, 0.62 s written + fsync, 0.72 s with a one-thread
  ``copy_file_range`` + fsync (medians of 8, interleaved). The first library written after the
  world's build is slow whoever writes it (1.73 s, then 0.49 and 0.41 s): the untimed counted
  apply runs first as a warm-up.
* Why 1.1x the floor cannot be met here (the arithmetic): the floor is W + T (W one fsync'd write
  of the library, T one ``import torch``); an apply is at least W + 2P + S (the target's copy,
  the probe before and the one after, P >= T each, S its own interpreter). Even at P = T and S =
  one bare interpreter (0.015 s), (0.50 + 0.10 + 0.015) / 0.55 = 1.12x; with the probes as they
  are (0.08 s each) 1.23x, before any of rocmbuild's own work. 1.1x needs T + S <= 0.1 (W + T),
  i.e. W >= 9T + 10S: a disk slower than this one (1 GiB in >= 0.6 s with the tests' fake torch),
  and with a real torch (T of seconds) a library of tens of GiB.
* The 60% goal: W + 2P + S + R <= 0.6 (2W + T + c) (c: the manual's process starts and what its
  ``sync`` flushes beyond its own bytes), i.e. rocmbuild's fixed costs 2P + S + R <= 0.2 W + 0.6 T
  + 0.6 c. With the figures of 19:00 (manual 1.50 s, so c is about 0.45 s) that is a whole apply
  of at most 0.90 s, about 0.40 s beside the copy, where start-up and the two probes alone take
  0.36 s; the next cuts measured (a lighter supervisor, ``git --version``, the activation's bash,
  the parser, the build machinery's imports) add up to about 0.2 s.
* Before (the work dir's ext4, not burned in, quiet): whole apply 4.22 s, manual 3.53 s, floor
  0.79 s (1.20 and 5.32x): the copy met fresh blocks (3.1 s of it).
* Later (21:11 and 21:39, after the cuts of docs/testing.md: supervisors started ahead, the exit
  without teardown, SONAMEs read lazily) the disk decided every figure: one fsync'd 1 GiB write
  took 0.5 s in one run and 3-5 s in the next, floor included (0.52-5.09 s), so those medians say
  nothing. The cuts are measured on a 1 MiB library instead: whole apply 0.653 -> 0.513 s,
  fixed costs 0.67 -> 0.54 s (docs/testing.md).

The library files are the real fixture libMIOpen (an ELF that dlopen loads) followed by real,
non-sparse data (a random 1 MiB block repeated) up to the size; the old and the new file differ in
size by 64 KiB, as two builds do (with equal sizes the "already applied" check would hash the old
file to rule out identical content -- a fallback documented in rocmbuild.swap.plan).
If the filesystem lacks room (about 5x the size is needed at the peak) a smaller size is used and
the output says so.
"""

from __future__ import annotations

import argparse
import functools
import ctypes  # noqa: F401  (the child uses it; imported here to fail early if missing)
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _whole_apply  # noqa: E402
from benchmarks._loopfs import ext4_fs, reflink_fs  # noqa: E402
from benchmarks._common import build_library  # noqa: E402
from rocmbuild.fs import disk, root  # noqa: E402
from rocmbuild.proc import runner  # noqa: E402
from rocmbuild import ui  # noqa: E402
from rocmbuild.store import artifact  # noqa: E402
from rocmbuild.store.artifact import Artifact, Manifest  # noqa: E402
from rocmbuild.swap import journal, plan, protocol  # noqa: E402

MiB = 1 << 20
REAL = "libMIOpen.so.1.0"
FIXTURES = Path(tempfile.gettempdir())  # replaced by main() with a dir inside its work dir
COPIES: list[str] = []  # what disk.copy_fd returned for each copy the install phases made


def _recording_copy_fd(*args, **kwargs) -> str:
    how = disk.copy_fd(*args, **kwargs)
    COPIES.append(how)
    return how


root.copy_fd = _recording_copy_fd  # Root.copy_in's copy (the benchmark's process only): says which path ran


@functools.lru_cache(maxsize=None)
def fixture_lib(work: Path, version: str) -> Path:
    """Build the fixture libMIOpen (real cmake) once per run; returns the staged lib dir."""
    return build_library(version, work / f"fixture-{version}")


def write_library(dst: Path, elf: Path, size: int, block: bytes) -> None:
    with open(dst, "wb") as f:
        head = elf.read_bytes()
        f.write(head)
        left = size - len(head)
        while left > 0:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
        f.flush()
        os.fsync(f.fileno())
    os.chmod(dst, 0o755)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def used_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def make_artifact(root: Path, new_file: Path) -> Artifact:
    tree = root / "tree" / "lib"
    tree.mkdir(parents=True)
    os.replace(new_file, tree / REAL)  # moved, not linked: a later unlink would move the ctime seal records
    os.symlink(REAL, tree / "libMIOpen.so.1")
    os.symlink("libMIOpen.so.1", tree / "libMIOpen.so")
    files = artifact.scan_tree(root / "tree")  # hashes once: build time, not install time
    libs = artifact.find_libraries(root / "tree", files, ["libMIOpen"])
    m = Manifest(recipe="bench", key="bench", version="3.5.1", expect_version="3.5.1", encoding="miopen",
                 smoke=None, commit=None, ref=None, url="", install_prefix="/usr/local", files=files,
                 libraries=libs)
    artifact.seal(root, files)  # read-only, identities recorded, as a published build is
    disk.atomic_write_json(root / "manifest.json", m.to_json())
    return Artifact(root, m)


def make_target(prefix: Path, old_file: Path) -> Path:
    lib = prefix / "lib"
    lib.mkdir(parents=True)
    shutil.copyfile(old_file, lib / REAL)  # a real copy: the manual cp writes into it
    os.chmod(lib / REAL, 0o755)
    os.symlink(REAL, lib / "libMIOpen.so.1")
    os.symlink("libMIOpen.so.1", lib / "libMIOpen.so")
    os.sync()
    return lib


def facts(prefix: Path) -> plan.TargetFacts:
    lib = prefix / "lib" / REAL
    return plan.TargetFacts(str(prefix), sys.executable, (("libMIOpen", (plan.LoadedFact(str(lib), "conda", True),)),),
                            "3.5.0")


def rocmbuild_install(art: Artifact, prefix: Path) -> None:
    p = plan.make(art, facts(prefix))
    protocol.execute(p, verify=None, keep=5)


def backup_copied_bytes(prefix: Path) -> int:
    """Bytes the backups added: files in backups/ that are copies (not the original's inode)."""
    sdir = prefix / ".rocmbuild"
    (j,) = journal.journals(sdir)
    total = 0
    for a, _step in j.changes:
        if a.before.kind != "file":
            continue
        for b in (sdir / "backups" / j.id).iterdir():
            st = b.stat()
            if st.st_ino != a.before.inode and b.name.endswith(Path(a.path).name):
                total += st.st_blocks * 512
    return total


def manual_install(art: Artifact, lib: Path) -> None:
    new = art.file(f"lib/{REAL}")
    runner.run(["cp", lib / REAL, lib / f"{REAL}.backup_system"])
    runner.run(["cp", new, lib / REAL])
    runner.run(["ln", "-sf", REAL, lib / "libMIOpen.so.1"])
    runner.run(["ln", "-sf", "libMIOpen.so.1", lib / "libMIOpen.so"])


def measure(fn, where: Path) -> tuple[float, int]:
    os.sync()
    u0 = used_bytes(where)
    t = time.perf_counter()
    fn()
    dt = time.perf_counter() - t
    os.sync()
    return dt, used_bytes(where) - u0


MAPPER = textwrap.dedent("""
    import ctypes, mmap, os, sys
    path = sys.argv[1]
    lib = ctypes.CDLL(path)
    M, m, p = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    size = len(mm)
    print("ready", flush=True)
    total = 0
    while True:
        lib.miopenGetVersion(ctypes.byref(M), ctypes.byref(m), ctypes.byref(p))
        for off in range(0, size, 4096):
            total += mm[off]
""")


def sigbus_demo(art: Artifact, old_file: Path, work: Path) -> dict[str, str]:
    out = {}
    for how in ("manual", "rocmbuild"):
        prefix = work / f"demo-{how}"
        lib = make_target(prefix, old_file)
        child = subprocess.Popen([sys.executable, "-c", MAPPER, str(lib / "libMIOpen.so.1")],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            time.sleep(0.5)
            if how == "manual":
                manual_install(art, lib)
            else:
                rocmbuild_install(art, prefix)
            deadline = time.time() + 3
            while time.time() < deadline and child.poll() is None:
                time.sleep(0.1)
            rc = child.poll()
            if rc is None:
                out[how] = "still running (its mapped inode was never written)"
            elif rc < 0:
                out[how] = f"KILLED by {signal.Signals(-rc).name}"
            else:
                out[how] = f"exited with {rc}"
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()
            shutil.rmtree(prefix, ignore_errors=True)
    return out


def pick_size(base: Path, size_mib: int, workdir: bool) -> tuple[int, int]:
    """The library size to use (smaller when the filesystem lacks room) and the free bytes: room
    for one loop image (:func:`image_size`; the ext4 one is removed before the reflink one is
    made), plus about 5x the size when the work dir's own figures run too."""
    size = size_mib * MiB
    free = free_bytes(base)
    per_mib = 15 if workdir else 10  # bytes needed per byte of library, beside image_size's constant
    if free < per_mib * size + 3584 * MiB:
        new = max(16 * MiB, (free - 3584 * MiB) // per_mib // MiB * MiB)
        print(f"note: only {free // MiB} MiB free in {base}: using {new // MiB} MiB instead of "
              f"{size // MiB} MiB (the ratios still hold: rocmbuild's cost does not depend on the size)")
        size = new
    return size, free


def prepare(base: Path, size: int) -> tuple[Artifact, Path]:
    """The old library (a file) and the new one (in an artifact), both ``size``-ish bytes."""
    print("building the fixture libMIOpen 3.5.0 and 3.5.1 (real cmake) ...", flush=True)
    base.mkdir(parents=True, exist_ok=True)
    old_elf = fixture_lib(FIXTURES, "3.5.0") / REAL
    new_elf = fixture_lib(FIXTURES, "3.5.1") / REAL
    block = os.urandom(MiB)
    old_file = base / "old.so"
    new_file = base / "new.so"
    write_library(old_file, old_elf, size, block)
    write_library(new_file, new_elf, size + 64 * 1024, block[::-1])
    art = make_artifact(base / "artifact", new_file)  # the artifact holds it now
    return art, old_file


def run_once(i: int, art: Artifact, old_file: Path, base: Path) -> tuple[float, int, int, float, int]:
    """One rocmbuild install and one manual install: (rb time, rb bytes, backup bytes, manual time, manual bytes)."""
    prefix = base / f"rb-{i}"
    make_target(prefix, old_file)
    rb_t, rb_b = measure(lambda: rocmbuild_install(art, prefix), base)
    bk = backup_copied_bytes(prefix)
    shutil.rmtree(prefix)

    mprefix = base / f"manual-{i}"
    lib = make_target(mprefix, old_file)
    man_t, man_b = measure(lambda: manual_install(art, lib), base)
    shutil.rmtree(mprefix)
    print(f"run {i + 1}: rocmbuild {rb_t * 1000:8.1f} ms, {rb_b:>12} extra bytes "
          f"(backups added {bk}: hardlinks of the originals); "
          f"manual {man_t * 1000:8.1f} ms, {man_b:>12} extra bytes", flush=True)
    return rb_t, rb_b, bk, man_t, man_b


def summary(size: int, runs: list[tuple[float, int, int, float, int]], label: str, reflink: bool) -> None:
    rb_t, rb_b, bks, man_t, man_b = zip(*runs, strict=True)
    bk_total = bks[-1]
    rt, mt = statistics.median(rb_t), statistics.median(man_t)
    rbb, mbb = statistics.median(rb_b), statistics.median(man_b)
    print()
    print(f"summary: {label} ({size // MiB} MiB library, median of {len(runs)} runs, one filesystem)")
    made = ", ".join(sorted(set(COPIES))) or "no copy"
    how = (f"made by {made}: " + ("a reflink (no byte read or copied)" if made == "reflink" else
                                  "one kernel-side copy, not hashed (the sealed identity holds)"
                                  if made == "copy_file_range" else "one copy streamed through sha256"))
    manual_reflinks = mbb < size // 2  # coreutils >= 9: cp reflinks by default where it can
    if not reflink:
        verdict = "no 5% target without reflinks: the target gets its own copy, never the cache's inode"
    elif manual_reflinks:
        verdict = "cp reflinks here too: both place shared extents; rocmbuild adds its journal and fsyncs"
    else:
        verdict = f"target < 5%  -> {'PASS' if rt < 0.05 * mt else 'FAIL'}"
    print(f"  install phase:        {how}")
    print(f"  install phase time:   rocmbuild {rt * 1000:.1f} ms   manual {mt * 1000:.1f} ms   "
          f"ratio {rt / mt * 100:.2f}% of manual ({verdict})")
    print(f"  extra bytes on disk:  rocmbuild {int(rbb)}   manual {int(mbb)}   "
          + ("(journal/history/lock blocks: the reflink shares the extents)" if reflink
             else "(rocmbuild: its own copy of the new library; manual: its .backup_system copy, the new bytes "
                  "overwrite the loaded inode in place)"))
    manual_bk = "a reflink (cp shares the extents)" if manual_reflinks else f"{size} (a full copy)"
    print(f"  extra bytes for backups: rocmbuild {bk_total} (hardlinks of the original inode)   "
          f"manual {manual_bk}  -> {'PASS' if bk_total == 0 else 'FAIL'}")


def bench(where: Path, size: int, n: int, label: str) -> None:
    """Prepare the libraries in ``where`` and print ``n`` runs and their summary."""
    art, old_file = prepare(where, size)
    reflink = disk.reflink_supported(where)
    COPIES.clear()
    summary(size, [run_once(i, art, old_file, where) for i in range(n)], label, reflink)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="where to work (one filesystem); default: a temp dir")
    ap.add_argument("--no-reflink", action="store_true", help="skip the loop-mounted reflink filesystem figure")
    ap.add_argument("--no-whole", action="store_true", help="skip the whole-apply (end to end) figure")
    ap.add_argument("--workdir-figures", action="store_true",
                    help="also measure both figures on the work dir's own filesystem (not burned in)")
    args = ap.parse_args()
    ui.set_quiet(True)

    base = Path(tempfile.mkdtemp(prefix="rocmbuild-swap-bench-", dir=args.dir))
    os.environ["ROCMBUILD_HOME"] = str(base / "home")
    try:
        size, free = pick_size(base, args.size_mib, args.workdir_figures)
        print(f"working in {base} ({free // MiB} MiB free); library size {size // MiB} MiB; {args.runs} runs; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min)")
        global FIXTURES
        FIXTURES = base / "fixtures"
        fs = runner.capture(["findmnt", "-n", "-o", "FSTYPE", "--target", base]).stdout.strip()
        label = f"{fs or 'this filesystem'}, reflinks " + ("available" if disk.reflink_supported(base) else "not available")
        if args.workdir_figures:
            label += " (the work dir's own filesystem, NOT burned in: the procedures may meet blocks of different kinds)"
            bench(base / "plain", size, args.runs, label)
            if not args.no_whole:
                _whole_apply.run(base / "whole", size // MiB, args.runs, label)
        def figures(mnt: Path, label: str) -> None:  # the install phase, then the whole apply
            bench(mnt / "work", size, args.runs, label)
            shutil.rmtree(mnt / "work")
            if not args.no_whole:
                _whole_apply.run(mnt / "whole", size // MiB, args.runs, label)

        with ext4_fs(base, size) as (mnt, why):
            if mnt is None:
                print(f"\nno burned-in ext4 figure: {why}" + ("" if args.workdir_figures else
                      "; use --workdir-figures for the work dir's filesystem (not burned in)"))
            else:
                figures(mnt, "a loop-mounted ext4 (burned in), reflinks not available")
        if not args.no_reflink:
            with reflink_fs(base, size) as (mnt, why):
                if mnt is None:
                    print(f"\nno reflink figure: {why}")
                else:
                    figures(mnt, "a loop-mounted reflink filesystem (burned in)")
        print("\nSIGBUS demonstration (a process with the library dlopen'ed and mmapped, reading every page):",
              flush=True)
        art, old_file = prepare(base / "demo", min(size, 64 * MiB))
        demo = sigbus_demo(art, old_file, base / "demo")
        print(f"  process using the old library during manual cp:     {demo['manual']}")
        print(f"  process using the old library during rocmbuild swap: {demo['rocmbuild']}")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
