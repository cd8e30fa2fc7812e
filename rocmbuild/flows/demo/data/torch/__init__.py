"""THE ROCMBUILD DEMO STAND-IN, NOT PYTORCH.

`rocmbuild demo` writes this file as ``torch/__init__.py`` into its scratch environment, so
that the real probe and verification of rocmbuild run unchanged without a 4.5 GB PyTorch. It
does what matters to them the way PyTorch for ROCm does: at import it loads the library bundled
in its ``lib/`` directory (``torch/lib/libMIOpen.so``, as the PyPI wheels ship it) through the
dynamic loader, asks it for its version with ``miopenGetVersion`` and applies PyTorch's own rule
in ``torch.backends.cudnn.version()``: MIOpen's integer ``M*1000000 + m*1000 + p``, and a
runtime major.minor other than the compile-time one raises RuntimeError on the first call only.
Nothing else of torch exists here. Standard library only.
"""

import ctypes
import os
import sys
import types

__version__ = "0.0.0+rocmbuild.demo.standin"
COMPILE_VERSION = (3, 5, 0)  # the MIOpen this "torch" was built against (ROCm 7.0's MIOpen 3.5.0)

_lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libMIOpen.so"),
                   mode=ctypes.RTLD_GLOBAL)


def _module(name, **attrs):
    mod = types.ModuleType(name, "rocmbuild demo stand-in: " + name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _runtime():
    major, minor, patch = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    status = _lib.miopenGetVersion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    if status != 0:
        raise RuntimeError("miopenGetVersion failed with status %d" % status)
    return (major.value, minor.value, patch.value)


def _version_int():
    major, minor, patch = _runtime()
    return major * 1000000 + minor * 1000 + patch


_cudnn = _module("torch._C._cudnn", is_cuda=False, getCompileVersion=lambda: COMPILE_VERSION,
                 getRuntimeVersion=_runtime, getVersionInt=_version_int)
_C = _module("torch._C", _cudnn=_cudnn, _has_cudnn=True)
version = _module("torch.version", hip="7.0.0-demo", cuda=None, __version__=__version__)
cuda = _module("torch.cuda", is_available=lambda: False, device_count=lambda: 0)

_cached = []


def _cudnn_version():
    """torch.backends.cudnn.version(): the number is cached before the compatibility check."""
    first = not _cached
    if first:
        _cached.append(_version_int())
        runtime, compiled = _runtime(), COMPILE_VERSION
        if runtime[:2] != compiled[:2]:
            raise RuntimeError("cuDNN version incompatibility: PyTorch was compiled  against %s but found "
                               "runtime version %s. (rocmbuild demo stand-in)" % (compiled, runtime))
    return _cached[0]


backends = _module("torch.backends", cudnn=_module("torch.backends.cudnn", version=_cudnn_version,
                                                  is_available=lambda: True, enabled=True))
