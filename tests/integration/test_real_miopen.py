"""A real MIOpen answers where it reads its databases, and rocmbuild says the same (optional).

Set ``ROCMBUILD_TEST_REAL_MIOPEN`` to the install prefix of a real MIOpen built from source
(``../shared/real-miopen.md``: MIOpen 2.17.0, tag ``rocm-5.2.3``, with Debian's ROCm 5.2.3
packages; about an hour on 2 cores, so not in CI, which skips this file). A small C++ program
(``tests/support/miopen_paths.cpp``) dlopens the library the way a process maps it and calls
MIOpen's own ``GetSystemDbPath``, ``GetUserDbPath``, ``GetUserDbSuffix`` and ``GetCachePath``
(exported by a release build; none touches a GPU). Each test puts that answer beside what
``rocmbuild status`` reports for a fake torch that loads the same real file, or beside the rule
``swap/dbfiles.py`` and ``swap/dbreport.py`` are built on (docs/miopen.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rocmbuild.swap import plan
from rocmbuild.swap.dbfiles import db_dir_of, is_db_name
from tests.integration.test_transaction import facts, make_artifact
from tests.support.cli import rb
from tests.support.envs import make_env

REAL = os.environ.get("ROCMBUILD_TEST_REAL_MIOPEN", "")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not REAL, reason="set ROCMBUILD_TEST_REAL_MIOPEN to the install prefix of a real MIOpen build (real-miopen.md)")]
HELPER = Path(__file__).resolve().parents[1] / "support" / "miopen_paths.cpp"


@pytest.fixture(scope="module")
def real() -> Path:
    prefix = Path(REAL)
    assert (prefix / "lib" / "libMIOpen.so.1.0").is_file(), f"no lib/libMIOpen.so.1.0 under {prefix}"
    return prefix


@pytest.fixture(scope="module")
def ask(tmp_path_factory):
    """``ask(library, **env) -> {key: value}``: the real library's own answers (miopen_paths.cpp)."""
    exe = tmp_path_factory.mktemp("helper") / "miopen_paths"
    subprocess.run([shutil.which("c++") or "c++", "-std=c++17", "-O1", "-o", str(exe), str(HELPER), "-ldl"],
                   check=True, capture_output=True, timeout=300)
    home = tmp_path_factory.mktemp("home")

    def run(library: Path, **env: str) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith("MIOPEN_")}
        e.update(HOME=str(home), **env)
        r = subprocess.run([str(exe), str(library)], capture_output=True, text=True, env=e, timeout=120)
        assert r.returncode == 0, r.stderr
        out = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
        missing = [line[:-1] for line in r.stdout.splitlines() if line.endswith("!")]
        assert not missing, f"{library} does not export {missing}"
        return out

    run.home = home  # type: ignore[attr-defined]
    return run


def _tweak(real: Path) -> str:
    text = (real / "include" / "miopen" / "version.h").read_text()
    return re.search(r"#define MIOPEN_VERSION_TWEAK (\S*)", text).group(1)  # type: ignore[union-attr]


def _status(env, **extra: str) -> dict:
    r = rb("status", "--env", str(env.prefix), "--json", env=extra or None, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("layout", ["conda", "wheel", "therock"])
def test_the_system_db_dir_is_beside_the_mapped_file_as_status_says(real, ask, tmp_path, layout):
    env = make_env(tmp_path / layout, layout=layout, lib_dir=real / "lib", compile_version="2.17.0")
    said = ask(Path(env.knobs()["load"]))
    assert said["version"] == "2.17.0"
    assert os.path.normpath(said["system_db"]) == str(db_dir_of(env.libfile.parent))
    data = _status(env)
    assert data["databases"]["db_dir"] == os.path.normpath(said["system_db"])
    assert data["torch"]["version_int"] == 2017000  # the real library answered through the fake torch


def test_through_a_symlink_the_dir_is_beside_the_symlinks_target(real, ask, tmp_path):
    """Why rocmbuild places the target's own copy: a link into another tree reads that tree's DBs."""
    env = make_env(tmp_path / "env", layout="conda", lib_dir=real / "lib", compile_version="2.17.0")
    env.libfile.unlink()
    env.libfile.symlink_to(real / "lib" / "libMIOpen.so.1.0")
    said = ask(env.prefix / "lib" / "libMIOpen.so.1")
    assert os.path.normpath(said["system_db"]) == str(real / "share" / "miopen" / "db")
    assert _status(env)["databases"]["db_dir"] == str(real / "share" / "miopen" / "db")
    compat = real / "miopen" / "lib" / "libMIOpen.so"  # the install's own compatibility link
    if compat.is_symlink():
        assert os.path.normpath(ask(compat)["system_db"]) == str(real / "share" / "miopen" / "db")


def test_miopen_system_db_path_replaces_the_dir_as_it_is(real, ask, tmp_path):
    env = make_env(tmp_path / "env", layout="conda", lib_dir=real / "lib", compile_version="2.17.0")
    team = tmp_path / "team-db"
    team.mkdir()
    said = ask(env.libfile, MIOPEN_SYSTEM_DB_PATH=str(team))
    assert said["system_db"] == str(team) and said["system_cache"] == str(team)
    db = _status(env, MIOPEN_SYSTEM_DB_PATH=str(team))["databases"]
    assert db["db_dir"] == str(team) and "MIOPEN_SYSTEM_DB_PATH" in db["notes"][0]


def test_the_user_kernel_cache_carries_the_tweak_and_a_custom_dir_is_taken_as_it_is(real, ask, tmp_path):
    """2.17 (like every MIOpen up to 3.3): ``~/.cache/miopen/<M.m.p.tweak>``, but
    ``MIOPEN_CUSTOM_CACHE_DIR`` exactly, shared by every build: what dbreport reports."""
    tweak = _tweak(real)
    assert tweak, "the build has no tweak: every tarball build would share one cache dir"
    said = ask(real / "lib" / "libMIOpen.so.1.0")
    home = ask.home
    assert said["user_cache"] == f"{home}/.cache/miopen/2.17.0.{tweak}"
    assert said["user_db"] == f"{home}/.config/miopen/" and said["user_db_suffix"] == f"HIP.2_17_0_{tweak}"
    custom = tmp_path / "shared-cache"
    assert ask(real / "lib" / "libMIOpen.so.1.0", MIOPEN_CUSTOM_CACHE_DIR=str(custom))["user_cache"] == str(custom)
    assert custom.is_dir()  # MIOpen made it: no version dir below it


def test_every_installed_database_is_a_name_the_swap_moves_aside(real, fixture_libs, tmp_path):
    shipped = sorted(p.name for p in (real / "share" / "miopen" / "db").iterdir())
    assert shipped, "the install has no share/miopen/db files"
    assert [n for n in shipped if not is_db_name(n)] == []
    prefix = tmp_path / "prefix"
    shutil.copytree(real / "lib", prefix / "lib", symlinks=True)
    shutil.copytree(real / "share" / "miopen" / "db", prefix / "share" / "miopen" / "db")
    art = make_artifact(tmp_path / "artifact", fixture_libs("3.5.1"), "3.5.1")  # provides gfx1151.db.txt only
    removes = {Path(a.path).name for a in plan.make(art, facts(prefix)).actions if a.kind == "remove" and a.role == "db"}
    assert removes == set(shipped)
