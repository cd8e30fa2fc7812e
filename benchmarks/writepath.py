"""The write path, walked: ``python -m benchmarks.writepath`` runs one real apply (the tests'
fixture world, a 1 MiB library) with benchmarks/writepath/ on PYTHONPATH and prints the two call
chains from ``flows/apply.py:apply`` that move the library's bytes: to the kernel copy that stages the
new library in the target (``stage``) and to the ``os.replace`` that puts it in place (``swap``).

Figures (issue 25, "a write path a newcomer follows in minutes"):
* **frames**: rocmbuild calls on the stack from ``apply`` down to the copy / the rename;
* **files entered**: the distinct modules of both chains together;
* **hops back up**: frames whose module was already on the stack above, not just the frame before
  (the path leaves a module and comes back into it: protocol -> journal -> protocol).
Not a timed benchmark: the chain is the same on any machine.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks._common import ROOT
from benchmarks._whole_apply import REAL, fresh_env, make_world, rocmbuild_apply


def walk(frames: list[list]) -> dict:
    start = next((i for i, f in enumerate(frames) if f[0] == "flows/apply.py" and f[1] == "apply"), 0)
    chain = frames[start:]
    files: list[str] = []
    hops = 0
    for i, (file, _fn, _line) in enumerate(chain):
        if i and file != chain[i - 1][0] and file in files:
            hops += 1
        if file not in files:
            files.append(file)
    return {"chain": chain, "frames": len(chain), "files": files, "hops_back_up": hops}


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="rb-writepath-"))
    try:
        w = make_world(work / "world", 1)
        e = fresh_env(w, "env-walk")
        out = work / "walk.json"
        path = os.pathsep.join([str(ROOT / "benchmarks" / "writepath"), str(ROOT)])
        rocmbuild_apply(w, e.prefix, dict(w.env, ROCMBUILD_BENCH_WALK=str(out), ROCMBUILD_BENCH_WALK_NAME=REAL,
                                          PYTHONPATH=path))
        seen = json.loads(out.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    files: list[str] = []
    for what in ("stage", "swap"):
        if what not in seen:
            sys.exit(f"no {what} was seen: the hook did not fire")
        res = walk(seen[what])
        print(f"{what}: apply -> {'the copy of the library into the target' if what == 'stage' else 'os.replace'}")
        for file, fn, line in res["chain"]:
            print(f"  {file}:{line} {fn}")
        print(f"  frames: {res['frames']}   files: {len(res['files'])}   hops back up: {res['hops_back_up']}")
        files += [f for f in res["files"] if f not in files]
    print(f"both: files entered {len(files)}: {' '.join(files)}")


if __name__ == "__main__":
    main()
