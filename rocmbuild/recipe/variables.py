"""Recipe variables: what a recipe may say instead of a path that differs between ROCm layouts,
resolved by the same code ``doctor`` reports with (:func:`rocmbuild.recipe.rocm.find_rocm`).

``${ROCM_PATH}`` the ROCm root; ``${HIP_CXX}`` / ``${HIP_CC}`` ROCm's clang++ / clang
(``/opt/rocm/llvm/bin/clang++`` in AMD's layout, ``/usr/bin/clang++-22`` in Debian's);
``${HIPCC}``; ``${ROCM_DEVICE_LIB_PATH}`` the dir of the ``amdgcn/bitcode/*.bc`` device libraries;
``${HIP_CMAKE_DIR}`` the dir of ``hip-config.cmake``; ``${HALF_INCLUDE_DIR}`` a dir holding
``half/half.hpp`` (MIOpen's ``find_path(HALF_INCLUDE_DIR half/half.hpp)``). ``$NAME`` works too.

Decisions:

* Where they apply: ``[build.defines]`` values (strings and list items), ``[build.env]`` values
  (replaced when the recipe is loaded for build, plan and apply: ``flows.build.load_recipe``), and
  ``[requires]`` programs and paths (replaced when checked; a check keeps the text as written as its
  name). ``show`` and lock files see the recipe as written. Other ``${...}`` are left alone.
* An unresolvable variable stays as written in the loaded recipe, and every variable the recipe
  uses is a requirement check (:func:`checks`): FAIL naming the variable, what was looked for and
  what to install; ``build`` refuses before any fetch, so cmake never sees a literal ``${HIP_CXX}``.
* ``${HALF_INCLUDE_DIR}``: ``<rocm>/include`` when ``<rocm>/include/half/half.hpp`` exists (AMD's
  ``half`` package), else ``/usr/include`` when ``/usr/include/half/half.hpp`` exists, else, when a
  bare ``half.hpp`` exists (Debian's ``libhalf-dev``: ``/usr/include/half.hpp``), the directory
  ``$ROCMBUILD_HOME/include/half-<sha256[:16] of the header>`` that ``build`` fills with
  ``half/half.hpp`` right before configuring (:mod:`rocmbuild.builder.shims`). A *copy*, not a
  symlink: the dir name carries the header's hash, so the cache key (which hashes the resolved
  defines) changes when the header does, and no link leads out of the cache home. The cache key
  hashes a value under the cache home as ``${ROCMBUILD_HOME}/...`` (store/cache.py): two machines
  with the same header share the key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

from rocmbuild.home import cache_home
from rocmbuild.recipe.model import DefineValue, Hint, Recipe
from rocmbuild.recipe.rocm import RocmInstall, find_rocm, host_root, rocm_root

NAMES = ("ROCM_PATH", "HIP_CXX", "HIP_CC", "HIPCC", "ROCM_DEVICE_LIB_PATH", "HIP_CMAKE_DIR", "HALF_INCLUDE_DIR")
_RE = re.compile(r"\$\{(" + "|".join(NAMES) + r")\}|\$(" + "|".join(NAMES) + r")(?![A-Za-z0-9_])")
HALF_DIR = "include"  # under the cache home: include/half-<hash>/half/half.hpp
_HALF_MAX = 4 << 20  # a bigger "half.hpp" is not the header-only library


@dataclass(frozen=True)
class Variable:
    name: str
    value: str | None  # None: not resolvable here
    detail: str  # where it was found, or what was looked for
    fix: Hint = ""  # what to install when it is not resolvable (per distribution: builder/hints.py)
    source: Path | None = None  # HALF_INCLUDE_DIR made by rocmbuild: the bare header it copies

    @property
    def text(self) -> str:
        return "${" + self.name + "}"


def used(texts: Iterable[str]) -> list[str]:
    """The variables named in ``texts``, in :data:`NAMES` order."""
    seen = {m.group(1) or m.group(2) for t in texts for m in _RE.finditer(t)}
    return [n for n in NAMES if n in seen]


def substitute(text: str, values: dict[str, Variable]) -> str:
    """``text`` with each resolvable variable replaced (an unresolvable one is kept as written)."""
    def one(m: re.Match) -> str:
        v = values.get(m.group(1) or m.group(2))
        return v.value if v is not None and v.value is not None else m.group(0)

    return _RE.sub(one, text)


def _sha256(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(_HALF_MAX + 1)
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest() if len(data) <= _HALF_MAX else None


def _half(found: RocmInstall | None, home: Path) -> Variable:
    usr = host_root() / "usr"
    roots = list(dict.fromkeys([*([found.root] if found else []), usr]))
    for r in roots:
        if (r / "include/half/half.hpp").is_file():
            return Variable("HALF_INCLUDE_DIR", str(r / "include"), "it holds half/half.hpp")
    for r in roots:
        bare = r / "include/half.hpp"
        sha = _sha256(bare) if bare.is_file() else None
        if sha is not None:
            shim = home / HALF_DIR / f"half-{sha[:16]}"
            made = "made" if (shim / "half/half.hpp").is_file() else "made by build before configure"
            return Variable("HALF_INCLUDE_DIR", str(shim), f"{made}: half/half.hpp, a copy of {bare}", source=bare)
    return Variable("HALF_INCLUDE_DIR", None, f"no half/half.hpp or half.hpp under {', '.join(f'{r}/include' for r in roots)}",
                    (("debian", "apt install libhalf-dev"), ("default", "install the header-only library half "
                     "(half.hpp, half.sourceforge.net)"), ("rocm", "apt install half")))


def resolve(found: RocmInstall | None | Literal[False] = False, home: Path | None = None) -> dict[str, Variable]:
    """Every variable's value on this machine (``found``: the ROCm, default :func:`find_rocm`)."""
    found = find_rocm() if found is False else found
    home = home or cache_home()
    sdk: Hint = (("debian", "apt install hipcc"), ("default", "install ROCm's HIP SDK (hipcc, ROCm's clang, the "
                 "HIP headers, the device libraries) or set ROCM_PATH to its root"), ("rocm", "apt install rocm-hip-sdk"))
    sdk_for = {"HIP_CMAKE_DIR": (("debian", "apt install libamdhip64-dev"), *sdk[1:2], ("rocm", "apt install hip-dev"))}
    where = f"under {found.root}" if found else "no ROCm found"
    out = {"ROCM_PATH": Variable("ROCM_PATH", str(found.root if found else rocm_root()),
                                 f"the ROCm found, via {found.via}" if found else "no ROCm found: where it is expected")}
    for name, value, looked in (
        ("HIP_CXX", found and found.clang, "llvm/bin/clang++, lib/llvm/bin/clang++, bin/clang++-NN"),
        ("HIP_CC", found and found.clang_c, "clang beside ROCm's clang++"),
        ("HIPCC", found and found.hipcc, "bin/hipcc"),
        ("ROCM_DEVICE_LIB_PATH", found and found.device_libs, "amdgcn/bitcode/*.bc under ROCm and the compiler"),
        ("HIP_CMAKE_DIR", found and found.hip_cmake, "lib/cmake/hip/hip-config.cmake, lib/*/cmake/hip/"),
    ):
        if value:
            out[name] = Variable(name, str(value), f"found {where}")
        else:
            out[name] = Variable(name, None, f"not found ({where}; looked for {looked})", sdk_for.get(name, sdk))
    out["HALF_INCLUDE_DIR"] = _half(found or None, home)
    return out


