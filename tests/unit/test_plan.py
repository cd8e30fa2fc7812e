"""plan.make / plan.make_rollback: pure mapping of an artifact onto a target, no filesystem."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmbuild.store.artifact import FileEntry, LibraryEntry, Manifest
from rocmbuild.errors import InputError, TargetError
from rocmbuild.swap import plan, restore
from rocmbuild.swap.pathstate import PathState
from rocmbuild.swap.plan import LoadedFact, TargetFacts

ART = Path("/cache/artifacts/k")
TREE = ART / "tree"
SHA = "a" * 64


def manifest(**kw) -> Manifest:
    files = (
        FileEntry("include/miopen/miopen.h", "file", 10, "h" * 64, 0o644, 1),
        FileEntry("lib/libMIOpen.so", "link", target="libMIOpen.so.1"),
        FileEntry("lib/libMIOpen.so.1", "link", target="libMIOpen.so.1.0"),
        FileEntry("lib/libMIOpen.so.1.0", "file", 1000, SHA, 0o755, 1),
        FileEntry("share/miopen/db/gfx1151.db.txt", "file", 16, "d" * 64, 0o644, 1),
    )
    lib = LibraryEntry("libMIOpen", "lib/libMIOpen.so.1.0", "libMIOpen.so.1",
                       ("lib/libMIOpen.so", "lib/libMIOpen.so.1"),
                       ("libMIOpen.so", "libMIOpen.so.1", "libMIOpen.so.1.0"), SHA, 1000)
    d = dict(recipe="miopen-3.5.1", key="k" * 64, version="3.5.1", expect_version="3.5.1", encoding="miopen",
             smoke=None, commit="c" * 40, ref="rocm-7.2.0", url="u", install_prefix="/opt/rocm", files=files,
             libraries=(lib,), data=("share/miopen/db",))
    d.update(kw)
    return Manifest(**d)


def artifact(m=None):
    return SimpleNamespace(manifest=m or manifest(), tree=TREE, path=ART)


class Obs:
    """A dict-backed filesystem: path -> PathState; directories are PathState("other")."""

    def __init__(self, states: dict[str, PathState], hashes: dict[str, str] | None = None):
        self.states = {str(k): v for k, v in states.items()}
        self.hashes = hashes or {}
        self.hashed: list[str] = []

    def state(self, path):
        return self.states.get(str(path), PathState("absent"))

    def sha256(self, path):
        self.hashed.append(str(path))
        return self.hashes[str(path)]


def F(inode, size=1000, dev=1):
    return PathState("file", dev, inode, size, 5, 0o755)


def L(target):
    return PathState("link", target=target)


D = PathState("other")


def base_fs(extra=None):
    s = {
        "/env": D, "/env/lib": D,
        "/env/lib/libMIOpen.so.1.0": F(10, 900), "/env/lib/libMIOpen.so.1": L("libMIOpen.so.1.0"),
        "/env/lib/libMIOpen.so": L("libMIOpen.so.1"),
        str(TREE / "lib/libMIOpen.so.1.0"): F(99), str(TREE / "share/miopen/db/gfx1151.db.txt"): F(98, 16),
    }
    s.update(extra or {})
    return s


def facts(path="/env/lib/libMIOpen.so.1.0", layout="conda", inside=True, copies=None):
    loaded = copies or (LoadedFact(path, layout, inside),)
    return TargetFacts("/env", "/env/bin/python", (("libMIOpen", loaded),), "3.5.0")


def test_conda_layout_maps_real_file_links_and_data():
    p = plan.make(artifact(), facts(), observer=Obs(base_fs()), state_dir="/env/.rocmbuild")
    got = [(a.kind, a.path, a.role, a.done) for a in p.actions]
    assert got == [
        ("replace_file", "/env/lib/libMIOpen.so.1.0", "library", False),
        ("replace_link", "/env/lib/libMIOpen.so", "link", True),
        ("replace_link", "/env/lib/libMIOpen.so.1", "link", True),
        ("add_file", "/env/share/miopen/db/gfx1151.db.txt", "data", False),
    ]
    add = p.actions[3]
    assert add.create_dirs == ("/env/share", "/env/share/miopen", "/env/share/miopen/db")
    assert add.source == str(TREE / "share/miopen/db/gfx1151.db.txt")
    assert p.actions[0].before == F(10, 900) and p.actions[0].source == str(TREE / "lib/libMIOpen.so.1.0")
    assert p.library == p.library_before == "/env/lib/libMIOpen.so.1.0"
    assert (p.version_before, p.version_after, p.layout, p.outside) == ("3.5.0", "3.5.1", "conda", False)
    assert not p.already_applied and len(p.pending) == 2
    # include/ is not a data dir: never installed
    assert not any("include" in a.path for a in p.actions)
    # the plan survives the journal
    assert plan.Plan.from_json(p.to_json()) == p


def test_a_system_style_real_name_receives_the_bytes_and_no_link_moves():
    """``libMIOpen.so.1 -> libMIOpen.so.1.0.70002``: the new bytes go to ``.1.0.70002`` (the name
    the target's chain resolves to); no ``libMIOpen.so.1.0`` is added, no link is re-pointed (the
    old rule added one and ``ldconfig`` pointed the SONAME link back at the old file)."""
    fs = base_fs({"/env/lib/libMIOpen.so.1.0.70002": F(11, 800)})
    del fs["/env/lib/libMIOpen.so.1.0"]
    fs["/env/lib/libMIOpen.so.1"] = L("libMIOpen.so.1.0.70002")
    p = plan.make(artifact(), facts("/env/lib/libMIOpen.so.1.0.70002"), observer=Obs(fs), state_dir="/s")
    kinds = {a.path: (a.kind, a.done, a.link) for a in p.actions}
    assert kinds["/env/lib/libMIOpen.so.1.0.70002"] == ("replace_file", False, None)
    assert "/env/lib/libMIOpen.so.1.0" not in kinds
    assert kinds["/env/lib/libMIOpen.so.1"] == ("replace_link", True, "libMIOpen.so.1.0.70002")
    assert [a.path for a in p.pending] == ["/env/lib/libMIOpen.so.1.0.70002",
                                           "/env/share/miopen/db/gfx1151.db.txt"]
    assert p.library == p.library_before == "/env/lib/libMIOpen.so.1.0.70002"
    why = {n.artifact: (n.target, n.why) for n in p.names}
    assert why["lib/libMIOpen.so.1.0"][0] == "/env/lib/libMIOpen.so.1.0.70002"
    assert "kept" in why["lib/libMIOpen.so.1"][1]
    assert "libMIOpen.so.1.0.70002" in p.render() and "kept as it is" in p.render()


def test_wheel_layout_replaces_the_single_plain_file():
    lib = "/env/lib/python3.11/site-packages/torch/lib/libMIOpen.so"
    fs = base_fs({lib: F(12, 800), "/env/lib/python3.11/site-packages/torch/lib": D})
    p = plan.make(artifact(), facts(lib, "wheel"), observer=Obs(fs), state_dir="/s")
    assert [(a.kind, a.path) for a in p.actions] == [
        ("replace_file", lib),
        ("add_file", "/env/lib/python3.11/site-packages/torch/share/miopen/db/gfx1151.db.txt"),
    ]
    assert p.layout == "wheel" and p.library == lib
    assert not any(a.link for a in p.actions)


def test_already_applied_by_inode_then_by_hash_only_as_fallback():
    fs = base_fs({"/env/lib/libMIOpen.so.1.0": F(99), "/env/share": D, "/env/share/miopen": D,
                  "/env/share/miopen/db": D, "/env/share/miopen/db/gfx1151.db.txt": F(98, 16)})
    obs = Obs(fs)
    p = plan.make(artifact(), facts(), observer=obs, state_dir="/s")
    assert p.already_applied and obs.hashed == []  # same inodes: nothing hashed
    fs["/env/lib/libMIOpen.so.1.0"] = F(50)  # a copy with the same bytes (other inode, same size)
    obs = Obs(fs, {"/env/lib/libMIOpen.so.1.0": SHA})
    assert plan.make(artifact(), facts(), observer=obs, state_dir="/s").already_applied
    assert obs.hashed == ["/env/lib/libMIOpen.so.1.0"]
    fs["/env/lib/libMIOpen.so.1.0"] = F(51, size=999)  # different size: not hashed, not applied
    obs = Obs(fs)
    assert not plan.make(artifact(), facts(), observer=obs, state_dir="/s").already_applied
    assert obs.hashed == []


def test_outside_prefix_refused_unless_allowed(monkeypatch, tmp_path):
    monkeypatch.setenv("ROCMBUILD_HOME", str(tmp_path))
    fs = base_fs({"/opt/rocm/lib": D, "/opt/rocm/lib/libMIOpen.so.1.0": F(13, 800)})
    f = facts("/opt/rocm/lib/libMIOpen.so.1.0", "outside", inside=False)
    with pytest.raises(TargetError) as ei:
        plan.make(artifact(), f, observer=Obs(fs))
    assert ei.value.exit_code == 2 and "--allow-outside-prefix" in ei.value.hint
    p = plan.make(artifact(), f, observer=Obs(fs), allow_outside_prefix=True)
    assert p.outside and Path(p.state_dir).parent == tmp_path / "state" / "targets"  # ROCMBUILD_HOME/state
    assert p.actions[0].path == "/opt/rocm/lib/libMIOpen.so.1.0"


def test_missing_artifact_file_is_input_error():
    fs = base_fs()
    del fs[str(TREE / "lib/libMIOpen.so.1.0")]
    with pytest.raises(InputError) as ei:
        plan.make(artifact(), facts(), observer=Obs(fs), state_dir="/s")
    assert ei.value.exit_code == 2 and "missing" in ei.value.message


def test_not_loaded_or_loaded_twice_is_target_error():
    with pytest.raises(TargetError, match="does not load"):
        plan.make(artifact(), TargetFacts("/env", "py", (("libMIOpen", ()),), None), observer=Obs(base_fs()))
    two = (LoadedFact("/env/lib/libMIOpen.so.1.0", "conda", True), LoadedFact("/x/libMIOpen.so", "wheel", True))
    with pytest.raises(TargetError, match="2 copies"):
        plan.make(artifact(), facts(copies=two), observer=Obs(base_fs()))


def test_directory_in_the_way_is_refused():
    fs = base_fs({"/env/share": D, "/env/share/miopen": D, "/env/share/miopen/db": D,
                  "/env/share/miopen/db/gfx1151.db.txt": D})
    with pytest.raises(TargetError, match="directory"):
        plan.make(artifact(), facts(), observer=Obs(fs), state_dir="/s")


def test_expect_overrides_the_manifest():
    p = plan.make(artifact(), facts(), observer=Obs(base_fs()), state_dir="/s", expect="3.5.9")
    assert p.version_after == "3.5.9"


F10, F99 = F(10), F(99)  # PathState is frozen: safe as a default


def _rollback(states, force=False, desired=F10, backup="/s/backups/t1/000-libMIOpen.so.1.0", expected=F99,
              copied=False, hashes=None):
    u = restore.Undo("/env/lib/libMIOpen.so.1.0", expected=expected, desired=desired, backup=backup, txn="t1",
                  copied=copied)
    obs = Obs(states, hashes)
    p = restore.make_rollback(
        [u], prefix="/env", python="py", libdir="/env/lib", layout="conda", outside=False, state_dir="/s",
        library="/env/lib/libMIOpen.so.1.0", library_before="/env/lib/libMIOpen.so.1.0", version_before="3.5.1",
        version_after="3.5.0", encoding="miopen", library_name="libMIOpen", recipe="r", commit=None,
        undoes=("t1",), force=force, observer=obs)
    _rollback.hashed = obs.hashed
    return p


def test_rollback_plan_restores_from_backup_and_refuses_drift():
    states = {"/env/lib/libMIOpen.so.1.0": F(99), "/s/backups/t1/000-libMIOpen.so.1.0": F(10)}
    p, drift = _rollback(states)
    (a,) = p.actions
    assert (a.kind, a.source, a.done, drift) == ("replace_file", "/s/backups/t1/000-libMIOpen.so.1.0", False, [])
    states["/env/lib/libMIOpen.so.1.0"] = F(77)  # clobbered since
    with pytest.raises(TargetError, match="drift") as ei:
        _rollback(states)
    assert ei.value.details["drift"][0]["path"] == "/env/lib/libMIOpen.so.1.0"
    p, drift = _rollback(states, force=True)
    assert drift and p.notes
    del states["/s/backups/t1/000-libMIOpen.so.1.0"]  # pruned
    with pytest.raises(TargetError, match="backup"):
        _rollback(states, force=True)


def test_rollback_of_an_added_path_removes_it():
    states = {"/env/lib/libMIOpen.so.1.0": F(99)}
    p, _ = _rollback(states, desired=PathState("absent"), backup=None)
    assert p.actions[0].kind == "remove"


def test_rollback_done_check_for_a_copied_backup_compares_content_not_inode():
    """A backup copied across filesystems is restored as a new inode: the path is "done" when it
    has the desired size and mode and (hashed only then) the backup's bytes; a hardlinked backup
    still needs the inode."""
    lib, bk = "/env/lib/libMIOpen.so.1.0", "/s/backups/t1/000-libMIOpen.so.1.0"
    restored = F(55)  # a restored copy: same size and mode as F(10), another inode
    states = {lib: restored, bk: F(56)}
    p, _ = _rollback(states, expected=restored, copied=True, hashes={lib: "x" * 64, bk: "x" * 64})
    assert p.actions[0].done is True and p.already_applied
    assert sorted(_rollback.hashed) == sorted([lib, bk])
    # not a copy: the inode decides, nothing is hashed
    p, _ = _rollback(states, expected=restored, copied=False, hashes={})
    assert p.actions[0].done is False and _rollback.hashed == []
    # a copy, but other bytes (same size, e.g. a same-size build): not done
    p, _ = _rollback(states, expected=restored, copied=True, hashes={lib: "y" * 64, bk: "x" * 64})
    assert p.actions[0].done is False
    # a copy of another size: rejected without hashing
    states[lib] = F(57, size=10)
    p, _ = _rollback(states, expected=F(57, size=10), copied=True, hashes={})
    assert p.actions[0].done is False and _rollback.hashed == []


def test_a_file_rocmbuild_placed_and_nobody_changed_is_not_hashed():
    """The active transaction's journal recorded the placed file's identity after the swap (ctime
    included) and its sha256: a re-apply recognises it without reading a byte; any other identity
    (here a moved ctime: a chmod, or an in-place write with its mtime put back) is hashed."""
    placed_state = PathState("file", 1, 50, 1000, 5, 0o755, ctime_ns=77)
    fs = base_fs({"/env/lib/libMIOpen.so.1.0": placed_state})
    f = TargetFacts("/env", "py", (("libMIOpen", (LoadedFact("/env/lib/libMIOpen.so.1.0", "conda", True),)),),
                    "3.5.1", placed=(("/env/lib/libMIOpen.so.1.0", placed_state, SHA),))
    obs = Obs(fs)
    assert plan.make(artifact(), f, observer=obs, state_dir="/s").actions[0].done and obs.hashed == []
    fs["/env/lib/libMIOpen.so.1.0"] = PathState("file", 1, 50, 1000, 5, 0o755, ctime_ns=78)
    obs = Obs(fs, {"/env/lib/libMIOpen.so.1.0": "b" * 64})
    assert not plan.make(artifact(), f, observer=obs, state_dir="/s").actions[0].done
    assert obs.hashed == ["/env/lib/libMIOpen.so.1.0"]


def test_the_compatibility_link_is_never_mapped_and_a_dangling_chain_is_refused():
    files = manifest().files + (FileEntry("miopen/lib/libMIOpen.so", "link", target="../../lib/libMIOpen.so"),)
    lib = manifest().libraries[0]
    m = manifest(files=files, libraries=(LibraryEntry(lib.name, lib.file, lib.soname, lib.links, lib.chain,
                                                      SHA, 1000, ("miopen/lib/libMIOpen.so",)),))
    p = plan.make(artifact(m), facts(), observer=Obs(base_fs()), state_dir="/s")
    assert not any("miopen/lib" in a.path or a.link == "../../lib/libMIOpen.so" for a in p.actions)
    assert [n.target for n in p.names if n.artifact == "miopen/lib/libMIOpen.so"] == [None]
    fs = base_fs({"/env/lib/libMIOpen.so": L("libMIOpen.so.0.9")})  # a stale dev link: dangling
    with pytest.raises(TargetError, match="dangling") as ei:
        plan.make(artifact(m), facts(), observer=Obs(fs), state_dir="/s")
    assert ei.value.exit_code == 2
    fs = base_fs({"/env/lib/libMIOpen.so": L("libMIOpen.so.1.0.old"), "/env/lib/libMIOpen.so.1.0.old": F(3)})
    with pytest.raises(TargetError, match="another file"):
        plan.make(artifact(m), facts(), observer=Obs(fs), state_dir="/s")


def test_a_set_member_torch_has_not_mapped_is_found_beside_by_its_soname():
    ops = LibraryEntry("libMIOpen_ops", "lib/libMIOpen_ops.so.1.0", "libMIOpen_ops.so.1", (), (), "o" * 64, 10)
    files = manifest().files + (FileEntry("lib/libMIOpen_ops.so.1.0", "file", 10, "o" * 64, 0o755, 1),)
    m = manifest(files=files, libraries=(manifest().libraries[0], ops))
    fs = base_fs({"/env/lib/libMIOpen_ops.so.1": L("libMIOpen_ops.so.1.0.70002"),
                  "/env/lib/libMIOpen_ops.so.1.0.70002": F(20, 10), str(TREE / "lib/libMIOpen_ops.so.1.0"): F(97, 10)})
    p = plan.make(artifact(m), facts(), observer=Obs(fs, {"/env/lib/libMIOpen_ops.so.1.0.70002": "x" * 64}),
                  state_dir="/s")
    lib_paths = [a.path for a in p.actions if a.role == "library"]
    assert lib_paths == ["/env/lib/libMIOpen.so.1.0", "/env/lib/libMIOpen_ops.so.1.0.70002"]
    del fs["/env/lib/libMIOpen_ops.so.1"], fs["/env/lib/libMIOpen_ops.so.1.0.70002"]  # new to the target
    p = plan.make(artifact(m), facts(), observer=Obs(fs), state_dir="/s")
    assert ("add_file", "/env/lib/libMIOpen_ops.so.1.0") in [(a.kind, a.path) for a in p.actions]
