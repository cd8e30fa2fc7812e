"""A git repository laid out like ROCm/rocm-libraries, holding the fixture project.

Real git (GitPython), real branches and tags; the other projects are incompressible blobs so
that a full clone really is large. The session fixture in ``tests/conftest.py`` makes it once
and each test gets a copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import git

from tests.support.project import MIOPEN_SRC, set_marker, set_version


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
    repo = init_fixture_repo(root)
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
    repo.close()  # GitPython keeps a `git cat-file` process per Repo until it is closed
    return Monorepo(root, root.as_uri(), c1, c_release, c_develop, c_fix)


def init_fixture_repo(root: Path) -> git.Repo:
    """``git init`` at ``root`` (branch develop) with a fixed identity, no signing, and the
    settings that let shallow/partial clients fetch any commit by sha (as GitHub does)."""
    repo = git.Repo.init(root, initial_branch="develop")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "Fixture")
        cw.set_value("user", "email", "fixture@example.invalid")
        cw.set_value("commit", "gpgsign", "false")
        cw.set_value("uploadpack", "allowAnySHA1InWant", "true")
        cw.set_value("uploadpack", "allowFilter", "true")
    return repo


def run_git(cwd: Path, *args: str) -> str:
    """Plain git in ``cwd`` (a test's own repository), its stdout."""
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True, timeout=60)
    return done.stdout.strip()


def small_repo(path: Path, files: dict[str, str]) -> Path:
    """A one-commit git repository at ``path`` holding ``files`` (name -> text), on branch main."""
    path.mkdir(parents=True)
    run_git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).write_text(text)
    run_git(path, "add", "-A")
    run_git(path, "commit", "-qm", "one")
    return path
