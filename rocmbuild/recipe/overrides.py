"""Command-line overrides of a loaded recipe, and ``GPU_TARGETS = "auto"`` resolved for this machine.

The recipe file is never touched: each function returns a new :class:`Recipe`. Decision: ``-D``
values are typed like recipe defines (``ON``/``OFF``/``TRUE``/``FALSE`` or ``:BOOL`` become bools,
everything else a string), so ``-D X=ON`` and ``X = true`` in the recipe build the same artifact.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from rocmbuild.errors import InputError
from rocmbuild.recipe import arch
from rocmbuild.recipe.model import DEFINE_RE, LAUNCHERS, DefineValue, Recipe


@dataclass(frozen=True)
class Overrides:
    ref: str | None = None
    source: str | None = None
    defines: tuple[str, ...] = ()  # NAME=VALUE, as typed by the user
    jobs: int | None = None
    gpu_targets: str | None = None
    launcher: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, ())}


def _parse_cli_define(text: str) -> tuple[str, DefineValue]:
    if "=" not in text:
        raise InputError(f"-D {text}: expected NAME=VALUE", "for example: -D MIOPEN_USE_MLIR=OFF")
    name, value = text.split("=", 1)
    typ = None
    if ":" in name:
        name, typ = name.split(":", 1)
    if not DEFINE_RE.match(name):
        raise InputError(f"-D {text}: invalid CMake variable name '{name}'", "use letters, digits and underscores")
    if (typ or "").upper() == "BOOL" or (typ is None and value.upper() in ("ON", "OFF", "TRUE", "FALSE")):
        return name, value.upper() in ("ON", "TRUE", "1", "YES")
    return name, value


def apply_overrides(recipe: Recipe, ov: Overrides) -> Recipe:
    """Return a new Recipe with command-line overrides applied (the recipe file is not touched)."""
    source = recipe.source
    if ov.ref is not None:
        if source.tarball:
            raise InputError("--ref only applies to git sources", f"recipe '{recipe.name}' uses an archive")
        source = dataclasses.replace(source, ref=ov.ref)
    if ov.source is not None:
        if source.tarball:
            source = dataclasses.replace(source, archive=ov.source)
        else:
            source = dataclasses.replace(source, git=ov.source)
    defines = dict(recipe.build.defines)
    for d in ov.defines:
        k, v = _parse_cli_define(d)
        arch.check_defines([(k, v)], "-D")  # a -D GPU_TARGETS=... is checked like --gpu-targets
        defines[k] = v
    if ov.gpu_targets is not None:
        defines["GPU_TARGETS"] = ";".join(arch.check_targets(ov.gpu_targets, f"--gpu-targets {ov.gpu_targets}"))
    build = recipe.build
    if ov.jobs is not None:
        if ov.jobs < 0:
            raise InputError("--jobs must be >= 0", "0 means all cores")
        build = dataclasses.replace(build, jobs=ov.jobs)
    if ov.launcher is not None:
        if ov.launcher not in LAUNCHERS:
            raise InputError(f"--launcher {ov.launcher}: unknown launcher", f"use one of: {', '.join(LAUNCHERS)}")
        build = dataclasses.replace(build, launcher=ov.launcher)
    build = dataclasses.replace(build, defines=tuple(sorted(defines.items())))
    return dataclasses.replace(recipe, source=source, build=build)


def resolve_gpu_targets(recipe: Recipe, detect: Callable[[], list[str]]) -> Recipe:
    """Replace ``GPU_TARGETS = "auto"`` with the architectures found on this machine.

    ``--gpu-targets`` (applied by :func:`apply_overrides`) wins because it already replaced the
    value. None found: a clear error, exit 2.
    """
    if recipe.build.define("GPU_TARGETS") != "auto":
        return recipe
    archs = detect()
    if not archs:
        raise InputError(
            f"recipe '{recipe.name}' sets GPU_TARGETS = \"auto\" but no AMD GPU was found on this machine",
            "pass --gpu-targets gfx1151 (or your architecture; `rocmbuild doctor` shows it). Building for one "
            "architecture instead of all is the largest build-time saving there is.",
        )
    defines = dict(recipe.build.defines)
    defines["GPU_TARGETS"] = ";".join(archs)
    return dataclasses.replace(recipe, build=dataclasses.replace(recipe.build, defines=tuple(sorted(defines.items()))))
