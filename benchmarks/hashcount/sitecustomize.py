"""Count the files a rocmbuild process hashes and the copies it makes (benchmarks only: put this
directory first on PYTHONPATH and set ROCMBUILD_BENCH_HASHES to a file). Every Python process
that imports it and can import rocmbuild replaces ``rocmbuild.fs.disk.sha256_file``,
``rocmbuild.fs.disk.sha256_fd`` and ``rocmbuild.fs.disk.copy_fd`` before any module takes the names,
and appends one JSON line ``{"pid", "files", "bytes", "paths", "fds", "fd_bytes", "copies"}`` to
that file at exit: ``fds``/``fd_bytes`` count the open files hashed by ``sha256_fd``, ``copies``
lists what each ``copy_fd`` returned (``"reflink"``, ``"copy_file_range"`` or ``"copy"``, the
last one streamed through sha256) with the bytes copied.
"""

import atexit
import json
import os

if os.environ.get("ROCMBUILD_BENCH_HASHES"):
    try:
        import rocmbuild.fs.disk as _disk
    except Exception:  # noqa: BLE001 - another Python (the target's): nothing to count
        _disk = None
    if _disk is not None:
        _orig = _disk.sha256_file
        _orig_fd = _disk.sha256_fd
        _orig_copy = _disk.copy_fd
        _seen = {"pid": os.getpid(), "files": 0, "bytes": 0, "paths": [], "fds": 0, "fd_bytes": 0, "copies": []}

        def _counting(path, *a, **kw):
            _seen["files"] += 1
            _seen["bytes"] += os.path.getsize(path)
            _seen["paths"].append(str(path))
            return _orig(path, *a, **kw)

        def _counting_fd(fd, *a, **kw):
            _seen["fds"] += 1
            _seen["fd_bytes"] += os.fstat(fd).st_size
            return _orig_fd(fd, *a, **kw)

        def _recording_copy(src_fd, *a, **kw):
            how = _orig_copy(src_fd, *a, **kw)
            _seen["copies"].append({"how": how, "bytes": os.fstat(src_fd).st_size})
            return how

        _disk.sha256_file = _counting
        _disk.sha256_fd = _counting_fd
        _disk.copy_fd = _recording_copy

        @atexit.register
        def _report():
            with open(os.environ["ROCMBUILD_BENCH_HASHES"], "a") as f:
                f.write(json.dumps(_seen) + "\n")
