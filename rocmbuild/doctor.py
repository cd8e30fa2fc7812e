"""Preflight checks: tools, ROCm, GPU architecture, disk, the target's torch, a recipe's requirements.

Each check is a :class:`DoctorCheck` with a status ``ok`` / ``warn`` / ``fail``, a one-line
detail (what was found) and a one-line fix (empty when ok). ``rocmbuild doctor`` exits 0 when no
check fails, 2 otherwise.

Decisions:

* ROCm (``$ROCM_PATH``, ``/opt/rocm`` or the distribution's ``/usr``: requirements.find_rocm)
  missing, or missing hipcc / clang++ / ``hip-config.cmake``: **fail** (MIOpen cannot be built
  without them; the fix names AMD's packages for a ROCm tree, Debian's for a Debian-like ``/usr``:
  builder/hints.py). Only for a ROCm target or none: a CUDA target (the backend the probe found) gets
  its CUDA facts (cuDNN versions, the cuDNN set loaded, one file per SONAME) instead, and no AMD GPU check.
* A host that builds nothing: ``doctor --require-cache`` (a fleet host that only pulls) or a
  prebuilt recipe (``[build] system = "prebuilt"``): git, cmake, make/ninja, the compilers and
  ROCm are not needed, so a missing one **warns** (saying why it is not needed), never fails. A
  cuDNN recipe without a target is judged like a CUDA target: no ROCm, no AMD GPU check.
* No GPU found: **warn** (building works with ``--gpu-targets``; only ``GPU_TARGETS = "auto"``
  and the smoke test need one).
* GPU targets: a recipe's ``GPU_TARGETS`` (``"auto"``: this machine's GPUs) against the GPUs found:
  a mismatch **warns** (``apply`` refuses it here, but a build host may build for a fleet's other
  GPUs); without a recipe, the line says what ``"auto"`` builds for.
* cmake below 3.16 (the fixture/MIOpen minimum rocmbuild was tested with): fail; a recipe may set
  its own floor in ``[requires]``.
* Disk: the build cache (``rocmbuild.home.cache_home()``) fails under 5 GiB free and warns under
  30 GiB (a MIOpen build tree for one architecture is ~10-20 GiB); the target fails under
  256 MiB and warns under 2 GiB (a swap stages one new library, ~1 GiB, beside the old one).
* No target given and none active (``$CONDA_PREFIX``/``$VIRTUAL_ENV``): **warn**, not fail. A
  target given but unusable (no torch, does not run): fail.
* An implicit target that is rocmbuild's own environment without torch: **warn**, like no target.
* The target's activation (conda's ``activate.d``/env vars, a venv's ``bin/activate``: see
  docs/verification.md): an ``ok`` line naming its files and what they set; when the activated
  environment loads another library than the unactivated one: **warn**, naming the variable and
  the file. Every ``LD_LIBRARY_PATH``/``LD_PRELOAD`` entry (the caller's or the activation's)
  holding another copy of the judged library (``libMIOpen.so*``): **warn**, one line each (the
  loader searches them before a library's RUNPATH; a copy there can be what loads).
* A recipe's ``[requires]`` are checked by :mod:`rocmbuild.builder.requirements` (the build runs
  the same checks before fetching); doctor shows them beside its own, with the recipe's ``-D``
  overrides applied (a requirement's ``when``). Every recipe variable (``${HIP_CXX}``, ...:
  recipe/variables.py) is a line with its value here; one the recipe's defines or env use and
  that is not resolvable: **fail**; another: **warn**.
* When two or more failed checks name install commands, the result ends with one line that
  merges them (builder/hints.py): ``install what is missing: apt install a b c``.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

from rocmbuild.proc import runner
from rocmbuild.builder import pipeline
from rocmbuild.builder import hints
from rocmbuild.builder.requirements import (FAIL, OK, WARN, DoctorCheck, build_variables, check_program,
                                          check_requirements, find_rocm, host_root, variable_checks)
from rocmbuild.fs.disk import nearest_existing
from rocmbuild.errors import RocmbuildError
from rocmbuild.home import cache_home
from rocmbuild.recipe import arch, variables
from rocmbuild.swap import strays
from rocmbuild.swap.mapping import layout_of
from rocmbuild.environment import gpu, loadpath, target, verify

CMAKE_MIN = "3.16"
GiB = 1 << 30
CACHE_FAIL, CACHE_WARN = 5 * GiB, 30 * GiB
TARGET_FAIL, TARGET_WARN = 256 << 20, 2 * GiB
_VERSION_RE = re.compile(r"(?<![0-9.])(\d+\.\d+(?:\.\d+)?)")


# --------------------------------------------------------------------------------------------
# helpers


def _free(path: Path) -> tuple[Path, int] | None:
    p = nearest_existing(Path(path))
    try:
        return p, shutil.disk_usage(p).free
    except OSError:
        return None


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


# --------------------------------------------------------------------------------------------
# individual checks


def check_git() -> DoctorCheck:
    # 2.32: rocmbuild runs git with an empty global config (GIT_CONFIG_GLOBAL; sources/git.py)
    return check_program("git", floor="2.32", fix="install git >= 2.32 (apt install git)")


def check_cmake() -> DoctorCheck:
    return check_program("cmake", floor=CMAKE_MIN, fix=f"install cmake >= {CMAKE_MIN} (pip install cmake, or apt install cmake)")


def check_build_tool() -> DoctorCheck:
    found = [(p, runner.which(p)) for p in ("ninja", "make")]
    have = [f"{p} ({path})" for p, path in found if path]
    if have:
        return DoctorCheck("make/ninja", OK, ", ".join(have))
    return DoctorCheck("make/ninja", FAIL, "neither ninja nor make is on PATH",
                       "install one: apt install ninja-build (or make)")


def check_compilers() -> list[DoctorCheck]:
    out = []
    for label, env_var, names, pkg in (
        ("C compiler", "CC", ("cc", "gcc", "clang"), "gcc"),
        ("C++ compiler", "CXX", ("c++", "g++", "clang++"), "g++"),
    ):
        chosen = os.environ.get(env_var)
        cands = ([chosen] if chosen else []) + list(names)
        for c in cands:
            path = runner.which(c)
            if path:
                out.append(DoctorCheck(label, OK, f"{c} ({path})" + (f" from ${env_var}" if c == chosen else "")))
                break
        else:
            out.append(DoctorCheck(label, FAIL, f"none of {', '.join(cands)} found",
                                   f"install {pkg} (apt install build-essential)"))
    return out


def rocm_words(found) -> str:
    """Where the ROCm found is and how it is laid out, each said once: ``/usr (the distribution's
    packages)``, ``/opt/rocm (a ROCm tree)``, ``/x (from $ROCM_PATH; a ROCm tree)``."""
    shape = "a ROCm tree" if found.layout == "rocm" else "the distribution's packages"
    if found.via == "$ROCM_PATH":
        return f"{found.root} (from $ROCM_PATH; {shape})"
    return f"{found.root} ({shape})"


def check_rocm() -> list[DoctorCheck]:
    """ROCm, wherever it is (requirements.find_rocm): which one was found, and its hipcc, clang++, HIP config."""
    found = find_rocm()
    fix = ("install ROCm (https://rocm.docs.amd.com, e.g. amdgpu-install --usecase=rocm, or the distribution's "
           "packages: apt install hipcc libamdhip64-dev) or set ROCM_PATH to its root")
    if found is None:
        return [DoctorCheck("ROCm", FAIL, f"none found: $ROCM_PATH is not set, {host_root() / 'opt/rocm'} does not "
                                          f"exist and {host_root() / 'usr'} has no hipcc or HIP cmake config", fix)]
    root = found.root
    if not root.is_dir():
        return [DoctorCheck("ROCm", FAIL, f"{root} ({found.via}) does not exist", fix)]
    out = [DoctorCheck("ROCm", OK, rocm_words(found))]
    dev = hints.pick((("debian", "apt install hipcc libamdhip64-dev"), ("rocm", "apt install rocm-hip-sdk"),
                      ("default", f"install the ROCm development packages under {root} (hipcc, ROCm's clang, the "
                                  "HIP headers and cmake config)")), amd_layout=found.layout == "rocm")
    for label, path, looked in (
        ("hipcc", found.hipcc, root / "bin/hipcc"),
        ("ROCm clang++", found.clang, f"{root}/llvm/bin/clang++ (or lib/llvm/bin/clang++, bin/clang++-NN)"),
        ("HIP cmake config", found.hip_cmake and found.hip_cmake / "hip-config.cmake",
         f"{root}/lib/cmake/hip/hip-config.cmake (or lib/<multiarch>/cmake/hip/)"),
    ):
        if path is not None:
            out.append(DoctorCheck(label, OK, str(path)))
        else:
            out.append(DoctorCheck(label, FAIL, f"{looked} not found", dev or ""))
    return out


def check_gpu(archs: list[str] | None = None) -> DoctorCheck:
    archs = gpu.detect() if archs is None else archs
    if archs:
        return DoctorCheck("GPU architecture", OK, ", ".join(archs) + f" (from {gpu.source_description()})")
    return DoctorCheck("GPU architecture", WARN, f"no AMD GPU found ({gpu.source_description()})",
                       "building still works: pass --gpu-targets gfx1151 (your architecture); the smoke test "
                       "and GPU_TARGETS=\"auto\" need a GPU with the amdgpu driver loaded")


def check_gpu_targets(recipe, archs: list[str]) -> list[DoctorCheck]:
    """Whether the recipe's GPU targets cover this machine's GPUs (what ``apply`` refuses); without
    a recipe, what ``GPU_TARGETS = "auto"`` (the bundled recipes' setting) builds for here."""
    if recipe is None:
        return [DoctorCheck("GPU targets", OK, f"match: GPU_TARGETS = \"auto\" (the bundled recipes) builds for "
                                               f"{', '.join(archs)}, this machine's GPU")] if archs else []
    if not archs and recipe.build.define("GPU_TARGETS") == "auto":
        return [DoctorCheck("GPU targets", WARN, f"auto: recipe '{recipe.name}' sets GPU_TARGETS = \"auto\" "
                            "(this machine's GPUs), and no AMD GPU was found here",
                            "building it here needs --gpu-targets ARCH (e.g. gfx1151: the GPU it will run on)")]
    m = arch.match(arch.build_targets(recipe.build.defines, auto=archs), archs,
                   amd=recipe.verify.encoding != "cudnn", what=f"recipe '{recipe.name}'")
    if m.status == arch.MISMATCH:
        return [DoctorCheck("GPU targets", WARN, f"{m.status}: {m.detail}",
                            f"`rocmbuild apply` refuses it on this machine (unless --allow-other-arch); build it "
                            f"with --gpu-targets {archs[0]} (or GPU_TARGETS = \"auto\") to use it here")]
    word = {arch.MATCH: "match", arch.UNCHECKED: "not checked", arch.NO_GPU: "not checked"}
    return [DoctorCheck("GPU targets", OK, f"{word.get(m.status, m.status)}: {m.detail}")]


def check_disk(name: str, path: Path, fail_below: int, warn_below: int, what: str) -> DoctorCheck:
    got = _free(path)
    if got is None:
        return DoctorCheck(name, WARN, f"cannot measure free space at {path}", "check the path is readable")
    where, free = got
    detail = f"{_gib(free)} free at {where}"
    if free < fail_below:
        return DoctorCheck(name, FAIL, detail + f" (need >= {_gib(fail_below)} for {what})",
                           "free space there, or move it (ROCMBUILD_HOME for the cache)")
    if free < warn_below:
        return DoctorCheck(name, WARN, detail + f" (recommended >= {_gib(warn_below)} for {what})",
                           "free some space (`rocmbuild` keeps old artifacts and backups until pruned)")
    return DoctorCheck(name, OK, detail)


def _discover(env: str | None, python: str | None, timeout: float) -> tuple[list[DoctorCheck], target.Target | None]:
    """The target's checks and the target (None when there is none, or it cannot be probed)."""
    if not env and not python and not os.environ.get("CONDA_PREFIX") and not os.environ.get("VIRTUAL_ENV"):
        return [DoctorCheck("target", WARN, "no target: no --env/--python given and no active conda env or venv",
                            "pass --env PREFIX (or --python EXE) to check the environment you will change")], None
    try:
        t = target.discover(env, python, timeout=timeout)
    except RocmbuildError as exc:
        own = isinstance(exc.details, dict) and exc.details.get("own_environment")
        return [DoctorCheck("target" if own else "target torch", WARN if own else FAIL,
                            exc.message.splitlines()[0], exc.hint)], None
    disk = check_disk("target disk", t.prefix, TARGET_FAIL, TARGET_WARN, "staging a new library beside the old")
    return [check_torch(t), *check_strays(t), *check_activation(t), disk], t


def check_activation(t: target.Target) -> list[DoctorCheck]:
    """The target's activation, what it changes in what torch loads, and every LD_LIBRARY_PATH /
    LD_PRELOAD entry holding another copy of the library (see the module docstring)."""
    act, diff, out = t.activation, t.difference, []
    if diff is not None:
        files = ", ".join(dict.fromkeys(c.source for c in diff.causes)) or "the activation"
        out.append(DoctorCheck("target activation", WARN, f"{act.kind} activation ({act.how}): {diff.text()}",
                               f"remove the {', '.join(dict.fromkeys(c.var for c in diff.causes))} line from "
                               f"{files} if the env's own library is meant; else `rocmbuild apply` places the "
                               "library the activated env loads (outside the prefix: --allow-outside-prefix)"))
    elif act.kind != "none":
        sets = ", ".join(f"{c.var} ({c.source})" for c in act.relevant()) or "nothing that changes what torch loads"
        out.append(DoctorCheck("target activation", OK,
                               f"{act.kind} ({act.how}): {', '.join(act.files) or 'no activation files'}; sets {sets}"))
    for cp in loadpath.copies(act, t.report):
        where = ("unset it in the shell or script that runs torch" if cp.source == loadpath.CALLER
                 else f"remove it from {cp.source}")
        out.append(DoctorCheck("library copy", WARN, cp.text(),
                               f"{where}, or remove the copy: the loader searches it before the env's own library"))
    return out


def check_target(env: str | None, python: str | None, timeout: float = 300) -> list[DoctorCheck]:
    """The target's torch: ROCm or CUDA build, compile-time MIOpen/cuDNN version, library loaded."""
    return _discover(env, python, timeout)[0]


def check_torch(t: target.Target) -> DoctorCheck:
    """One line on a discovered target's torch: its backend, the versions, the library files loaded
    (a set, e.g. cuDNN 9's libcudnn.so.9 + libcudnn_graph.so.9, is healthy with one file per SONAME)."""
    r = t.report
    if r.hip:
        kind, lib = f"ROCm {r.hip}", "MIOpen"
    elif r.cuda:
        kind, lib = f"CUDA {r.cuda}", "cuDNN"
    else:
        return DoctorCheck("target torch", FAIL,
                           f"torch {r.torch_version} in {t.prefix} is a CPU-only build: no MIOpen/cuDNN in this torch",
                           "install a ROCm build of PyTorch in that environment")
    compiled = ".".join(map(str, r.compile_version)) if r.compile_version else "unknown"
    runtime = ".".join(map(str, r.runtime_version)) if r.runtime_version else "unknown"
    loaded = r.loaded("miopen" if lib == "MIOpen" else "cudnn")
    where = ", ".join(f"{x.path} ({layout_of(x.path, (t.prefix, os.path.realpath(t.prefix)))})"
                      for x in loaded) or "none loaded"
    detail = f"torch {r.torch_version} ({kind}), compiled against {lib} {compiled}, loads {lib} {runtime}: {where}"
    status, fix = OK, ""
    dups = verify.duplicates(loaded) if lib == "cuDNN" else ({"libMIOpen": loaded} if len(loaded) > 1 else {})
    if not loaded:
        status, fix = WARN, f"torch loaded no {lib} file after import; check its installation"
    elif dups:
        status, fix = FAIL, (f"more than one {lib} is loaded ({', '.join(dups)} from several files); remove the "
                             "stray copy or LD_LIBRARY_PATH entry")
    elif r.version_error:
        status, fix = FAIL, (f"torch raises on cudnn.version(): {r.version_error} -- install {lib} "
                             f"{compiled.rsplit('.', 1)[0]}.x (rocmbuild rollback if rocmbuild changed it)")
    came = f" (from {t.origin})" if t.origin != "--env" else ""
    return DoctorCheck("target torch", status, f"{t.prefix}{came}: {detail}", fix)


def check_strays(t: target.Target) -> list[DoctorCheck]:
    """Stray ``libMIOpen.so*`` names beside each loaded libMIOpen (swap.strays): in a TheRock lib dir
    the preload loads the first sorted name, so a stray there FAILs (apply refuses it); elsewhere
    the linker loads by SONAME and a stray is a WARN."""
    out = []
    for lib in t.report.loaded("miopen"):
        found, preload = strays.scan(lib.path, lib.soname) if not lib.deleted else ((), False)
        if found:
            out.append(DoctorCheck(
                "stray files", FAIL if preload else WARN,
                f"{len(found)} beside {lib.path}: " + "; ".join(f"{s.path}: {s.why(preload)}" for s in found),
                f"remove them, or let `rocmbuild apply {strays.FLAG}` move them into its backups"))
    return out


def check_cuda(t: target.Target) -> list[DoctorCheck]:
    """A CUDA target's facts in place of ROCm's: no ROCm needed, the CUDA device torch sees."""
    r = t.report
    out = [DoctorCheck("ROCm", OK, f"not checked: the target's torch is a CUDA {r.cuda} build (cuDNN)")]
    if r.cuda_available:
        out.append(DoctorCheck("CUDA device", OK, "torch.cuda.is_available() is True"))
    else:
        out.append(DoctorCheck("CUDA device", WARN, "torch.cuda.is_available() is False: no CUDA GPU visible",
                               "swapping and verifying cuDNN work without one; the smoke suite is then skipped "
                               "(ROCMBUILD_SMOKE_DEVICE=cpu runs it on the CPU)"))
    return out


LONG_BUILDS = ("miopen",)  # recipes whose build takes an hour: a retry without a compiler cache hurts


def check_launcher_for(recipe) -> DoctorCheck | None:
    """A recipe that leaves the launcher to rocmbuild (``auto``): ccache found is ok; missing, a
    long recipe (MIOpen: its library or its name) gets a warning; else nothing to say."""
    if not pipeline.auto_launcher(recipe):
        return None
    path = runner.which(pipeline.AUTO_LAUNCHER)
    if path:
        return DoctorCheck("compiler cache", OK, f"ccache ({path}); its cache: $ROCMBUILD_HOME/ccache")
    names = [recipe.name, *recipe.install.libraries]
    if not any(long in n.lower() for n in names for long in LONG_BUILDS):
        return None
    return DoctorCheck("compiler cache", WARN, f"ccache is not installed: a rebuild of {recipe.name} with any "
                       "changed input recompiles every file (an hour for MIOpen)",
                       "install ccache (apt install ccache); rocmbuild uses it by itself ([build] launcher = \"auto\")")


def no_build_reason(recipe, cache_only: bool) -> str | None:
    """Why this host compiles nothing (None: it may build): a cache-only host, a prebuilt recipe."""
    if cache_only:
        return "--require-cache: this host only takes built artifacts from a cache, it never compiles"
    if recipe is not None and recipe.build.prebuilt:
        return f"recipe '{recipe.name}' is prebuilt: its archive is unpacked, nothing is compiled"
    return None


def not_needed(checks: list[DoctorCheck], why: str) -> list[DoctorCheck]:
    """The build-only checks of a host that builds nothing: a missing tool warns (never fails),
    saying why it is not needed; what is there stays ok."""
    return [replace(c, status=WARN, detail=f"{c.detail} (not needed: {why})",
                    fix=f"only to build here: {c.fix}" if c.fix else "") if c.status == FAIL else c for c in checks]


def run(recipe=None, env: str | None = None, python: str | None = None, *, timeout: float = 300,
        cache_only: bool = False) -> list[DoctorCheck]:
    """Every check, in a stable order; ROCm and the AMD GPU only for a ROCm target (or none) and a
    recipe that is not cuDNN's. A host that builds nothing (``cache_only``, a prebuilt recipe) needs
    no compiler, cmake or ROCm: their failures are warnings (:func:`not_needed`)."""
    tchecks, t = _discover(env, python, timeout)
    cuda = (t is not None and t.report.backend == "cudnn") or (
        t is None and recipe is not None and recipe.verify.encoding == "cudnn")
    checks = [check_git(), check_cmake(), check_build_tool(), *check_compilers()]
    archs = [] if cuda else gpu.detect()
    values = variables.resolve()
    checks += (check_cuda(t) if t is not None else [DoctorCheck("ROCm", OK, f"not needed: recipe '{recipe.name}' "
                                                                "is a cuDNN (CUDA) library")]) if cuda else \
        [*check_rocm(), check_gpu(archs), *check_gpu_targets(recipe, archs)]
    why = no_build_reason(recipe, cache_only)
    checks = not_needed(checks, why) if why else checks
    checks += [check_disk("cache disk", cache_home(), CACHE_FAIL, CACHE_WARN, "source clones and build trees")]
    checks += tchecks
    if not cuda:  # every recipe variable, as the recipe's build would resolve it here
        found = variable_checks(values, list(variables.NAMES), build_variables(recipe) if recipe else set())
        checks += not_needed(found, why) if why else found
    if recipe is not None:  # [requires]: what building it needs (the build checks them before fetching)
        required = check_requirements(recipe, values, with_variables=cuda)
        checks += not_needed(required, why) if why else required
        checks += [c for c in (check_launcher_for(recipe),) if c is not None and why is None]
    return checks


def failed(checks) -> list[DoctorCheck]:
    return [c for c in checks if c.status == FAIL]


install_line = hints.install_line  # the failed checks' install commands as one line
