"""State follows the env and never goes silent: drift judged by the identity recorded at install
(ctime included), manifest paths confined to the lib and share dirs, state that names paths
relative to its prefix (a ``cp -a`` clone rolls back itself, never the original), and state files
that cannot be read reported by every verb.

Real venvs with a fake torch loading real libraries, real artifacts (the session's ``txn_world``),
real ``python -m rocmbuild`` processes and their exit codes, real failpoint kills.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from rocmbuild import swap
from rocmbuild.store.artifact import Artifact, FileEntry
from rocmbuild.errors import InputError, TargetError
from rocmbuild.swap import plan, statedir
from rocmbuild.swap.pathstate import FsObserver, observe, unchanged
from tests.support.cli import rb
from tests.support.fake_torch import write_knobs
from tests.support.snapshots import inodes, listing, snapshot

pytestmark = pytest.mark.slow


def _json(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _every_file(prefix: Path) -> dict[str, tuple]:
    """Every path under ``prefix`` (state dir included) -> (inode, sha256 or link text)."""
    out = {}
    for root, dirs, files in os.walk(prefix):
        for name in files + dirs:
            p = Path(root) / name
            st = os.lstat(p)
            what = os.readlink(p) if p.is_symlink() else (_sha(p) if p.is_file() else "dir")
            out[str(p.relative_to(prefix))] = (st.st_ino, what)
    return out


def _libraries(prefix: Path) -> dict[str, tuple]:
    """The snapshot without the fake torch's knobs (a clone's are rewritten to load its own lib)."""
    return {k: v for k, v in snapshot(prefix).items() if not k.endswith("_fake.json")}


@pytest.fixture
def env350(target_env):
    def make(layout="conda", **kw):
        return target_env("3.5.0", layout=layout, compile_version="3.5.1", **kw)

    return make


@pytest.fixture
def private_home(txn_world, tmp_path, monkeypatch):
    """A private copy of the session's cache: a test that writes a target file in place must not
    reach the shared artifacts through a hardlink."""
    home = tmp_path / "home"
    shutil.copytree(txn_world.home, home, symlinks=True)
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))
    return txn_world


# --------------------------------------------------------------------------------------------
# drift: identity recorded at install, ctime included


def _write_in_place(path: Path, data: bytes, *, keep_mtime: bool = True) -> None:
    st = os.stat(path)
    with open(path, "r+b") as f:  # what `cp other path` does: the same inode, truncated and rewritten
        f.truncate(0)
        f.write(data)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_in_place_write_with_mtime_restored_is_drift_and_rollback_needs_force(private_home, env350):
    env = env350("conda")
    before, ids = snapshot(env.prefix), inodes(env.prefix)
    assert rb("apply", private_home.recipe("mini"), "--env", env.prefix).returncode == 0
    lib = env.prefix / "lib/libMIOpen.so.1.0"
    st = os.stat(lib)
    other = private_home.artifacts["mini-fix"].file("lib/libMIOpen.so.1.0").read_bytes()
    data = other[:st.st_size].ljust(st.st_size, b"\0") if len(other) != st.st_size else other
    assert data != lib.read_bytes()
    _write_in_place(lib, data)  # same inode, same size, same mtime: only the ctime and the bytes moved
    now = os.stat(lib)
    assert (now.st_ino, now.st_size, now.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)

    s = rb("status", "--env", env.prefix, "--json")
    assert s.returncode == 0, s.stderr
    drift = _json(s)["changes"]["drift"]
    assert [d["path"] for d in drift] == [str(lib)] and "written in place" in drift[0]["found"]
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 2 and "drift" in _json(r)["error"]["message"], r.stderr
    assert lib.read_bytes() == data  # the hand change is still there
    r = rb("rollback", "--env", env.prefix, "--force")
    assert r.returncode == 0, r.stderr
    assert snapshot(env.prefix) == before and inodes(env.prefix) == ids


def test_only_the_ctime_moved_the_content_decides(private_home, env350, tmp_path):
    env = env350("conda")
    assert rb("apply", private_home.recipe("mini"), "--env", env.prefix).returncode == 0
    lib = env.prefix / "lib/libMIOpen.so.1.0"
    sdir = env.prefix / ".rocmbuild"
    assert swap.drift(sdir) == []
    os.link(lib, tmp_path / "another-name")  # a new hardlink: ctime moves, bytes do not
    os.chmod(lib, 0o700)  # a chmod: ctime moves, bytes do not
    j = swap.active(sdir)[-1]
    after = next(st.after for a, st in j.changes if a.path == str(lib))
    assert after.ctime_ns and os.stat(lib).st_ctime_ns != after.ctime_ns  # only the ctime moved
    assert os.stat(lib).st_mtime_ns == after.mtime_ns
    assert swap.drift(sdir) == []
    os.chmod(lib, 0o755)
    _write_in_place(lib, lib.read_bytes()[::-1])  # reversed bytes, same size, mtime put back
    assert [d.path for d in swap.drift(sdir)] == [str(lib)]


def test_unchanged_never_compares_a_file_with_itself(tmp_path):
    f = tmp_path / "lib.so"
    f.write_bytes(b"A" * 64)
    digest = _sha(f)
    placed = observe(f)
    os.link(f, tmp_path / "cache-copy")  # the cache's hardlink: an in-place write changes both
    assert unchanged(observe(f), placed, f, digest=digest, source=str(tmp_path / "cache-copy"), obs=FsObserver())
    _write_in_place(f, b"B" * 64)
    assert not unchanged(observe(f), placed, f, digest=digest, source=str(tmp_path / "cache-copy"),
                         obs=FsObserver())
    # a journal without ctime (schema 1): identity without it, as before
    old = replace(placed, ctime_ns=0)
    assert unchanged(observe(f), old, f, digest=digest, source=None, obs=FsObserver()) is True


# --------------------------------------------------------------------------------------------
# manifest paths: only the lib dir and its ../share, never the state dir, never out of the prefix


def _crafted(art: Artifact, rel: str, *, as_data: str | None = None) -> Artifact:
    m = art.manifest
    extra = FileEntry(rel, "file", 5, "e" * 64, 0o644, 1)
    return Artifact(art.path, replace(m, files=m.files + (extra,), data=(as_data or rel,)))


def _facts_for(env) -> plan.TargetFacts:
    lib = env.prefix / "lib/libMIOpen.so.1.0"
    return plan.TargetFacts(str(env.prefix), str(env.python),
                            (("libMIOpen", (plan.LoadedFact(str(lib), "conda", True),)),), "3.5.0")


@pytest.mark.parametrize("rel", [".rocmbuild/history.jsonl", "../../x/canary", "/tmp/x/canary", "lib/../../x",
                                 "include/miopen/miopen.h", "share/../.rocmbuild/lock"])
def test_data_naming_a_path_outside_lib_and_share_is_refused(txn_home, env350, tmp_path, rel):
    env = env350("conda")
    (env.prefix / ".rocmbuild").mkdir()
    (env.prefix / ".rocmbuild/history.jsonl").write_text('{"id": "x", "verb": "apply"}\n')
    before = listing(env.prefix)
    art = _crafted(txn_home.artifacts["mini"], rel)
    with pytest.raises(InputError) as e:
        plan.make(art, _facts_for(env))
    assert "nothing was changed" in e.value.message and e.value.hint
    assert e.value.exit_code == 2
    assert listing(env.prefix) == before


def test_share_symlinked_out_of_the_prefix_is_refused_unless_allowed(txn_home, env350, tmp_path):
    env = env350("conda")
    outside = tmp_path / "elsewhere"
    (outside / "miopen/db").mkdir(parents=True)
    canary = outside / "miopen/db/canary"
    canary.write_bytes(b"canary\n")
    shutil.rmtree(env.prefix / "share", ignore_errors=True)
    os.symlink(outside, env.prefix / "share")
    art = txn_home.artifacts["mini"]
    assert art.manifest.data, "the fixture artifact installs share/ data"
    with pytest.raises(TargetError) as e:
        plan.make(art, _facts_for(env))
    assert "out of the prefix" in e.value.message and "--allow-outside-prefix" in e.value.hint
    p = plan.make(art, _facts_for(env), allow_outside_prefix=True)
    assert any(a.role == "data" for a in p.actions)
    # and through the CLI: exit 2, nothing changed
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 2 and "out of the prefix" in _json(r)["error"]["message"], r.stderr
    assert canary.read_bytes() == b"canary\n" and sorted(p.name for p in outside.rglob("*")) == \
        ["canary", "db", "miopen"]
    assert not (env.prefix / ".rocmbuild/journal").exists()


def test_share_symlinked_into_the_state_dir_is_refused(txn_home, env350):
    env = env350("conda")
    (env.prefix / ".rocmbuild").mkdir()
    shutil.rmtree(env.prefix / "share", ignore_errors=True)
    os.symlink(".rocmbuild", env.prefix / "share")
    with pytest.raises(TargetError) as e:
        plan.make(txn_home.artifacts["mini"], _facts_for(env), allow_outside_prefix=True)
    assert "own state" in e.value.message


# --------------------------------------------------------------------------------------------
# state relative to the prefix: a copied env acts on itself only


def _clone(env, dest: Path) -> Path:
    subprocess.run(["cp", "-a", str(env.prefix), str(dest)], check=True)
    knobs = json.loads((env.torch_dir / "_fake.json").read_text())
    rel = Path(knobs["load"]).relative_to(env.prefix)
    clone_torch = dest / env.torch_dir.relative_to(env.prefix)
    write_knobs(clone_torch, {**knobs, "load": str(dest / rel)})  # as $ORIGIN RPATHs do in a real env
    return dest


@pytest.mark.parametrize("layout", ["conda", "wheel"])
def test_rollback_in_a_cp_a_clone_leaves_the_original_byte_identical(txn_home, env350, tmp_path, layout):
    env = env350(layout)
    stock = _libraries(env.prefix)
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    journal = next((env.prefix / ".rocmbuild/journal").glob("*.json"))
    on_disk = json.loads(journal.read_text())
    assert on_disk["schema"] == 2 and on_disk["prefix_identity"]["realpath"] == os.path.realpath(env.prefix)
    assert all(not a["path"].startswith("/") for a in on_disk["plan"]["actions"])
    clone = _clone(env, tmp_path / "clone")
    original = _every_file(env.prefix)

    h = rb("history", "--env", clone, "--json")
    assert h.returncode == 0, h.stderr
    hist = _json(h)
    assert hist["origins"] == [{"state_dir": str(clone / ".rocmbuild"), "relation": "copied",
                                "from": str(env.prefix)}]
    assert hist["transactions"][0]["origin"] == "copied"
    assert all(f.startswith(str(clone) + "/") for f in hist["transactions"][0]["files"])
    assert f"copied from {env.prefix}" in rb("history", "--env", clone).stdout
    assert _json(rb("history", "--env", env.prefix, "--json"))["origins"] == []

    r = rb("rollback", "--env", clone, "--json")
    assert r.returncode == 0, r.stderr
    assert all(a["path"].startswith(str(clone) + "/") for a in _json(r)["plan"]["actions"])
    assert _every_file(env.prefix) == original  # sha256 and inode of every file, state dir included
    assert _libraries(clone) == stock
    assert _json(rb("status", "--env", clone, "--json"))["torch"]["runtime_version"] == "3.5.0"
    assert _json(rb("status", "--env", env.prefix, "--json"))["torch"]["runtime_version"] == "3.5.1"


def test_moved_env_is_recognised_and_rolls_back_in_place(txn_home, env350, tmp_path):
    env = env350("conda")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    moved = tmp_path / "moved"
    os.rename(env.prefix, moved)
    knobs = json.loads((moved / env.torch_dir.relative_to(env.prefix) / "_fake.json").read_text())
    write_knobs(moved / env.torch_dir.relative_to(env.prefix),
                {**knobs, "load": str(moved / Path(knobs["load"]).relative_to(env.prefix))})
    h = _json(rb("history", "--env", moved, "--json"))
    assert h["origins"][0]["relation"] == "moved" and h["origins"][0]["from"] == str(env.prefix)
    r = rb("rollback", "--env", moved)
    assert r.returncode == 0, r.stderr
    assert not env.prefix.exists()


def test_schema_1_journals_with_absolute_paths_are_still_read(txn_home, env350, tmp_path):
    env = env350("conda")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    sdir = env.prefix / ".rocmbuild"
    j = swap.journals(sdir)[0]
    old = {k: v for k, v in j.to_json().items() if k != "prefix_identity"}
    j.path.write_text(json.dumps({**old, "schema": 1}))  # what rocmbuild wrote before: absolute paths
    assert json.loads(j.path.read_text())["plan"]["actions"][0]["path"].startswith("/")
    assert [a.path for a in swap.journals(sdir)[0].plan.actions] == [a.path for a in j.plan.actions]
    clone = _clone(env, tmp_path / "clone")
    original = _every_file(env.prefix)
    assert all(a.path.startswith(str(clone) + "/") for a in swap.journals(clone / ".rocmbuild")[0].plan.actions)
    r = rb("rollback", "--env", clone)
    assert r.returncode == 0, r.stderr
    assert _every_file(env.prefix) == original
    assert rb("rollback", "--env", env.prefix).returncode == 0


# --------------------------------------------------------------------------------------------
# state files that cannot be read: every verb says so; nothing changes; nothing exits 1


def test_truncated_journal_after_the_swap_is_reported_by_every_verb(txn_home, env350):
    env = env350("conda")
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, env={"ROCMBUILD_FAILPOINTS": "after-swap"})
    assert r.returncode == 137, r.stderr
    journal = next((env.prefix / ".rocmbuild/journal").glob("*.json"))
    txn = journal.stem
    text = journal.read_bytes()
    journal.write_bytes(text[:text.index(b'"steps"') + 20])  # torn: not JSON any more
    backups = env.prefix / ".rocmbuild/backups" / txn
    assert backups.is_dir()
    frozen = listing(env.prefix)

    rec = rb("recover", "--env", env.prefix, "--json")
    assert rec.returncode == 2, rec.stderr
    err = _json(rec)["error"]
    assert str(journal) in err["message"] and txn in err["message"] and str(backups) in err["message"]
    assert "mv" in err["hint"] and err["type"] == "StateError"
    known = err["details"]["unreadable"][0]["known"]
    assert known["state"] == "swapped" and str(env.prefix / "lib/libMIOpen.so.1.0") in known["paths"]
    assert "nothing to recover" not in rec.stdout + rec.stderr

    s = rb("status", "--env", env.prefix, "--json")
    assert s.returncode == 0, s.stderr
    bad = _json(s)["changes"]["unreadable"]
    assert [(b["kind"], b["path"], b["txn"], b["backups"]) for b in bad] == [("journal", str(journal), txn, str(backups))]
    text = rb("status", "--env", env.prefix).stdout
    assert "UNREADABLE" in text and "changed nothing" not in text

    h = rb("history", "--env", env.prefix, "--json")
    assert h.returncode == 0 and _json(h)["unreadable"][0]["txn"] == txn
    assert "no transactions that can be read" in rb("history", "--env", env.prefix).stdout

    for args in (["apply", txn_home.recipe("mini-fix")], ["rollback"], ["apply", txn_home.recipe("mini"), "--dry-run"]):
        r = rb(*args, "--env", env.prefix, "--json")
        assert r.returncode == 2 and str(journal) in _json(r)["error"]["message"], r.stderr
    assert listing(env.prefix) == frozen  # nothing was written anywhere in the prefix

    # dealt with as the hint says: the original back from its backup, the journal moved aside
    for b in backups.iterdir():
        os.replace(b, env.prefix / "lib" / b.name.split("-", 1)[1])
    os.replace(journal, journal.with_name(journal.name + ".broken"))
    assert rb("recover", "--env", env.prefix).returncode == 0
    assert _json(rb("status", "--env", env.prefix, "--json"))["torch"]["runtime_version"] == "3.5.0"


@pytest.mark.parametrize("content", ["{}", "[1, 2]", '{"id": 3, "verb": "apply", "state": "swapped"}', "null",
                                     '{"id": "x", "verb": "apply", "state": "committed", "steps": [], "plan": []}'])
def test_journals_of_the_wrong_shape_are_reported_not_exit_1(txn_home, env350, content):
    env = env350("conda")
    jdir = env.prefix / ".rocmbuild/journal"
    jdir.mkdir(parents=True)
    (jdir / "0001-20260101T000000Z.json").write_text(content)
    for verb in ("status", "history"):
        r = rb(verb, "--env", env.prefix, "--json")
        assert r.returncode == 0, r.stderr
        data = _json(r)
        bad = (data["changes"] if verb == "status" else data)["unreadable"]
        assert bad[0]["txn"] == "0001-20260101T000000Z"
    for verb in ("recover", "rollback"):
        r = rb(verb, "--env", env.prefix, "--json")
        assert r.returncode == 2 and _json(r)["error"]["type"] == "StateError", r.stderr


def test_a_bad_history_line_hides_none_of_the_others(txn_home, env350):
    env = env350("conda")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    assert rb("apply", txn_home.recipe("mini-fix"), "--env", env.prefix).returncode == 0
    hist = env.prefix / ".rocmbuild/history.jsonl"
    good = hist.read_text().splitlines()
    assert len(good) == 2
    hist.write_text("\n".join([good[0], "[1,2]", '{"id": 7}', "{trunc", good[1]]) + "\n")
    h = rb("history", "--env", env.prefix, "--json")
    assert h.returncode == 0, h.stderr
    data = _json(h)
    assert [t["id"] for t in data["transactions"]] == [json.loads(x)["id"] for x in good]
    assert [(u["kind"], u["line"]) for u in data["unreadable"]] == [("history", 2), ("history", 3), ("history", 4)]
    s = rb("status", "--env", env.prefix, "--json")
    assert s.returncode == 0 and len(_json(s)["changes"]["unreadable"]) == 3
    r = rb("rollback", "--env", env.prefix)  # a bad history line warns, it does not block
    assert r.returncode == 0, r.stderr
    assert "unreadable history" in r.stderr and "line 2" in r.stderr
    assert len(statedir.history_lines(env.prefix / ".rocmbuild")[0]) == 3
