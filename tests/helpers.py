"""Builders for the real things the tests use: a monorepo git repository holding the miniature
MIOpen of ``tests/fixtures/miopen``, and real shared libraries built from it with cmake.

Nothing here is mocked: git, cmake and the C compiler run for real.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import git

FIXTURES = Path(__file__).parent / "fixtures"
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


@dataclass(frozen=True)
class Monorepo:
    path: Path
    url: str  # file:// URL
    c1: str  # develop, 3.5.1, tag rocm-7.1.0
    c_release: str  # release/rocm-rel-7.0 tip, 3.5.0
    c_develop: str  # develop tip, 3.6.0
    c_fix: str  # feature/fix tip: marker "fixed" (a cherry-pick candidate)


def _commit(repo: git.Repo, message: str) -> str:
    repo.git.add("-A")
    repo.git.commit("-q", "-m", message)
    return repo.head.commit.hexsha


def make_monorepo(root: Path, big_mb: int = 2) -> Monorepo:
    """A repo laid out like ROCm/rocm-libraries: projects/miopen beside other large directories.

    Branches: develop (3.5.1 at tag rocm-7.1.0, then 3.6.0), release/rocm-rel-7.0 (3.5.0) and
    feature/fix (changes the library's marker string from "stock" to "fixed").
    """
    root.mkdir(parents=True, exist_ok=True)
    repo = git.Repo.init(root, initial_branch="develop")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "Fixture")
        cw.set_value("user", "email", "fixture@example.invalid")
        cw.set_value("commit", "gpgsign", "false")
        # let shallow/partial clients fetch any commit by sha (as GitHub does)
        cw.set_value("uploadpack", "allowAnySHA1InWant", "true")
        cw.set_value("uploadpack", "allowFilter", "true")
    shutil.copytree(MIOPEN_SRC, root / "projects" / "miopen")
    (root / "shared" / "ctest").mkdir(parents=True)
    (root / "shared" / "ctest" / "README").write_text("shared test helpers\n")
    (root / "README.md").write_text("fixture monorepo\n")
    for name in ("rocblas", "hipblaslt"):
        d = root / "projects" / name
        d.mkdir(parents=True)
        # incompressible content, so the "large other projects" really are large in a clone
        (d / "blob.bin").write_bytes(os.urandom(big_mb * 1024 * 1024))
    c1 = _commit(repo, "miopen 3.5.1")
    repo.create_tag("rocm-7.1.0")

    repo.git.checkout("-q", "-b", "release/rocm-rel-7.0")
    set_version(root / "projects" / "miopen", "3.5.0")
    c_release = _commit(repo, "release 3.5.0")

    repo.git.checkout("-q", "-b", "feature/fix", c1)
    set_marker(root / "projects" / "miopen", "fixed")
    c_fix = _commit(repo, "fix: batchnorm on gfx1151")

    repo.git.checkout("-q", "develop")
    set_version(root / "projects" / "miopen", "3.6.0")
    c_develop = _commit(repo, "miopen 3.6.0")
    return Monorepo(root, root.as_uri(), c1, c_release, c_develop, c_fix)


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
