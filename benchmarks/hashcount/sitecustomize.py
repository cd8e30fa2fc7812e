"""Count the files a rocmbuild process hashes (benchmarks only: put this directory first on
PYTHONPATH and set ROCMBUILD_BENCH_HASHES to a file). Every Python process that imports it and
can import rocmbuild replaces ``rocmbuild.disk.sha256_file`` before any module takes the name,
and appends one JSON line ``{"pid", "files", "bytes", "paths"}`` to that file at exit.
"""

import atexit
import json
import os

if os.environ.get("ROCMBUILD_BENCH_HASHES"):
    try:
        import rocmbuild.disk as _disk
    except Exception:  # noqa: BLE001 - another Python (the target's): nothing to count
        _disk = None
    if _disk is not None:
        _orig = _disk.sha256_file
        _seen = {"pid": os.getpid(), "files": 0, "bytes": 0, "paths": []}

        def _counting(path, *a, **kw):
            _seen["files"] += 1
            _seen["bytes"] += os.path.getsize(path)
            _seen["paths"].append(str(path))
            return _orig(path, *a, **kw)

        _disk.sha256_file = _counting

        @atexit.register
        def _report():
            with open(os.environ["ROCMBUILD_BENCH_HASHES"], "a") as f:
                f.write(json.dumps(_seen) + "\n")
