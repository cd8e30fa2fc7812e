"""Run ``python -m rocmbuild ARGS`` and count the files it hashes (benchmarks only).

Every module that imported ``sha256_file`` gets a counting wrapper before the CLI starts; at exit
the count and the bytes hashed are written as JSON to ``$ROCMBUILD_BENCH_HASHES``.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys

import rocmbuild.disk
import rocmbuild.flows.apply  # noqa: F401 - imports every module that hashes
from rocmbuild.disk import sha256_file

seen = {"files": 0, "bytes": 0, "paths": []}


def counting(path, *a, **kw):
    seen["files"] += 1
    seen["bytes"] += os.path.getsize(path)
    seen["paths"].append(str(path))
    return sha256_file(path, *a, **kw)


for mod in list(sys.modules.values()):
    if getattr(mod, "sha256_file", None) is sha256_file:
        mod.sha256_file = counting


@atexit.register
def _report() -> None:
    with open(os.environ["ROCMBUILD_BENCH_HASHES"], "w") as f:
        json.dump(seen, f)


sys.argv = ["rocmbuild", *sys.argv[1:]]
runpy.run_module("rocmbuild", run_name="__main__", alter_sys=True)