def build_texts(recipe: Recipe) -> list[str]:
    """The texts of ``recipe`` that reach cmake, where variables are replaced: define and env values."""
    texts = [v for _, v in recipe.build.env]
    return texts + [v for _, d in recipe.build.defines for v in (d if isinstance(d, tuple) else (d,))
                    if isinstance(v, str)]


def _define(value: DefineValue, values: dict[str, Variable]) -> DefineValue:
    if isinstance(value, str):
        return substitute(value, values)
    if isinstance(value, tuple):
        return tuple(substitute(v, values) for v in value)
    return value


def resolve_recipe(recipe: Recipe, values: dict[str, Variable] | None = None) -> Recipe:
    """``recipe`` with the variables of its defines and env replaced (the module notes)."""
    if not used(build_texts(recipe)):
        return recipe
    values = values or resolve()
    build = dataclasses.replace(
        recipe.build, defines=tuple((k, _define(v, values)) for k, v in recipe.build.defines),
        env=tuple((k, substitute(v, values)) for k, v in recipe.build.env))
    return dataclasses.replace(recipe, build=build)


def half_shim(recipe: Recipe, values: dict[str, Variable]) -> Variable | None:
    """The ``${HALF_INCLUDE_DIR}`` rocmbuild must make for a loaded ``recipe`` (its defines and env
    already resolved with ``values``): None when it names no such dir."""
    v = values["HALF_INCLUDE_DIR"]
    if v.source is None or v.value is None:
        return None
    return v if any(v.value in t for t in build_texts(recipe)) else None
