"""Pure functions: recipe + options -> the cmake configure / build / install argv lists.

Nothing here runs a process or reads a file, so ``plan`` can show exactly what ``build`` would
run. Defines are typed: a TOML bool becomes ``-DNAME:BOOL=ON|OFF``, a list becomes a
``;``-separated ``STRING``, anything else a ``STRING``.

The install step uses ``DESTDIR`` (set in the environment by the caller) with the recipe's
``install_prefix``; the prefix never comes from a target, so an artifact does not depend on
where it will be installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from rocmbuild.builder import tweak as version_tweak
from rocmbuild.recipe.model import Build, DefineValue

LAUNCHER_VARIABLES = (
    "CMAKE_C_COMPILER_LAUNCHER",
    "CMAKE_CXX_COMPILER_LAUNCHER",
    "CMAKE_HIP_COMPILER_LAUNCHER",
)


#: launchers a recipe names itself (``auto`` is resolved by the builder, ``none`` is none)
NAMED_LAUNCHERS = ("ccache", "sccache")


def define_arg(name: str, value: DefineValue) -> str:
    if isinstance(value, bool):
        return f"-D{name}:BOOL={'ON' if value else 'OFF'}"
    if isinstance(value, tuple):
        return f"-D{name}:STRING={';'.join(value)}"
    return f"-D{name}:STRING={value}"


def jobs(build: Build) -> int:
    return build.jobs if build.jobs > 0 else (os.cpu_count() or 1)


def configure_argv(build: Build, source_dir: Path, build_dir: Path, launcher_path: str | None = None,
                   tweak: str | None = None, flags: Mapping[str, str] | None = None) -> list[str]:
    """``launcher_path``: the resolved launcher (None: a named launcher by its name, else none);
    ``tweak``: MIOpen's version tweak (:mod:`rocmbuild.builder.tweak`; None: not set).
    ``flags``: flags variables (``CMAKE_C_FLAGS`` -> value) that replace the recipe's define of
    that name (the value already holds it: builder/reproducible.py) or follow the defines."""
    flags = dict(flags or {})
    argv = [
        "cmake",
        "-S", str(source_dir),
        "-B", str(build_dir),
        "-G", build.generator,
        f"-DCMAKE_BUILD_TYPE:STRING={build.build_type}",
        f"-DCMAKE_INSTALL_PREFIX:PATH={build.install_prefix}",
    ]
    launcher = launcher_path or (build.launcher if build.launcher in NAMED_LAUNCHERS else None)
    if launcher:
        for var in LAUNCHER_VARIABLES:
            argv.append(f"-D{var}:FILEPATH={launcher}")
    if tweak:
        argv.append(version_tweak.define(tweak))
    for name, value in build.defines:
        argv.append(define_arg(name, flags.pop(name)) if name in flags else define_arg(name, value))
    argv += [define_arg(name, value) for name, value in flags.items()]
    return argv


def build_argv(build: Build, build_dir: Path) -> list[str]:
    argv = ["cmake", "--build", str(build_dir), "--parallel", str(jobs(build))]
    for t in build.targets:
        argv += ["--target", t]
    return argv


def install_argv(build_dir: Path) -> list[str]:
    return ["cmake", "--install", str(build_dir)]


def build_env(build: Build, destdir: Path | None = None) -> dict[str, str]:
    env = dict(build.env)
    if destdir is not None:
        env["DESTDIR"] = str(destdir)
    return env
