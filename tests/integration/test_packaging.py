"""A non-editable install (a real wheel, installed into a real venv) finds the bundled recipes
and runs the demo from the files it ships."""

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


DEMO_FILES = ["rocmbuild/flows/demo/__init__.py", "rocmbuild/flows/demo/scratch.py", "rocmbuild/flows/demo/demostep.py",
              "rocmbuild/flows/demo/data/miopen-demo.toml", "rocmbuild/flows/demo/data/torch/__init__.py",
              "rocmbuild/flows/demo/data/miopen/CMakeLists.txt", "rocmbuild/flows/demo/data/miopen/src/miopen.c",
              "rocmbuild/flows/demo/data/miopen/include/miopen/miopen.h",
              "rocmbuild/flows/demo/data/miopen/db/gfx1151.db.txt", "rocmbuild/results/demoresult.py"]


def test_wheel_ships_the_demo_and_every_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(DEMO_FILES) <= names, sorted(set(DEMO_FILES) - names)
    # every package of the checkout is in the wheel (a package missing from pyproject's list is not)
    pkg = REPO / "rocmbuild"
    for init in pkg.rglob("__init__.py"):
        rel = init.relative_to(REPO).as_posix()
        assert rel in names, f"{rel} is not in the wheel: add its package to pyproject.toml"


def _install(wheel, venv: Path) -> Path:
    """A venv with the wheel installed; it sees this interpreter's packages (the runtime deps) through
    a ``.pth`` naming its site dirs (``--system-site-packages`` alone would miss them when the tests
    run in a venv themselves). Those dirs' own ``.pth`` files (an editable rocmbuild) are not run,
    so rocmbuild itself comes from the wheel."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "_rocmbuild_test_deps.pth").write_text("".join(f"{p}\n" for p in paths))
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                    str(wheel)], check=True, capture_output=True)
    return venv / "bin" / "rocmbuild"


def test_installed_wheel_runs_the_demo(wheel, tmp_path):
    exe = _install(wheel, tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the wheel's code, not this checkout's
    env["TMPDIR"] = str(tmp_path)
    r = subprocess.run([str(exe), "demo", "--keep", str(tmp_path / "demo"), "--json"], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(r.stdout)
    assert d["failed_step"] is None and [s["name"] for s in d["steps"]][-1] == "rollback"
    # every step ran the installed rocmbuild (the venv's Python, no PYTHONPATH pointing elsewhere)
    logs = (tmp_path / "demo" / "demo.log").read_text()
    assert logs.count(f"$ {tmp_path / 'venv' / 'bin' / 'python'} -m rocmbuild ") == len(d["steps"])
    assert (tmp_path / "demo" / "miopen" / "CMakeLists.txt").read_text() == \
        (REPO / "rocmbuild/flows/demo/data/miopen/CMakeLists.txt").read_text()


def test_installed_wheel_finds_its_recipes(wheel, tmp_path):
    venv = tmp_path / "venv"
    _install(wheel, venv)
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
