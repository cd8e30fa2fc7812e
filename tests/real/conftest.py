"""The real PyTorch: the default PyPI ``torch`` wheel (a CUDA build, about 4.5 GB with its nvidia
wheels) in a venv made once and cached under the user's cache dir, plus real cuDNN library sets
(the PyPI ``nvidia-cudnn-cu13`` wheels of other versions) to swap under it. It imports and answers
``torch.backends.cudnn.version()`` without a GPU.

Decisions:
* The venv is made at ``$XDG_CACHE_HOME/rocmbuild-tests/torch-<version>`` (else ``~/.cache``) under
  a temp name and renamed into place when pip finished, so a broken install is never reused.
  The first run downloads about 4.5 GB (10 minutes here); later runs reuse it.
* Tests never change the cached venv: each gets a hardlink copy (``cp -al``, seconds). rocmbuild
  replaces files by rename (a new inode), so the cached venv's files are never written; a test that
  must replace a file by hand does it by rename too.
* A failed install fails the session with pip's last lines: it is the proving ground, not optional.
  ``ROCMBUILD_SKIP_REAL_TORCH=1`` skips these tests (for a quick local run; CI never sets it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TORCH_VERSION = "2.14.1"  # pulls nvidia-cudnn-cu13 9.24.0.43: compiled and runtime cuDNN 9.24.0
CUDNN_WHEELS = {"9.25.1": "9.25.1.1", "9.23.2": "9.23.2.1"}


def cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "rocmbuild-tests"


def _run(argv: list[str], what: str, timeout: float) -> None:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} did not finish within {timeout:.0f} s: {' '.join(argv)}", pytrace=False)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-25:])
        pytest.fail(f"{what} failed (exit {r.returncode}): {' '.join(argv)}\n{tail}\n"
                    "these tests need PyPI (torch and the nvidia wheels, about 4.5 GB once); "
                    "set ROCMBUILD_SKIP_REAL_TORCH=1 to skip them", pytrace=False)


def ensure_torch_venv() -> Path:
    """The cached venv with the real torch (made when missing); returns its root."""
    root = cache_root() / f"torch-{TORCH_VERSION}"
    if (root / "bin" / "python").exists() and (root / ".rocmbuild-test-ready").exists():
        return root
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", str(tmp)], "making the venv for the real torch", 300)
    _run([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          f"torch=={TORCH_VERSION}"], f"pip install torch=={TORCH_VERSION}", 3600)
    (tmp / ".rocmbuild-test-ready").write_text(TORCH_VERSION + "\n")
    shutil.rmtree(root, ignore_errors=True)
    os.replace(tmp, root)  # a venv's scripts name their dir, but we only ever run bin/python
    return root


def ensure_cudnn_wheel(version: str) -> Path:
    """The PyPI nvidia-cudnn-cu13 wheel for ``version`` (e.g. "9.25.1"), downloaded once."""
    pinned = CUDNN_WHEELS[version]
    d = cache_root() / "wheels"
    found = sorted(d.glob(f"nvidia_cudnn_cu13-{pinned}-*.whl"))
    if not found:
        d.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
              f"nvidia-cudnn-cu13=={pinned}", "-d", str(d)], f"pip download nvidia-cudnn-cu13=={pinned}", 1800)
        found = sorted(d.glob(f"nvidia_cudnn_cu13-{pinned}-*.whl"))
    assert found, f"no nvidia-cudnn-cu13 {pinned} wheel in {d}"
    return found[-1]


@pytest.fixture(scope="session")
def real_torch_venv() -> Path:
    if os.environ.get("ROCMBUILD_SKIP_REAL_TORCH") == "1":
        pytest.skip("ROCMBUILD_SKIP_REAL_TORCH=1")
    return ensure_torch_venv()


@pytest.fixture(scope="session")
def cudnn_wheel(real_torch_venv):
    return ensure_cudnn_wheel


@pytest.fixture
def torch_env(real_torch_venv, tmp_path) -> Path:
    """A private copy of the real-torch venv (hardlinks: nothing of the cached venv is written)."""
    dst = tmp_path / "tv"
    subprocess.run(["cp", "-al", str(real_torch_venv), str(dst)], check=True)
    return dst
