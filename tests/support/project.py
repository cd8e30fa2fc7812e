"""The fixture C project (``tests/fixtures/miopen``, a miniature MIOpen) and real builds of it.

Its version and marker string are edited as text (the same regex a recipe reads), and
:func:`build_library` runs the real cmake and C compiler: nothing is mocked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MIOPEN_SRC = FIXTURES / "miopen"

VERSION_RE = re.compile(r"rocm_setup_version\(VERSION [0-9.]+\)")


def set_version(project: Path, version: str) -> None:
    cml = project / "CMakeLists.txt"
    text = cml.read_text()
    cml.write_text(VERSION_RE.sub(f"rocm_setup_version(VERSION {version})", text, count=1))


def set_marker(project: Path, marker: str) -> None:
    src = project / "src" / "miopen.c"
    text = src.read_text()
    src.write_text(re.sub(r'return "[^"]*"; }', f'return "{marker}"; }}', text))


def build_library(version: str, workdir: Path, *, pad_mb: int = 0, marker: str | None = None) -> Path:
    """Build the fixture library at ``version``; returns the staged lib dir holding
    libMIOpen.so.1.0 and its links."""
    src = workdir / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(MIOPEN_SRC, src)
    set_version(src, version)
    if marker:
        set_marker(src, marker)
    bld = workdir / "build"
    stage = workdir / "stage"
    subprocess.run(
        ["cmake", "-S", str(src), "-B", str(bld), "-G", "Unix Makefiles",
         f"-DMIOPEN_FIXTURE_PAD_MB={pad_mb}", "-DCMAKE_INSTALL_PREFIX=/usr/local"],
        check=True, capture_output=True,
    )
    subprocess.run(["cmake", "--build", str(bld)], check=True, capture_output=True)
    env = dict(os.environ, DESTDIR=str(stage))
    subprocess.run(["cmake", "--install", str(bld)], check=True, capture_output=True, env=env)
    return stage / "usr" / "local" / "lib"
