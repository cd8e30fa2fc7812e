"""Fake-torch target environments: real venvs, real shared libraries, a small ``torch`` package.

Used by the target/probe/verify tests and by the apply/rollback tests. Nothing is mocked at
the process level: the environment is a real ``python -m venv --without-pip`` (about 0.2 s),
and its ``torch`` really ``dlopen``s a real ``libMIOpen`` (built from ``tests/fixtures/miopen``
by the ``fixture_libs(version)`` fixture) through ctypes at import, so ``/proc/self/maps`` of
the target process shows the real file, device and inode.

API (stable: other tests rely on it)::

    env = make_env(tmp_path / "env", layout="conda", lib_dir=fixture_libs("3.5.1"),
                   compile_version="3.5.1", hip="7.0.51831")
    env.prefix          # the venv root (a conda-like prefix)
    env.python          # env.prefix / "bin" / "python"
    env.site_packages   # .../lib/pythonX.Y/site-packages
    env.torch_dir       # site_packages / "torch"
    env.libfile         # the real file the fake loads (conda: prefix/lib/libMIOpen.so.1.0,
                        #  wheel: torch/lib/libMIOpen.so)
    env.configure(extra_libs=[...])   # rewrite the fake's JSON (merged with the current knobs)
    env.knobs()         # the current knobs

Layouts:

* ``"conda"``: ``lib_dir/libMIOpen.so.1.0`` copied to ``prefix/lib/``, with links
  ``libMIOpen.so.1 -> libMIOpen.so.1.0`` and ``libMIOpen.so -> libMIOpen.so.1``; the fake dlopens
  ``prefix/lib/libMIOpen.so.1`` (through the link, as the real RUNPATH lookup does).
* ``"wheel"``: the real file copied as ``site-packages/torch/lib/libMIOpen.so`` (a plain file, no
  links, like the PyTorch wheels); the fake dlopens that.

Knobs (keyword arguments of :func:`make_env` and :meth:`Env.configure`; stored in
``torch/_fake.json``):

``compile_version`` ("3.5.1")
    what ``torch._C._cudnn.getCompileVersion()`` returns.
``hip`` ("7.0.51831") / ``cuda`` (None)
    ``torch.version.hip`` / ``.cuda``.
``backend`` ("miopen")
    "miopen" (ROCm build: ``_cudnn.is_cuda`` False, int ``M*1000000+m*1000+p``), "cudnn" (CUDA build:
    ``is_cuda`` True, int as ``cudnnGetVersion``: 9+ ``M*10000+m*100+p``, <=8 ``M*1000+m*100+p``), or
    None (a CPU build: no ``torch._C._cudnn``, ``cudnn.is_available()`` False, ``version()`` None).
``load`` (set by the layout)
    the library path to dlopen; its ``miopenGetVersion`` gives ``getRuntimeVersion()``.
``extra_libs`` ([])
    more paths to dlopen after it (e.g. a second libMIOpen copy, a libamdhip64 stand-in).
``import_error`` (None)
    if set, ``import torch`` raises ``ImportError(import_error)`` (after loading nothing).
``sleep`` (0)
    seconds ``import torch`` sleeps first (probe-timeout tests).
``torch_version`` ("2.7.1+rocm7.0")
    ``torch.__version__``.
``print_noise`` (False)
    print a line on stdout at import (the probe must still produce clean JSON).

``make_env(..., torch=False)`` makes an environment without the package (no torch at all);
``base_python`` picks the interpreter the venv is made from (default ``sys.executable``).

What is real and what is not: the venv, the library files, their links, ``dlopen`` and the maps
are real; the version integer and the compatibility check are computed by the same code as
``torch/backends/cudnn/__init__.py`` and ``torch/csrc/cuda/shared/cudnn.cpp`` (read from PyTorch),
but in Python. The cuDNN-style fake loads a copy of the fixture library renamed ``libcudnn.so.N``:
its version comes from the fixture's ``miopenGetVersion`` symbol (there is no ``cudnnGetVersion``).
``torch.cuda.is_available()`` is always False (no GPU here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LIB_REAL = "libMIOpen.so.1.0"

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
}

# --------------------------------------------------------------------------------------------
# the fake torch package (written into site-packages)

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

_handles = []
for _p in ([_config["load"]] if _config.get("load") else []) + list(_config.get("extra_libs") or []):
    _handles.append(ctypes.CDLL(_p, mode=ctypes.RTLD_GLOBAL))

__version__ = _config.get("torch_version", "2.7.1+rocm7.0")

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


def _write_torch(torch_dir: Path, knobs: dict) -> None:
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


# --------------------------------------------------------------------------------------------
# environments


@dataclass
class Env:
    prefix: Path
    python: Path
    site_packages: Path
    torch_dir: Path
    libfile: Path  # the real file the fake loads

    def knobs(self) -> dict:
        return json.loads((self.torch_dir / "_fake.json").read_text())

    def configure(self, **knobs) -> None:
        """Merge ``knobs`` into the fake's JSON (see the module docstring for the names)."""
        unknown = set(knobs) - set(DEFAULT_KNOBS)
        if unknown:
            raise TypeError(f"unknown fake-torch knobs: {sorted(unknown)}")
        current = self.knobs() if (self.torch_dir / "_fake.json").exists() else dict(DEFAULT_KNOBS)
        current.update({k: (str(v) if isinstance(v, Path) else v) for k, v in knobs.items()})
        if "extra_libs" in knobs:
            current["extra_libs"] = [str(p) for p in knobs["extra_libs"]]
        write_knobs(self.torch_dir, current)

    def remove_torch(self) -> None:
        shutil.rmtree(self.torch_dir)


