"""The fake ``torch`` package written into a target env's site-packages.

It ``dlopen``s a real library through ctypes at import (so ``/proc/self/maps`` of the target
process shows the real file) and computes its version integer and compatibility check with the
code of ``torch/backends/cudnn/__init__.py`` and ``torch/csrc/cuda/shared/cudnn.cpp``, in Python.
Its behaviour is steered by knobs in ``torch/_fake.json`` (the names and meanings are listed in
docs/testing.md); :data:`DEFAULT_KNOBS` is the full set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

DEFAULT_KNOBS = {
    "compile_version": "3.5.1",
    "hip": "7.0.51831",
    "cuda": None,
    "backend": "miopen",
    "load": None,
    "extra_libs": [],
    "import_error": None,
    "sleep": 0,
    "torch_version": "2.7.1+rocm7.0",
    "print_noise": False,
    "marker_dir": None,
    "sleep_after_swap": 0,
    "fork_child": 0,
    "setsid_child": False,
    "version_raises": None,
    "search": [],
}

_INIT = r'''
"""A fake torch for rocmbuild's tests: loads a real library, computes versions like PyTorch."""
import ctypes
import json
import os
import sys
import time

_here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_here, "_fake.json")) as _f:
    _config = json.load(_f)

if _config.get("sleep"):
    time.sleep(float(_config["sleep"]))
if _config.get("print_noise"):
    print("fake torch: noise on stdout at import")
if _config.get("import_error"):
    raise ImportError(_config["import_error"])

# PyTorch's idiom for TheRock's wheels: torch/_rocm_init.py preloads the ROCm libraries through
# rocm_sdk before anything else (tests/support/therock.py); absent, nothing happens (a missing
# submodule is an ImportError "cannot import name" here, not a ModuleNotFoundError)
try:
    from . import _rocm_init
except ImportError:
    pass
else:
    _rocm_init.initialize()
    del _rocm_init


