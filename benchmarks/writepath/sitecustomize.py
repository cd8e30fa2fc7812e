"""Record the call stack at the rename that puts the new library in place (benchmarks only: put this
directory first on PYTHONPATH and set ROCMBUILD_BENCH_WALK to a file; benchmarks/writepath.py does).

Two moments are recorded, each as the rocmbuild frames of its stack, outermost first, as
``[file, function, line]`` (file relative to the package), in one JSON object written at exit:
``stage``: the first kernel copy (``os.copy_file_range``, ``os.sendfile``) or reflink ioctl, the new
library's bytes reaching the target; ``swap``: the first ``os.replace``/``os.rename`` whose
destination's name is the library's real file (``ROCMBUILD_BENCH_WALK_NAME``, default
``libMIOpen.so.1.0``).
Nothing of rocmbuild is imported here.
"""

import atexit
import fcntl
import json
import os
import sys

_OUT = os.environ.get("ROCMBUILD_BENCH_WALK")
_NAME = os.environ.get("ROCMBUILD_BENCH_WALK_NAME", "libMIOpen.so.1.0")
_seen: dict = {}


def _record(what):
    frames, f = [], sys._getframe(2)
    while f is not None:
        path = f.f_code.co_filename.replace(os.sep, "/")
        if "/rocmbuild/" in path and "/benchmarks/" not in path:
            frames.append([path.rsplit("/rocmbuild/", 1)[1], f.f_code.co_name, f.f_lineno])
        f = f.f_back
    _seen.setdefault(what, frames[::-1])


def _renamed(fn):
    def wrapper(src, dst, *a, **kw):
        if "swap" not in _seen and os.fsdecode(dst).rsplit("/", 1)[-1] == _NAME:
            _record("swap")
        return fn(src, dst, *a, **kw)
    return wrapper


def _copying(fn):
    def wrapper(*a, **kw):
        if "stage" not in _seen:
            _record("stage")
        return fn(*a, **kw)
    return wrapper


def _save():
    with open(_OUT, "w") as out:
        json.dump(_seen, out)


if _OUT:
    os.replace = _renamed(os.replace)
    os.rename = _renamed(os.rename)
    os.copy_file_range = _copying(os.copy_file_range)
    os.sendfile = _copying(os.sendfile)
    fcntl.ioctl = _copying(fcntl.ioctl)
    atexit.register(_save)
