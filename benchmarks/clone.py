"""Benchmark: rocmbuild's sparse + partial + shallow fetch vs a plain ``git clone``.

Builds a synthetic monorepo laid out like ROCm/rocm-libraries where projects/miopen is a few KB
and the other projects hold large incompressible blobs (and have history that rewrote them), then
measures bytes on disk (like ``du``: allocated blocks of the clone dir including ``.git``) and wall
time of

  (a) ``rocmbuild.sources.source.fetch`` of ``develop`` with ``subdir = "projects/miopen"``, and
  (b) ``git.Repo.clone_from`` of the same ``file://`` URL (what a user does by hand).

Target: (a) takes at most 10% of (b)'s bytes. Run from the repository root:

    python benchmarks/clone.py [--big-mb 20] [--history 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import fixture_recipe, make_monorepo  # noqa: E402

TARGET_RATIO = 0.10


def du(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (hardlinked files counted once), like ``du -s``."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            total += st.st_blocks * 512
    return total


def mib(n: int) -> str:
    return f"{n / 1024 / 1024:9.2f} MiB"


def build_upstream(work: Path, big_mb: int, history: int):
    import git

    mono = make_monorepo(work / "upstream" / "rocm-libraries", big_mb=big_mb)
    repo = git.Repo(mono.path)
    for i in range(history):  # history that rewrote the big projects: a full clone carries it all
        for name in ("rocblas", "hipblaslt"):
            (mono.path / "projects" / name / "blob.bin").write_bytes(os.urandom(big_mb * 1024 * 1024))
        repo.git.add("-A")
        repo.git.commit("-q", "-m", f"other projects, revision {i + 2}")
    miopen = du(mono.path / "projects" / "miopen")
    tree = sum(du(p) for p in mono.path.iterdir() if p.name != ".git")
    return mono, miopen, tree


def run(big_mb: int, history: int) -> dict:
    import git

    from rocmbuild import ui
    from rocmbuild.sources import source
    from rocmbuild import recipe

    ui.set_quiet(True)
    with tempfile.TemporaryDirectory(prefix="rocmbuild-bench-") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        mono, miopen_bytes, tree_bytes = build_upstream(work, big_mb, history)
        setup = time.monotonic() - t0

        text = fixture_recipe(name="bench", url=mono.url, libraries=None, verify=None)
        rpath = work / "bench.toml"
        rpath.write_text(text)
        r = recipe.parse(text, rpath)

        home = work / "home"
        t0 = time.monotonic()
        co = source.fetch(r, home=home)
        ours_s = time.monotonic() - t0
        ours = du(co.root)

        t1 = time.monotonic()
        co2 = source.fetch(r, home=home)
        again_s = time.monotonic() - t1
        assert co2.commit == co.commit

        full_dir = work / "full"
        t0 = time.monotonic()
        git.Repo.clone_from(mono.url, full_dir)
        full_s = time.monotonic() - t0
        full = du(full_dir)

    return {
        "setup_s": setup, "miopen_bytes": miopen_bytes, "tree_bytes": tree_bytes, "commit": co.commit,
        "version": co.version, "ours_bytes": ours, "ours_s": ours_s, "again_s": again_s,
        "full_bytes": full, "full_s": full_s,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big-mb", type=int, default=20, help="MiB per large other project (2 of them)")
    ap.add_argument("--history", type=int, default=2, help="extra commits rewriting the large projects")
    args = ap.parse_args(argv)
    res = run(args.big_mb, args.history)
    ratio = res["ours_bytes"] / res["full_bytes"]
    share = res["miopen_bytes"] / res["tree_bytes"]
    print(f"synthetic monorepo: projects/miopen is {res['miopen_bytes'] / 1024:.0f} KiB of a "
          f"{res['tree_bytes'] / 1024 / 1024:.1f} MiB tree ({share:.2%}), {args.history + 2} commits of "
          f"develop history; built in {res['setup_s']:.1f} s")
    print(f"checked out {res['commit'][:12]} (version {res['version']})")
    print()
    print(f"{'method':<44} {'on disk':>13} {'wall time':>10}")
    print(f"{'rocmbuild source.fetch (sparse+partial+shallow)':<44} {mib(res['ours_bytes'])} {res['ours_s']:9.2f}s")
    print(f"{'  same fetch again (cache reused)':<44} {'':>13} {res['again_s']:9.2f}s")
    print(f"{'git clone (full)':<44} {mib(res['full_bytes'])} {res['full_s']:9.2f}s")
    print()
    print(f"ratio (ours / full clone): {ratio:.2%} of the bytes, {res['ours_s'] / res['full_s']:.2f}x the time")
    met = ratio <= TARGET_RATIO
    print(f"target: at most {TARGET_RATIO:.0%} of the full clone's bytes -> {'MET' if met else 'NOT MET'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