def _open(_p):
    # a bare name is found by the real loader (LD_LIBRARY_PATH first); "search" stands in for the
    # DT_RUNPATH a real libtorch carries ($ORIGIN/../../../ in a conda env), tried after it
    try:
        return ctypes.CDLL(_p, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        for _d in ([] if "/" in _p else list(_config.get("search") or [])):
            if os.path.exists(os.path.join(_d, _p)):
                return ctypes.CDLL(os.path.join(_d, _p), mode=ctypes.RTLD_GLOBAL)
        raise


_handles = []
for _p in ([_config["load"]] if _config.get("load") else []) + list(_config.get("extra_libs") or []):
    _handles.append(_open(_p))

__version__ = _config.get("torch_version", "2.7.1+rocm7.0")


def _mark(name, text=""):
    with open(os.path.join(_config["marker_dir"], name), "w") as _m:
        _m.write(text)


if _config.get("sleep_after_swap") and _config.get("load"):
    # the first import records the inode it loads; an import that loads another one (the new file,
    # after a swap) sleeps, so a test can signal rocmbuild while it verifies
    _ino = str(os.stat(_config["load"]).st_ino)
    _first = os.path.join(_config["marker_dir"], "first-inode")
    if not os.path.exists(_first):
        _mark("first-inode", _ino)
    elif open(_first).read() != _ino:
        _mark("sleeping-%d" % os.getpid())
        time.sleep(float(_config["sleep_after_swap"]))

if _config.get("fork_child"):
    # a child that keeps the probe's stdout and stderr open (in a new session with setsid_child)
    _child = os.fork()
    if _child == 0:
        if _config.get("setsid_child"):
            os.setsid()
        time.sleep(float(_config["fork_child"]))
        os._exit(0)
    _mark("child-%d" % _child)

from . import version  # noqa: E402
from . import _C  # noqa: E402
from . import backends  # noqa: E402
from . import cuda  # noqa: E402
'''

_VERSION = r'''
from torch import _config
hip = _config.get("hip")
cuda = _config.get("cuda")
__version__ = _config.get("torch_version")
'''

_C_INIT = r'''
import ctypes
import types

from torch import _config, _handles


def _runtime_tuple():
    lib = _handles[0]
    major, minor, patch = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    status = lib.miopenGetVersion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    if status != 0:
        raise RuntimeError("miopenGetVersion failed with status %d" % status)
    return (major.value, minor.value, patch.value)


_backend = _config.get("backend")
_has_cudnn = bool(_backend) and bool(_handles)

if _backend:
    _cudnn = types.ModuleType("torch._C._cudnn", "libcudnn.so bindings")
    _cudnn.is_cuda = _backend == "cudnn"

    def getCompileVersion():
        return tuple(int(x) for x in str(_config["compile_version"]).split("."))

    def getRuntimeVersion():
        return _runtime_tuple()

    def getVersionInt():
        major, minor, patch = getRuntimeVersion()
        if _backend == "miopen":
            # torch/csrc/cuda/shared/cudnn.cpp: miopen version is MAJOR*1000000 + MINOR*1000 + PATCH
            return major * 1000000 + minor * 1000 + patch
        # versionRuntimeCuDNN() == cudnnGetVersion(): cuDNN 9 M*10000+m*100+p, cuDNN <= 8 M*1000+m*100+p
        return major * (10000 if major >= 9 else 1000) + minor * 100 + patch

    _cudnn.getCompileVersion = getCompileVersion
    _cudnn.getRuntimeVersion = getRuntimeVersion
    _cudnn.getVersionInt = getVersionInt
'''

_BACKENDS_INIT = r'''
from . import cudnn  # noqa: F401
'''

# The logic of torch/backends/cudnn/__init__.py (_init/version/is_available), unchanged in substance:
# __cudnn_version is set BEFORE the incompatibility check raises, so the first call raises and
# later calls return the number.
_CUDNN_INIT = r'''
import os

import torch

try:
    from torch._C import _cudnn
except ImportError:
    _cudnn = None

__cudnn_version = None

if _cudnn is not None:

    def _init():
        global __cudnn_version
        if __cudnn_version is None:
            __cudnn_version = _cudnn.getVersionInt()
            runtime_version = _cudnn.getRuntimeVersion()
            compile_version = _cudnn.getCompileVersion()
            runtime_major, runtime_minor, _ = runtime_version
            compile_major, compile_minor, _ = compile_version
            # Different major versions are always incompatible
            # Starting with cuDNN 7, minor versions are backwards-compatible
            # Not sure about MIOpen (ROCm), so always do a strict check
            if runtime_major != compile_major:
                cudnn_compatible = False
            elif runtime_major < 7 or not _cudnn.is_cuda:
                cudnn_compatible = runtime_minor == compile_minor
            else:
                cudnn_compatible = runtime_minor >= compile_minor
            if not cudnn_compatible:
                if os.environ.get("PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK", "0") == "1":
                    return True
                base_error_msg = (
                    f"cuDNN version incompatibility: "
                    f"PyTorch was compiled  against {compile_version} "
                    f"but found runtime version {runtime_version}. "
                    f"PyTorch already comes bundled with cuDNN. "
                    f"One option to resolving this error is to ensure PyTorch "
                    f"can find the bundled cuDNN. "
                )
                if "LD_LIBRARY_PATH" in os.environ:
                    ld_library_path = os.environ.get("LD_LIBRARY_PATH", "")
                    if any(s in ld_library_path for s in ["cuda", "cudnn"]):
                        raise RuntimeError(
                            f"{base_error_msg}"
                            f"Looks like your LD_LIBRARY_PATH contains incompatible version of cudnn. "
                            f"Please either remove it from the path or install cudnn {compile_version}"
                        )
                    raise RuntimeError(
                        f"{base_error_msg}"
                        f"one possibility is that there is a conflicting cuDNN in LD_LIBRARY_PATH."
                    )
                raise RuntimeError(base_error_msg)
        return True

else:

    def _init():
        return False


def version():
    """Return the version of cuDNN."""
    if torch._config.get("version_raises"):
        raise RuntimeError(torch._config["version_raises"])
    if not _init():
        return None
    return __cudnn_version


def is_available():
    return torch._C._has_cudnn


enabled = True
'''

_CUDA_INIT = r'''
def is_available():
    return False


def device_count():
    return 0
'''


def write_torch(torch_dir: Path, knobs: dict) -> None:
    torch_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "__init__.py": _INIT,
        "version.py": _VERSION,
        "_C/__init__.py": _C_INIT,
        "backends/__init__.py": _BACKENDS_INIT,
        "backends/cudnn/__init__.py": _CUDNN_INIT,
        "cuda/__init__.py": _CUDA_INIT,
    }
    for rel, text in files.items():
        p = torch_dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text.lstrip())
    write_knobs(torch_dir, knobs)


def write_knobs(torch_dir: Path, knobs: dict) -> None:
    tmp = torch_dir / "_fake.json.tmp"
    tmp.write_text(json.dumps(knobs, indent=2, default=str))
    os.replace(tmp, torch_dir / "_fake.json")
