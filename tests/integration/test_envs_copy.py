"""``make_venv`` copies a template venv (tests/support/envs.py): the copy is the tree that
``python -m venv --without-pip`` makes at the same path, byte for byte, and works as a venv."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from tests.support import envs


def tree(root: Path) -> dict[str, tuple]:
    """Every path under ``root``: (kind, mode, link text or bytes)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            what = (os.readlink(p) if stat.S_ISLNK(st.st_mode) else p.read_bytes() if stat.S_ISREG(st.st_mode) else None)
            out[str(p.relative_to(root))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), what)
    return out


def test_the_copy_is_what_venv_makes_at_that_path(tmp_path):
    root = tmp_path / "envs" / "my-env.1"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    made = tree(root)
    shutil.rmtree(root)
    site = envs.make_venv(root)
    assert tree(root) == made
    assert site == root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert str(root) in (root / "bin" / "activate").read_text() and "venvtemplate" not in (root / "pyvenv.cfg").read_text()
    done = subprocess.run([str(root / "bin" / "python"), "-c", "import sys; print(sys.prefix, sys.base_prefix != sys.prefix)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(root), "True"]


def test_a_path_venv_would_write_otherwise_gets_a_real_venv(tmp_path):
    root = tmp_path / "an env"  # a space: venv writes it as it is, the template's replace could differ
    envs.make_venv(root)
    assert f'VIRTUAL_ENV="{root}"' in (root / "bin" / "activate").read_text()
    assert "venvtemplate" not in (root / "pyvenv.cfg").read_text()
