"""What the benchmark scripts share: the fixture worlds, the bench recipe, counted CLI runs.

Decision: the benchmarks take their world builders (the fixture monorepo, the cmake build of the
fixture library, the fake-torch target envs, the fixture recipe) from ``tests.support``, through
this module only. There is one fixture library and one way to build its world; a second copy
here would drift from what the tests prove. The same holds for the real OCI registry
(``registry``: Debian's docker-registry on 127.0.0.1, as the tests start it). ``tests.support`` is plain code without pytest, so a
benchmark needs nothing the tests' extras do not already install. No benchmark imports
``tests.*`` itself: a change in the tests' layout is absorbed here.

The PATH shims and :func:`run_counted` measure a real ``python -m rocmbuild`` process and count
every cmake, compiler, make and ninja it starts (the "zero compiler processes" targets).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support import registry
from tests.support.rocm7root import Mounts, chroot_argv
from tests.support.envs import make_env
from tests.support.monorepo import make_monorepo
from tests.support.project import build_library
from tests.support.recipes import fixture_recipe, write_fixture_recipe
from tests.support.snapshots import listing, snapshot

__all__ = ["ROOT", "TOOLS", "COMPILERS", "bench_recipe", "build_library", "fixture_recipe", "listing",
           "make_env", "make_monorepo", "make_shims", "registry", "rocm7_argv", "rocm7_mounts", "run_counted",
           "snapshot", "write_fixture_recipe"]

ROOT = Path(__file__).resolve().parents[1]

TOOLS = ("cmake", "cc", "c++", "gcc", "g++", "make", "ninja")
COMPILERS = ("cc", "c++", "gcc", "g++")


def bench_recipe(url: str, sources: int, ref: str = "develop") -> str:
    """The fixture recipe named ``bench``: Ninja, ``sources`` generated C files, no data dir."""
    return fixture_recipe(name="bench", url=url, ref=ref, generator="Ninja",
                          defines={"MIOPEN_FIXTURE_EXTRA_SOURCES": sources}, data=None)


def make_shims(shim_dir: Path, log: Path) -> None:
    """One shim per tool in :data:`TOOLS` that appends its name to ``log`` and execs the real tool."""
    shim_dir.mkdir(parents=True)
    for tool in TOOLS:
        real = shutil.which(tool)
        if real is None:
            continue
        shim = shim_dir / tool
        shim.write_text(f'#!/bin/sh\necho {tool} >> "{log}"\nexec "{real}" "$@"\n')
        shim.chmod(0o755)


def run_counted(args: list[str], env: dict[str, str], log: Path) -> tuple[float, dict, dict[str, int]]:
    """``python -m rocmbuild ARGS --json`` in a fresh process: (seconds, its JSON, tool counts)."""
    log.write_text("")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rocmbuild", *args, "--json"],
                          env=env, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"rocmbuild {args[0]} failed ({done.returncode}):\n{done.stderr}\n{done.stdout}")
    counts = {t: 0 for t in TOOLS}
    for line in log.read_text().split():
        counts[line] += 1
    return seconds, json.loads(done.stdout), counts


def rocm7_argv(root: Path, argv: list[str], env: dict[str, str]) -> list[str]:
    """``argv`` run inside a ROCm root (chroot, a fixed environment plus ``env``), as the tests do."""
    return chroot_argv(root, argv, env)


@contextlib.contextmanager
def rocm7_mounts(root: Path):
    """/proc and a private /dev inside ``root`` while the block runs, unless the root has them
    already (a shared root: its mounts are left as they are); only what was mounted here is
    unmounted."""
    mounts = Mounts(root)
    try:
        if not (root / "proc" / "self").exists() or not (root / "dev" / "null").exists():
            mounts.system()
        yield
    finally:
        mounts.close()
