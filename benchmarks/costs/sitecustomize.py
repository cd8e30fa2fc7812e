"""Time the fixed costs of one rocmbuild process (benchmarks only: put this directory first on
PYTHONPATH and set ROCMBUILD_BENCH_COSTS to a file; benchmarks/_whole_apply.py does, for one
untimed apply). At exit it appends one JSON line to that file:

* ``entered``/``left``: wall-clock times (``time.time()``) at which ``rocmbuild.flows.apply.apply``
  was entered and returned: start-up is ``entered`` minus the parent's spawn time (interpreter,
  imports, parsing, up to the flow), ``left`` to the process's end is the output and exit;
* ``probes``: the seconds of each start of the target's Python for the probe
  (``rocmbuild.environment.probe._capture``, which every probe goes through);
* ``journal``: count and seconds of ``Journal.save`` (atomic write, its fsyncs included);
* ``fsyncs``: count and seconds of ``os.fsync``/``os.fdatasync`` outside a journal save;
* ``copies``: seconds and bytes of each ``rocmbuild.fs.disk.copy_fd`` (the library's bytes);
* ``children``: the other processes (``rocmbuild.proc.runner.run``/``capture`` outside a probe:
  git, the activation's bash, ldconfig ...), each its program's name and seconds, the
  supervisor every child runs under (``proc/reaper.py``, a ``python -I -S``) included, and
  ``beside``: started by another thread than the main one (apply's ``git --version`` and
  ``ls-remote``, run while the main thread probes the target: not on the apply's path);
* ``elf``: count and seconds of the ELF reads before the swap (``read_soname``, ``read_elf``,
  pyelftools' import included in the first).

Nothing of rocmbuild is imported here (that would move import time out of start-up): a finder on
``sys.meta_path`` wraps each function right after its module is first executed.

Only rocmbuild's own interpreter is instrumented (``sys.prefix`` equal to
``ROCMBUILD_BENCH_COSTS_PREFIX``): the target's Python, started by the probe with the same
``PYTHONPATH``, runs this file too, and importing ``importlib.abc`` and ``json`` there would map
a dozen more shared objects into the probed process (zlib, lzma, bz2, ...), so the check before the
swap would read their SONAMEs and the figure would measure the instrument.
"""

import os
import sys

_OUT = (os.environ.get("ROCMBUILD_BENCH_COSTS")
        if sys.prefix == os.environ.get("ROCMBUILD_BENCH_COSTS_PREFIX") else None)
if _OUT:
    import atexit
    import functools
    import importlib.abc
    import json
    import threading
    import time
_seen = {"pid": os.getpid(), "entered": None, "left": None, "probes": [], "journal": [0, 0.0], "fsyncs": [0, 0.0],
         "copies": [], "children": [], "elf": [0, 0.0]}


class _Depth(threading.local if _OUT else object):  # type: ignore[misc]
    """How many calls of one wrapped function are under way in this thread (apply's ls-remote
    runs in a thread of its own while the main thread probes: it is not the probe's)."""

    n = 0


_in_journal, _in_probe = _Depth(), _Depth()


def _nested(depth, record):
    """Wrap a function: ``depth`` counts its calls under way (so what they call is told apart),
    ``record(seconds)`` after each."""
    def wrap(fn):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            depth.n += 1
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                depth.n -= 1
                record(time.perf_counter() - t)
        return wrapper
    return wrap


def _timed(fn, record):
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            record(time.perf_counter() - t, a, kw)
    return wrapper


def _journal_saved(dt):
    _seen["journal"][0] += 1
    _seen["journal"][1] += dt


def _child(dt, a, kw):
    if not _in_probe.n:
        argv = a[0] if a else kw.get("argv", ["?"])
        _seen["children"].append({"program": os.path.basename(str(argv[0])), "seconds": dt,
                                  "beside": threading.current_thread() is not threading.main_thread()})


def _elf(dt, a, kw):
    _seen.setdefault("elf_paths", []).append(str(a[0]) if a else "?")
    _seen["elf"][0] += 1
    _seen["elf"][1] += dt


def _fsync(dt, a, kw):
    if not _in_journal.n:
        _seen["fsyncs"][0] += 1
        _seen["fsyncs"][1] += dt


def _copy(dt, a, kw):
    try:
        size = os.fstat(a[0]).st_size
    except (OSError, IndexError, TypeError):
        size = 0
    _seen["copies"].append({"seconds": dt, "bytes": size})


def _apply(fn):
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        _seen["entered"] = time.time()
        try:
            return fn(*a, **kw)
        finally:
            _seen["left"] = time.time()
    return wrapper


def _patch(name, module):
    if getattr(module, "_bench_costs_patched", False):  # executed twice (a reload): wrapped once
        return
    module._bench_costs_patched = True
    if name == "rocmbuild.environment.probe":
        module._capture = _nested(_in_probe, _seen["probes"].append)(module._capture)
        module.read_soname = _timed(module.read_soname, _elf)
    elif name == "rocmbuild.environment.needed":
        module.read_elf = _timed(module.read_elf, _elf)
    elif name == "rocmbuild.proc.runner":
        module.run = _timed(module.run, _child)
        module.capture = _timed(module.capture, _child)
    elif name == "rocmbuild.swap.journal":
        module.Journal.save = _nested(_in_journal, _journal_saved)(module.Journal.save)
    elif name == "rocmbuild.fs.disk":
        module.copy_fd = _timed(module.copy_fd, _copy)
    elif name == "rocmbuild.flows.apply":
        module.apply = _apply(module.apply)


class _AfterImport((importlib.abc.MetaPathFinder if _OUT else object)):  # type: ignore[misc]
    NAMES = ("rocmbuild.environment.probe", "rocmbuild.environment.needed", "rocmbuild.proc.runner",
             "rocmbuild.swap.journal", "rocmbuild.fs.disk", "rocmbuild.flows.apply")

    def find_spec(self, name, path, target=None):
        if name not in self.NAMES:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def patched(module, _exec=exec_module, _name=name):
                    _exec(module)
                    _patch(_name, module)

                spec.loader.exec_module = patched
                return spec
        return None


if _OUT:
    os.fsync = _timed(os.fsync, _fsync)
    os.fdatasync = _timed(os.fdatasync, _fsync)
    sys.meta_path.insert(0, _AfterImport())

    @atexit.register
    def _report():
        with open(_OUT, "a") as f:
            f.write(json.dumps(_seen) + "\n")