def make_venv(root: Path, base_python: str | os.PathLike | None = None) -> Path:
    """``python -m venv --without-pip root``; returns the site-packages directory."""
    py = str(base_python or sys.executable)
    subprocess.run([py, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    found = sorted(root.glob("lib/python3*/site-packages"))
    if not found:
        raise RuntimeError(f"no site-packages in {root}")
    return found[0]


def stage_library(lib_dir: Path, dest_dir: Path, *, real: str = LIB_REAL,
                  links: tuple[tuple[str, str], ...] = (("libMIOpen.so.1", LIB_REAL), ("libMIOpen.so", "libMIOpen.so.1"))) -> Path:
    """Copy ``lib_dir/libMIOpen.so.1.0`` into ``dest_dir`` as ``real`` and create ``links``
    (name, relative target) beside it. Returns the real file."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    dst = dest_dir / real
    shutil.copy2(Path(lib_dir) / LIB_REAL, dst)
    for name, target in links:
        link = dest_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return dst


def make_env(
    root: Path,
    *,
    layout: str = "conda",
    lib_dir: Path,
    compile_version: str = "3.5.1",
    hip: str | None = "7.0.51831",
    torch: bool = True,
    base_python: str | os.PathLike | None = None,
    **knobs,
) -> Env:
    """A venv at ``root`` with a fake torch loading a copy of ``lib_dir``'s libMIOpen (see module doc)."""
    root = Path(root)
    site = make_venv(root, base_python)
    torch_dir = site / "torch"
    backend = knobs.get("backend", DEFAULT_KNOBS["backend"])
    if layout == "conda":
        if backend == "cudnn":
            libfile = stage_library(lib_dir, root / "lib", real="libcudnn.so.9.0.0",
                                    links=(("libcudnn.so.9", "libcudnn.so.9.0.0"), ("libcudnn.so", "libcudnn.so.9")))
            load = root / "lib" / "libcudnn.so.9"
        else:
            libfile = stage_library(lib_dir, root / "lib")
            load = root / "lib" / "libMIOpen.so.1"
    elif layout == "wheel":
        name = "libcudnn.so.9" if backend == "cudnn" else "libMIOpen.so"
        libfile = stage_library(lib_dir, torch_dir / "lib", real=name, links=())
        load = libfile
    else:
        raise ValueError(f"unknown layout {layout!r} (conda or wheel)")
    env = Env(prefix=root, python=root / "bin" / "python", site_packages=site, torch_dir=torch_dir, libfile=libfile)
    if not torch:
        shutil.rmtree(torch_dir, ignore_errors=True)  # no half package (a bare dir imports as a namespace)
    else:
        config = dict(DEFAULT_KNOBS)
        config.update(compile_version=compile_version, hip=hip, load=str(load))
        _write_torch(torch_dir, config)
        env.configure(**knobs)
    return env
