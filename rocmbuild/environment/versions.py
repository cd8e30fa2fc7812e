"""Library version integers and PyTorch's compatibility rule, as pure functions.

Decisions:

* MIOpen's integer is ``M*1000000 + m*1000 + p`` (PyTorch's ``getVersionInt`` on ROCm). cuDNN's
  is what ``cudnnGetVersion()`` returns: cuDNN 9 and later ``M*10000 + m*100 + p`` (9.1.0 ->
  90100), cuDNN 8 and earlier ``M*1000 + m*100 + p`` (8.9.7 -> 8907). The boundary is
  ``n >= 90000``: the smallest cuDNN 9 number is 90000, and the old encoding would need major 90
  to reach it, while every cuDNN <= 8 number is below 18000.
* Compatibility on ROCm is PyTorch's strict rule: runtime major.minor equal to compile-time
  major.minor. On CUDA it is PyTorch's cuDNN rule: same major, runtime minor >= compile minor
  (for cuDNN >= 7).
"""

from __future__ import annotations

from packaging.version import Version

ENCODINGS = ("miopen", "cudnn")


def _unknown(encoding: str) -> ValueError:
    return ValueError(f"unknown version encoding {encoding!r} (use one of {', '.join(ENCODINGS)})")


def decode_version(n: int, encoding: str) -> Version:
    """Decode a library version integer: 3005001 (miopen) -> 3.5.1, 90100 / 8907 (cudnn) -> 9.1.0 / 8.9.7."""
    n = int(n)
    if n < 0:
        raise ValueError(f"negative version integer {n}")
    if encoding == "miopen":
        major, rest = divmod(n, 1000000)
        minor, patch = divmod(rest, 1000)
    elif encoding == "cudnn":
        major, rest = divmod(n, 10000 if n >= 90000 else 1000)
        minor, patch = divmod(rest, 100)
    else:
        raise _unknown(encoding)
    return Version(f"{major}.{minor}.{patch}")


def encode_version(v, encoding: str) -> int:
    """The inverse of :func:`decode_version` for a (major, minor, patch) tuple or version string."""
    if isinstance(v, str):
        v = Version(v)
    if isinstance(v, Version):
        v = v.release
    major, minor, patch = (tuple(v) + (0, 0, 0))[:3]
    if encoding == "miopen":
        return major * 1000000 + minor * 1000 + patch
    if encoding == "cudnn":
        return major * (10000 if major >= 9 else 1000) + minor * 100 + patch
    raise _unknown(encoding)


def major_minor(v: Version | tuple | None) -> tuple[int, int] | None:
    """(major, minor) of a Version or a version tuple; None stays None."""
    if v is None:
        return None
    rel = v.release if isinstance(v, Version) else tuple(v)
    rel = tuple(rel) + (0, 0)
    return int(rel[0]), int(rel[1])


def show(v) -> str:
    """A version for a message: "3.5.1" from a tuple or a Version, "unknown" for None."""
    if v is None:
        return "unknown"
    if isinstance(v, tuple):
        return ".".join(map(str, v))
    return str(v)


def as_tuple(v) -> str:
    """A version as PyTorch's error message renders it: (3, 5, 1)."""
    if isinstance(v, Version):
        v = tuple(v.release)
    return str(tuple(v)) if isinstance(v, tuple) else str(v)


def compatible_versions(runtime, compiled, encoding: str, cuda: bool) -> bool:
    """PyTorch's rule for a runtime library under a torch compiled against ``compiled``."""
    r, c = major_minor(runtime), major_minor(compiled)
    if r is None or c is None:
        return False
    if r[0] != c[0]:
        return False
    if encoding == "cudnn" and cuda and r[0] >= 7:
        return r[1] >= c[1]
    return r[1] == c[1]
