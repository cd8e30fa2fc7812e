"""A non-editable install (a real wheel, installed into a real venv) finds the bundled recipes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{r.stdout}\n{r.stderr}")
    (whl,) = out.glob("rocmbuild-*.whl")
    return whl


def test_wheel_ships_recipes_beside_patches(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "rocmbuild/recipes/miopen-develop.toml" in names
    assert "rocmbuild/recipes/miopen-3.5.1.toml" in names
    assert any(n.startswith("rocmbuild/patches/") for n in names)  # patches/<recipe>/ sit beside recipes/


def test_installed_wheel_finds_its_recipes(wheel, tmp_path):
    venv = tmp_path / "venv"
    # the venv sees this interpreter's packages (the runtime deps); rocmbuild itself comes from the wheel
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True, capture_output=True)
    # without this checkout on PYTHONPATH (as the suite is often run), or it would shadow the wheel
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(venv / "bin" / "rocmbuild"), "recipes", "--json"], capture_output=True, text=True,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    found = {x["name"]: x["path"] for x in json.loads(r.stdout)["recipes"]}
    assert "miopen-develop" in found and "miopen-3.5.1" in found
    assert str(venv) in found["miopen-develop"]  # from the installed package, not from this checkout
    r = subprocess.run([str(venv / "bin" / "rocmbuild"), "show", "miopen-3.5.1", "--json"], capture_output=True,
                       text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["recipe"]["verify"]["version"] == "3.5.1"
