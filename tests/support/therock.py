"""TheRock's wheels in miniature: a stand-in ``rocm_sdk`` package and the libraries package it
preloads MIOpen from, in both generations, under the fake torch (tests/support/fake_torch.py).

Written for these tests from TheRock's logic (``build_tools/packaging/python/templates/rocm/src/
rocm_sdk/__init__.py`` and ``_dist_info.py``), not copied:

* ``rocm_sdk.find_libraries(*shortnames)``: each shortname's package (``libraries``: per-family
  ``_rocm_sdk_libraries_<family>``, the family from ``ROCM_SDK_TARGET_FAMILY`` else the default;
  multi-arch ``_rocm_sdk_libraries``) is imported, and the path is
  ``sorted(<package>/lib.glob("libMIOpen.so*"))[0]``;
* ``rocm_sdk.initialize_process(preload_shortnames=[...], env_override=True)`` dlopens each with
  ``RTLD_GLOBAL`` (once per shortname), then the shortnames ``ROCM_SDK_PRELOAD_LIBRARIES`` names
  (split on ``,`` and ``;``);
* ``torch/_rocm_init.py`` calls it with ``preload_shortnames``, and the fake torch's
  ``__init__`` runs it first with PyTorch's idiom (``from . import _rocm_init`` guarded by
  ``ImportError``). Its ``_C`` then opens ``libMIOpen.so.1`` by SONAME, as torch's
  ``libtorch_hip.so`` NEEDS it: the dynamic linker hands back the preloaded library.

The libraries package's ``lib/`` holds only ``libMIOpen.so.1``, a plain file (TheRock's runtime
wheels carry SONAME files, no links); the multi-arch one also has a device wheel's overlay
(``share/miopen/db/gfx1151.kdb`` and a ``rocm_sdk_device_gfx1151`` dist-info RECORD naming it).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.envs import Env, make_venv, stage_library
from tests.support.fake_torch import DEFAULT_KNOBS, write_torch

GENERATIONS = ("per-family", "multi-arch")
FAMILY = "gfx1151"

_DIST_INFO = r'''
"""Stand-in of TheRock's rocm_sdk._dist_info for rocmbuild's tests."""
import os

GENERATION = {generation!r}
DEFAULT_TARGET_FAMILY = {family!r}
# shortname -> (package logical name, so pattern, relpath)
ALL_LIBRARIES = {{"miopen": ("libraries", "libMIOpen.so*", "lib")}}


def determine_target_family():
    return os.getenv("ROCM_SDK_TARGET_FAMILY") or DEFAULT_TARGET_FAMILY


def py_package_name(logical):
    if logical != "libraries":
        raise ModuleNotFoundError("no package " + logical + " in this stand-in")
    if GENERATION == "per-family":
        return "_rocm_sdk_libraries_" + determine_target_family()
    return "_rocm_sdk_libraries"
'''

_SDK_INIT = r'''
"""Stand-in of TheRock's rocm_sdk (find_libraries, preload_libraries, initialize_process)."""
import ctypes
import importlib
import os
import re
from pathlib import Path

from . import _dist_info

_ALL_CDLLS = {}


def find_libraries(*shortnames):
    paths = []
    for shortname in shortnames:
        try:
            logical, pattern, relpath = _dist_info.ALL_LIBRARIES[shortname]
        except KeyError:
            raise ModuleNotFoundError("Unknown rocm library '%s'" % shortname)
        module = importlib.import_module(_dist_info.py_package_name(logical))
        where = Path(module.__file__).parent / relpath
        matching = sorted(where.glob(pattern))
        if not matching:
            raise FileNotFoundError("Could not find rocm library '%s' at path '%s'" % (shortname, where))
        paths.append(matching[0])  # "Take whichever sorted first."
    return paths


def preload_libraries(*shortnames, rtld_global=True):
    mode = ctypes.RTLD_GLOBAL if rtld_global else ctypes.RTLD_LOCAL
    for shortname, path in zip(shortnames, find_libraries(*shortnames)):
        if shortname not in _ALL_CDLLS:
            _ALL_CDLLS[shortname] = ctypes.CDLL(str(path), mode=mode)


