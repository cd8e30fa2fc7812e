"""Where ROCm is on this machine, the one answer every layer uses (``doctor``, ``[requires]``,
and ``${ROCM_PATH}`` in a recipe), and ``${ROCM_PATH}`` resolved in a loaded recipe.

ROCm is looked for, in order, at ``$ROCM_PATH`` (taken as given, even when missing: the user said
so), ``/opt/rocm`` and the distribution's layout under ``/usr`` (Debian/Ubuntu: ``/usr/bin/hipcc``,
``clang++-NN``, ``/usr/lib/<multiarch>/cmake/hip/``). In every root the same names are tried:
``llvm/bin/clang++``, ``lib/llvm/bin/clang++``, then the highest ``bin/clang++-NN`` /
``lib/llvm-NN/bin/clang++``; ``lib/cmake/hip/`` then ``lib/*/cmake/hip/``. ``ROCMBUILD_ROOT``
(default ``/``) replaces the root of the fixed places ``/opt/rocm`` and ``/usr`` (tests fake a
machine with it, like ``ROCMBUILD_SYSFS_ROOT`` for ``/sys``).

The recipe variables built on this answer (``${ROCM_PATH}``, ``${HIP_CXX}``, ...) are
:mod:`rocmbuild.recipe.variables`. The resolved defines and env are what the cache key hashes
(they change the build); ``show`` and lock files see the recipe as written, so a lock stays valid
on a machine whose ROCm lives elsewhere.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RocmInstall:
    """A ROCm found on this machine: its root, how it was found, and the tools doctor checks."""

    root: Path
    via: str  # "$ROCM_PATH", "/opt/rocm" or "the distribution (/usr)"
    layout: str  # "rocm" (a ROCm tree, e.g. /opt/rocm) or "distribution" (Debian/Ubuntu under /usr)
    hipcc: Path | None
    clang: Path | None  # ROCm's clang++ (the HIP compiler)
    hip_cmake: Path | None  # the directory holding hip-config.cmake

    @property
    def clang_c(self) -> Path | None:
        """The C driver beside :attr:`clang` (``clang++`` -> ``clang``, ``clang++-22`` -> ``clang-22``)."""
        if self.clang is None:
            return None
        c = self.clang.with_name(self.clang.name.replace("clang++", "clang", 1))
        return c if c.exists() else None

    @property
    def device_libs(self) -> Path | None:
        """The directory holding the AMDGPU device libraries (``amdgcn/bitcode/*.bc``): under the
        root (AMD's ``amdgcn/bitcode``, a multiarch ``lib/*/amdgcn/bitcode``), else in the
        compiler's resource dir (Debian: ``/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode``)."""
        roots = [self.root, self.root / "lib", *sorted(self.root.glob("lib/*-linux-gnu*"))]
        if self.clang is not None:
            llvm = Path(os.path.realpath(self.clang)).parent.parent
            roots += [*sorted(llvm.glob("lib/clang/*")), *sorted(llvm.glob("lib/clang/*/lib"))]
        for d in (r / "amdgcn/bitcode" for r in roots):
            if d.is_dir() and any(d.glob("*.bc")):
                return d
        return None


def host_root() -> Path:
    """``$ROCMBUILD_ROOT`` (a faked machine root for tests), else ``/``."""
    return Path(os.environ.get("ROCMBUILD_ROOT") or "/")


def _highest(paths: list[Path]) -> Path | None:
    def key(p: Path) -> int:
        m = re.search(r"-(\d+)$", p.name) or re.search(r"llvm-(\d+)", str(p))
        return int(m.group(1)) if m else -1

    return max(paths, key=key) if paths else None


def _clang_in(root: Path) -> Path | None:
    for p in (root / "llvm/bin/clang++", root / "lib/llvm/bin/clang++"):
        if p.exists():
            return p
    return _highest([p for p in root.glob("bin/clang++-[0-9]*") if p.exists()]
                    + [p for p in root.glob("lib/llvm-[0-9]*/bin/clang++") if p.exists()])


def cmake_dirs(root: Path, package: str) -> list[Path]:
    """Where a cmake package config may be under a ROCm root: ``lib/cmake/PKG``, ``lib/*/cmake/PKG``."""
    return [d for d in [root / "lib/cmake" / package, *sorted(root.glob(f"lib/*/cmake/{package}"))] if d.is_dir()]


def _install_at(root: Path, via: str) -> RocmInstall:
    hip = [d for d in cmake_dirs(root, "hip") if (d / "hip-config.cmake").exists()]
    layout = "distribution" if hip and hip[0].parent.parent.name != "lib" else "rocm"
    hipcc = root / "bin/hipcc"
    return RocmInstall(root, via, layout, hipcc if hipcc.exists() else None, _clang_in(root), hip[0] if hip else None)


def find_rocm() -> RocmInstall | None:
    """The ROCm this machine has (see the module notes), or None when there is none."""
    if os.environ.get("ROCM_PATH"):
        return _install_at(Path(os.environ["ROCM_PATH"]), "$ROCM_PATH")
    host = host_root()
    if (host / "opt/rocm").is_dir():
        return _install_at(host / "opt/rocm", "/opt/rocm")
    usr = host / "usr"
    if (usr / "bin/hipcc").exists() or any((d / "hip-config.cmake").exists() for d in cmake_dirs(usr, "hip")):
        return _install_at(usr, "the distribution (/usr)")
    return None


def rocm_root() -> Path:
    """The root of the ROCm found, else where it is expected (``$ROCM_PATH``, else /opt/rocm)."""
    found = find_rocm()
    return found.root if found else Path(os.environ.get("ROCM_PATH") or host_root() / "opt/rocm")
