"""The target's names stay: every layout (conda, wheel, system, therock) gets the new bytes under
the name its own chain resolves to, no link moves, MIOpen's ``miopen/lib`` compatibility link is
never mapped, a library set is swapped as one transaction, and rollback is byte-identical.

Real venvs whose fake torch dlopens a real libMIOpen, the session's real artifacts, real
``python -m rocmbuild`` processes, the real ``ldconfig``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.support.cli import rb
from tests.support.envs import LAYOUTS, stage_library
from tests.support.project import MIOPEN_SRC
from tests.support.recipes import write_fixture_recipe
from tests.support.snapshots import full_listing, inodes, snapshot

pytestmark = pytest.mark.slow


def _json(r):
    return json.loads(r.stdout)


def _names(d: Path) -> dict[str, str | None]:
    """Each name in ``d``: its link text, or None for a file."""
    return {p.name: (os.readlink(p) if p.is_symlink() else None) for p in d.iterdir()}


def _chain_resolves(d: Path, stem: str, placed: Path) -> None:
    for p in d.iterdir():
        if p.name.startswith(stem + ".so"):
            assert p.resolve() == placed.resolve(), f"{p} leads to {p.resolve()}, not {placed}"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_keeps_the_targets_names_and_rolls_back_byte_identical(txn_home, target_env, layout):
    env = target_env("3.5.0", layout=layout, compile_version="3.5.1")
    libdir = env.libfile.parent
    before, ids, names = snapshot(env.prefix), inodes(env.prefix), _names(libdir)
    art = txn_home.artifacts["mini"]
    # the artifact carries MIOpen's compatibility link, outside its lib dir
    lib = art.manifest.libraries[0]
    assert "miopen/lib/libMIOpen.so" in lib.other_links and "miopen/lib/libMIOpen.so" not in lib.links
    dry = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    text = dry.stdout + dry.stderr
    assert f"lib/libMIOpen.so.1.0 -> {env.libfile}" in text and "not a lib-dir name" in text
    assert f"({layout} layout" in text
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    data = _json(r)
    assert data["plan"]["layout"] == layout and Path(data["plan"]["library"]) == env.libfile
    assert env.libfile.read_bytes() == art.file("lib/libMIOpen.so.1.0").read_bytes()
    assert _names(libdir) == names  # no name added, no link re-pointed
    _chain_resolves(libdir, "libMIOpen", env.libfile)
    s = _json(rb("status", "--env", env.prefix, "--json"))
    assert [x["layout"] for x in s["libraries"] if x["kind"] == "miopen"] == [layout]
    if layout == "system":  # what a package install runs: it must find nothing to change
        listing = full_listing(env.prefix)
        subprocess.run(["ldconfig", "-n", str(libdir)], check=True, capture_output=True)
        assert full_listing(env.prefix) == listing
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids


def test_a_link_the_plan_would_leave_pointing_elsewhere_is_refused(txn_home, target_env):
    env = target_env("3.5.0", layout="conda", compile_version="3.5.1")
    dev = env.prefix / "lib/libMIOpen.so"
    dev.unlink()
    dev.symlink_to("libMIOpen.so.0.9")  # a stale dev link: dangling, and would stay so
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)
    assert r.returncode == 2
    assert "libMIOpen.so would lead to dangling" in r.stderr and "nothing was changed" in r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids


def _set_recipe(tmp_path: Path) -> str:
    """The fixture project built as a set, from a tarball source (no git process to outlive it)."""
    tb = tmp_path / "miopen-set.tar.gz"
    with tarfile.open(tb, "w:gz") as tf:
        tf.add(MIOPEN_SRC, arcname="MIOpen-3.5.1")
    sha = hashlib.sha256(tb.read_bytes()).hexdigest()
    return str(write_fixture_recipe(tmp_path / "recipes", "mini-set", tarball=str(tb), sha256=sha, ref=None,
                                    subdir=None, jobs=2, defines={"MIOPEN_FIXTURE_SET": "ON"},
                                    libraries=["libMIOpen*"]))


def test_a_library_set_is_swapped_as_one_transaction(txn_home, target_env, fixture_libs, tmp_path):
    """``libMIOpen*``: libMIOpen (mapped by torch), libMIOpen_ops (beside it, not mapped yet) and
    libMIOpen_graph (new to the target) in one transaction; one rollback restores all three."""
    recipe = _set_recipe(tmp_path)
    env = target_env("3.5.0", layout="conda", compile_version="3.5.1")
    ops = stage_library(fixture_libs("3.5.0"), env.prefix / "lib", real="libMIOpen_ops.so.1.0",
                        links=(("libMIOpen_ops.so.1", "libMIOpen_ops.so.1.0"),))
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    assert rb("build", recipe, timeout=600).returncode == 0
    r = rb("apply", recipe, "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    data = _json(r)
    lib = env.prefix / "lib"
    tree = Path(data["artifact"]) / "tree/lib"
    for name in ("libMIOpen.so.1.0", "libMIOpen_ops.so.1.0", "libMIOpen_graph.so.1.0"):
        assert (lib / name).read_bytes() == (tree / name).read_bytes(), name
    assert os.readlink(lib / "libMIOpen_graph.so.1") == "libMIOpen_graph.so.1.0"
    assert not (lib / "libMIOpen_ops.so").exists()  # the target had no such name: not added
    _chain_resolves(lib, "libMIOpen_ops", ops)
    h = _json(rb("history", "--env", env.prefix, "--json"))
    assert [t["verb"] for t in h["transactions"]] == ["apply"]
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
    shutil.rmtree(tmp_path / "recipes")
