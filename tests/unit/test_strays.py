"""swap.strays on real directories: which names of TheRock's preload glob are strays, in the
preload's order; the package's own file as destination; and no temp or backup name rocmbuild
makes can match the glob."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

from rocmbuild.swap import actions, strays
from rocmbuild.swap.pathstate import FsObserver


def _lib(d: Path, name: str, data: bytes = b"\x7fELF") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)
    return d / name


def test_the_chain_is_no_stray_and_strays_come_in_the_preloads_order(tmp_path):
    d = tmp_path / "_rocm_sdk_libraries_gfx1151/lib"
    placed = _lib(d, "libMIOpen.so.1")
    os.symlink("libMIOpen.so.1", d / "libMIOpen.so.1.0")  # leads to the placed file: part of the chain
    _lib(d, "libMIOpen.so.1.0.backup_system")
    _lib(d, "libMIOpen.so")
    os.symlink("libMIOpen.so.0.gone", d / "libMIOpen.so.0")
    _lib(d, ".libMIOpen.so.1.rocmbuild-new-t1")  # a temp: outside the glob
    _lib(d, "libMIOpen_ops.so.1")  # another library
    found = strays.find(d, "libMIOpen", placed, FsObserver())
    assert [(Path(s.path).name, s.first, s.what) for s in found] == [
        ("libMIOpen.so", True, "file"),
        ("libMIOpen.so.0", False, "dangling link -> libMIOpen.so.0.gone"),
        ("libMIOpen.so.1.0.backup_system", False, "file"),
    ]
    assert found[0].why() == "libMIOpen.so (file): sorted first, it is what TheRock's preload loads"
    assert "sorted after libMIOpen.so.1 today" in found[2].why()
    assert "does not decide what loads" in found[2].why(preload=False)


def test_therock_packages_and_their_file(tmp_path):
    assert strays.therock_package("/x/site-packages/_rocm_sdk_libraries_gfx1151/lib/libMIOpen.so.1") == (
        "_rocm_sdk_libraries_gfx1151", "per-family")
    assert strays.therock_package("/x/site-packages/_rocm_sdk_libraries/lib/libMIOpen.so.1") == (
        "_rocm_sdk_libraries", "multi-arch")
    assert strays.therock_package("/x/site-packages/torch/lib/libMIOpen.so") is None
    d = tmp_path / "_rocm_sdk_libraries/lib"
    own = _lib(d, "libMIOpen.so.1")
    loaded = _lib(d, "libMIOpen.so")  # a stray the preload picked
    assert strays.package_file(loaded, "libMIOpen.so.1", FsObserver()) == own
    assert strays.package_file(loaded, "libMIOpen.so.2", FsObserver()) == loaded  # no such file: the loaded one


@pytest.mark.parametrize("name", ["libMIOpen.so", "libMIOpen.so.1", "libMIOpen.so.1.0.70002", "libcudnn.so.9"])
def test_no_temp_name_matches_the_glob(name):
    stem = name.split(".so")[0]
    made = [actions.staged_name(Path(name), "20261202T000000Z-abcd"), actions.restore_name(Path(name), "t")]
    made += [Path(str(p) + ".part") for p in made]
    for p in made:
        assert not fnmatch.fnmatchcase(p.name, strays.glob_of(stem)), p
        assert not Path(p.name).match(f"{stem}*")  # nor the stem alone
    assert actions.backup_rel("t", 0, name).startswith("backups/")  # in the state dir, never the lib dir


def test_a_name_that_is_no_file_or_link_is_named_for_what_it_is_and_cannot_be_moved(tmp_path):
    """A directory, a FIFO or a socket matching the glob: described as such (not "dangling link"),
    and ``check`` refuses it with ``move`` (exit 2) wherever it is; without ``move`` outside a
    TheRock dir it is only noted."""
    import stat as st

    from rocmbuild.errors import TargetError

    d = tmp_path / "torch/lib"
    placed = _lib(d, "libMIOpen.so")
    (d / "libMIOpen.so.dir").mkdir()
    os.mkfifo(d / "libMIOpen.so.fifo")
    os.mknod(d / "libMIOpen.so.sock", 0o644 | st.S_IFSOCK)
    _lib(d, "libMIOpen.so.old")
    found = strays.find(d, "libMIOpen", placed, FsObserver())
    assert [(Path(s.path).name, s.what, s.movable) for s in found] == [
        ("libMIOpen.so.dir", "directory", False), ("libMIOpen.so.fifo", "FIFO", False),
        ("libMIOpen.so.old", "file", True), ("libMIOpen.so.sock", "socket", False)]
    strays.check(found, placed, preload=False, move=False)  # noted only: nothing raised
    strays.check(found[2:3], placed, preload=False, move=True)  # a file moves
    with pytest.raises(TargetError) as e:
        strays.check(found, placed, preload=False, move=True)
    assert e.value.exit_code == 2
    text = str(e.value)
    assert f"{d}/libMIOpen.so.dir is a directory" in text and "is a FIFO" in text and "is a socket" in text
    assert "libMIOpen.so.old" not in text  # the file it can move is not refused
    assert "move them out of the library's directory" in e.value.hint
