"""Fake-torch target environments: real venvs, real shared libraries, the fake ``torch`` package.

A real ``python -m venv --without-pip`` (about 0.2 s), laid out like a conda env or like a
PyTorch wheel, holding a copy of a real libMIOpen build that its ``torch`` really loads. Nothing
is mocked at the process level. The API (``make_env``, ``Env``, the layouts and knobs) is
described in docs/testing.md; other tests and the benchmarks rely on it.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.support.fake_torch import DEFAULT_KNOBS, write_knobs, write_torch

LIB_REAL = "libMIOpen.so.1.0"
SYSTEM_REAL = "libMIOpen.so.1.0.70002"
THEROCK_LIB = "_rocm_sdk_libraries_gfx1151/lib"
LAYOUTS = ("conda", "wheel", "system", "therock")


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


#: where a venv is copied from a template rather than made: what venv writes unquoted
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._+/-]+")
_TEMPLATES: dict[str, Path] = {}


def _template(py: str) -> Path:
    """A ``python -m venv --without-pip`` made once per process and base python, under a
    directory of its own (removed at exit), its name a token found nowhere else in its files."""
    if py not in _TEMPLATES:
        home = Path(tempfile.mkdtemp(prefix="rb-venv-templates-"))
        atexit.register(shutil.rmtree, home, True)
        t = home / f"venvtemplate{uuid.uuid4().hex}"
        subprocess.run([py, "-m", "venv", "--without-pip", str(t)], check=True, capture_output=True)
        _TEMPLATES[py] = t
    return _TEMPLATES[py]


def make_venv(root: Path, base_python: str | os.PathLike | None = None) -> Path:
    """``python -m venv --without-pip root``; returns the site-packages directory.

    Decision: the venv is a copy of one made once per process (symlinks kept), with the template's
    path and name replaced by ``root``'s in its text files (``pyvenv.cfg``, the activate scripts)
    as venv itself writes them: the same tree, byte for byte (tests/integration/test_envs_copy.py),
    in milliseconds instead of a ``python -m venv`` (0.2-0.9 s) per env. A ``root`` whose path venv
    would write differently (anything but letters, digits and ``._+/-``), or one that exists,
    gets a real ``python -m venv``."""
    py = str(base_python or sys.executable)
    root = Path(root)
    if _PLAIN_PATH.fullmatch(str(root)) and not os.path.lexists(root) and root.is_absolute():
        t = _template(py)
        shutil.copytree(t, root, symlinks=True)
        for f in [root / "pyvenv.cfg", *(p for p in (root / "bin").iterdir() if not p.is_symlink())]:
            text = f.read_text()
            new = text.replace(str(t), str(root)).replace(t.name, root.name)
            if new != text:
                f.write_text(new)
    else:
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
    elif layout == "system":  # ROCm's own packages: /opt/rocm/lib, the full version as file name
        libfile = stage_library(lib_dir, root / "opt/rocm/lib", real=SYSTEM_REAL,
                                links=(("libMIOpen.so.1", SYSTEM_REAL), ("libMIOpen.so", "libMIOpen.so.1")))
        load = root / "opt/rocm/lib/libMIOpen.so.1"
    elif layout == "therock":  # TheRock's wheels: the SONAME is a plain file, plus a dev link
        libfile = stage_library(lib_dir, site / THEROCK_LIB, real="libMIOpen.so.1",
                                links=(("libMIOpen.so", "libMIOpen.so.1"),))
        load = libfile
    else:
        raise ValueError(f"unknown layout {layout!r} (conda, wheel, system or therock)")
    env = Env(prefix=root, python=root / "bin" / "python", site_packages=site, torch_dir=torch_dir, libfile=libfile)
    if not torch:
        shutil.rmtree(torch_dir, ignore_errors=True)  # no half package (a bare dir imports as a namespace)
    else:
        config = dict(DEFAULT_KNOBS)
        config.update(compile_version=compile_version, hip=hip, load=str(load))
        write_torch(torch_dir, config)
        env.configure(**knobs)
    return env