def initialize_process(*, preload_shortnames=None, rtld_global=True, env_override=True, **kwargs):
    if preload_shortnames:
        preload_libraries(*preload_shortnames, rtld_global=rtld_global)
    if env_override:
        extra = os.getenv("ROCM_SDK_PRELOAD_LIBRARIES")
        if extra is not None:
            names = [s.strip() for s in re.split("[,;]", extra) if s.strip()]
            if names:
                try:
                    preload_libraries(*names, rtld_global=rtld_global)
                except Exception as e:
                    raise RuntimeError("Could not preload libraries from environment variable "
                                       "ROCM_SDK_PRELOAD_LIBRARIES='%s'" % extra) from e
'''

_ROCM_INIT = '''
def initialize():
    import rocm_sdk
    rocm_sdk.initialize_process(preload_shortnames={shortnames!r})
'''


def package_dir(site: Path, generation: str) -> Path:
    """The libraries package's directory for a generation."""
    if generation not in GENERATIONS:
        raise ValueError(f"unknown TheRock generation {generation!r} ({', '.join(GENERATIONS)})")
    return site / (f"_rocm_sdk_libraries_{FAMILY}" if generation == "per-family" else "_rocm_sdk_libraries")


def write_rocm_sdk(site: Path, generation: str) -> None:
    sdk = site / "rocm_sdk"
    sdk.mkdir(parents=True, exist_ok=True)
    (sdk / "__init__.py").write_text(_SDK_INIT.lstrip())
    (sdk / "_dist_info.py").write_text(_DIST_INFO.format(generation=generation, family=FAMILY).lstrip())


def _device_overlay(site: Path, pkg: Path) -> None:
    """What a ``rocm-sdk-device-gfx1151`` wheel overlays into the multi-arch package dir."""
    db = pkg / "share/miopen/db"
    db.mkdir(parents=True, exist_ok=True)
    (db / f"{FAMILY}.kdb").write_bytes(b"kernel database stand-in\n")
    info = site / f"rocm_sdk_device_{FAMILY}-7.12.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "RECORD").write_text(f"{pkg.name}/share/miopen/db/{FAMILY}.kdb,,\n")


def make_therock_env(root: Path, *, lib_dir: Path, generation: str = "per-family", compile_version: str = "3.5.1",
                     preload: tuple[str, ...] = ("miopen",), **knobs) -> Env:
    """A venv at ``root``: TheRock's libraries package (``generation``) holding a copy of
    ``lib_dir``'s libMIOpen as ``lib/libMIOpen.so.1``, the stand-in ``rocm_sdk``, and a fake torch
    whose ``_rocm_init.py`` preloads ``preload`` through it."""
    root = Path(root)
    site = make_venv(root)
    pkg = package_dir(site, generation)
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    libfile = stage_library(lib_dir, pkg / "lib", real="libMIOpen.so.1", links=())
    if generation == "multi-arch":
        _device_overlay(site, pkg)
    write_rocm_sdk(site, generation)
    torch_dir = site / "torch"
    config = dict(DEFAULT_KNOBS)
    config.update(compile_version=compile_version, load="libMIOpen.so.1", **knobs)  # by SONAME: the preloaded one
    write_torch(torch_dir, config)
    (torch_dir / "_rocm_init.py").write_text(_ROCM_INIT.format(shortnames=list(preload)).lstrip())
    return Env(prefix=root, python=root / "bin" / "python", site_packages=site, torch_dir=torch_dir, libfile=libfile)


def preload_path(env: Env) -> str:
    """What the stand-in's ``find_libraries("miopen")`` answers in ``env`` (a fresh process)."""
    import subprocess

    code = "import json, rocm_sdk; print(json.dumps(str(rocm_sdk.find_libraries('miopen')[0])))"
    done = subprocess.run([str(env.python), "-c", code], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)
