"""MIOpen's system databases are part of the swap (docs/miopen.md, "Which database files a
libMIOpen reads"; swap/dbfiles.py): the old version's DB files that the new artifact does not
replace are moved aside into the transaction's backups, and come back byte-identical (the same
inode) after a rollback and after a crash + recovery. Real files, a real artifact directory, the
crash-injection runner of test_transaction.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rocmbuild import swap as transaction
from rocmbuild.errors import VerifyError
from rocmbuild.swap import plan
from rocmbuild.swap.dbfiles import is_db_name
from tests.integration.test_transaction import RECOVER, RUNNER, Verifier, _py, facts, make_artifact
from tests.support.envs import stage_library
from tests.support.snapshots import inodes, snapshot

pytestmark = pytest.mark.slow

OLD = {  # what the old version left in share/miopen/db
    "gfx1151.kdb": b"SQLite format 3\0old precompiled kernels of MIOpen 3.5.0\n",
    "gfx1151_40.HIP.fdb.txt": b"old find db\n",
    "gfx1151.db.txt": b"old perf db\n",  # the artifact provides this name: replaced normally
    "README": b"not a database: left alone\n",
}


@pytest.fixture
def art(fixture_libs, tmp_path):
    return make_artifact(tmp_path / "artifact", fixture_libs("3.5.1"), "3.5.1")


@pytest.fixture
def prefix(fixture_libs, tmp_path) -> Path:
    p = tmp_path / "prefix"
    stage_library(fixture_libs("3.5.0"), p / "lib")
    db = p / "share/miopen/db"
    db.mkdir(parents=True)
    for name, data in OLD.items():
        (db / name).write_bytes(data)
    return p


def _db(prefix: Path) -> Path:
    return prefix / "share/miopen/db"


def test_the_db_names_miopen_reads():
    for name in ("gfx1151.kdb", "gfx1151_40.kdb", "gfx90a6e.db", "gfx1151.db.txt", "gfx1151_16.HIP.fdb.txt",
                 "gfx906_60.cd.pdb.txt", "gfx942.tn.model", "gfx1030_36.OpenCL.fdb.txt"):
        assert is_db_name(name), name
    for name in ("README", "gfx1151.kdb.bz2", ".gfx1151.kdb.rocmbuild-new-0001", "notes.txt"):
        assert not is_db_name(name), name


def test_apply_moves_old_dbs_aside_and_rollback_brings_them_back(art, prefix):
    before, ids = snapshot(prefix), inodes(prefix)
    kdb = _db(prefix) / "gfx1151.kdb"
    kdb_id = (kdb.stat().st_dev, kdb.stat().st_ino)
    p = plan.make(art, facts(prefix))
    removes = {Path(a.path).name: a for a in p.actions if a.kind == "remove"}
    assert set(removes) == {"gfx1151.kdb", "gfx1151_40.HIP.fdb.txt"}  # not README, not the replaced db.txt
    assert {a.role for a in removes.values()} == {"db"}
    replaced = next(a for a in p.actions if a.path.endswith("gfx1151.db.txt"))
    assert replaced.kind == "replace_file" and replaced.role == "data"
    out = transaction.execute(p, verify=Verifier())
    assert out.state == "committed"
    # gone from the db dir, present in the transaction's backups (the same inode: a hardlink)
    assert not kdb.exists() and not (_db(prefix) / "gfx1151_40.HIP.fdb.txt").exists()
    backups = {b.name.split("-", 1)[1]: b for b in (prefix / ".rocmbuild/backups" / out.id).iterdir()}
    assert backups["gfx1151.kdb"].read_bytes() == OLD["gfx1151.kdb"]
    assert (backups["gfx1151.kdb"].stat().st_dev, backups["gfx1151.kdb"].stat().st_ino) == kdb_id
    assert backups["gfx1151_40.HIP.fdb.txt"].read_bytes() == OLD["gfx1151_40.HIP.fdb.txt"]
    # the file the artifact provides was replaced as ever; the non-database file stayed
    assert (_db(prefix) / "gfx1151.db.txt").read_bytes() == b"fixture perf db\n"
    assert (_db(prefix) / "README").read_bytes() == OLD["README"]
    # applied again: nothing to do (the db dir holds only the artifact's databases now)
    assert plan.make(art, facts(prefix)).already_applied
    assert transaction.drift(prefix / ".rocmbuild") == []
    rp = transaction.rollback_plan(prefix / ".rocmbuild")
    assert transaction.execute(rp, verify=Verifier()).state == "committed"
    assert snapshot(prefix) == before and inodes(prefix) == ids  # byte-identical, same inodes
    assert kdb.read_bytes() == OLD["gfx1151.kdb"]


def test_a_db_file_that_comes_back_is_drift(art, prefix):
    transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    (_db(prefix) / "gfx1151.kdb").write_bytes(b"a device wheel's kdb, reinstalled\n")
    (d,) = transaction.drift(prefix / ".rocmbuild")
    assert d["path"].endswith("gfx1151.kdb") and d["role"] == "db"


@pytest.mark.parametrize("point", ["mid-swap", "after-swap", "after-verify"])
def test_a_crash_after_the_move_is_undone_by_recovery(art, prefix, tmp_path, point):
    before, ids = snapshot(prefix), inodes(prefix)
    p = plan.make(art, facts(prefix))
    pj = tmp_path / "plan.json"
    pj.write_text(json.dumps(p.to_json()))
    r = _py(RUNNER, pj, "ok", env={"ROCMBUILD_FAILPOINTS": point})
    assert r.returncode == 137, r.stderr  # killed: the journal is left unfinished
    sdir = Path(p.state_dir)
    if point != "mid-swap":
        assert not (_db(prefix) / "gfx1151.kdb").exists()  # it was moved aside before the kill
    r = _py(RECOVER, sdir)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    assert snapshot(prefix) == before and inodes(prefix) == ids
    assert (_db(prefix) / "gfx1151.kdb").read_bytes() == OLD["gfx1151.kdb"]
    assert not list(prefix.rglob(".*rocmbuild-*"))


def test_a_failed_verification_puts_the_old_dbs_back(art, prefix):
    before, ids = snapshot(prefix), inodes(prefix)
    with pytest.raises(VerifyError):
        transaction.execute(plan.make(art, facts(prefix)), verify=Verifier(fail=True), verify_restored=Verifier())
    assert snapshot(prefix) == before and inodes(prefix) == ids


def test_a_symlinked_db_dir_refuses_the_plan(art, prefix, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "gfx1151.kdb").write_bytes(b"canary\n")
    os.rename(prefix / "share", tmp_path / "share.real")
    (prefix / "share").symlink_to(outside.parent / "share.real")
    with pytest.raises(Exception) as ei:
        plan.make(art, facts(prefix))
    assert getattr(ei.value, "exit_code", None) == 2
    assert (outside / "gfx1151.kdb").read_bytes() == b"canary\n" and (outside / "gfx1151.kdb").stat().st_nlink == 1


def test_the_db_report_names_the_dir_foreign_files_and_a_custom_cache(art, prefix, tmp_path):
    from rocmbuild.cli.statetext import databases_text
    from rocmbuild.swap import dbreport

    lib = str(prefix / "lib/libMIOpen.so.1.0")
    stock = dbreport.report(prefix, lib, env={})
    assert stock.db_dir == str(_db(prefix)) and not stock.placed_build and stock.foreign == ()
    transaction.execute(plan.make(art, facts(prefix)), verify=Verifier())
    (_db(prefix) / "gfx1151_40.kdb").write_bytes(b"a device wheel's kernels\n")  # came in afterwards
    custom = tmp_path / "miopen-cache"
    custom.mkdir()
    (custom / "gfx1151_40.ukdb").write_bytes(b"kernels compiled by another build\n")
    r = dbreport.report(prefix, lib, env={"MIOPEN_CUSTOM_CACHE_DIR": str(custom)})
    assert r.placed_build and r.ours == (str(_db(prefix) / "gfx1151.db.txt"),)
    assert r.foreign == (str(_db(prefix) / "gfx1151_40.kdb"),) and not r.ok
    assert r.custom_foreign == (str(custom / "gfx1151_40.ukdb"),)
    assert r.clear_command == f"rm -rf -- {custom / 'gfx1151_40.ukdb'}"
    text = databases_text(r)
    assert f"MIOpen databases: {_db(prefix)}" in text and "FOREIGN" in text and r.clear_command in text
    assert r.to_json()["clear_command"] == r.clear_command
