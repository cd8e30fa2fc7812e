"""rocmbuild.fs.root: every path resolved beneath the root's fd at the moment of use, no symlink
followed -- with openat2 and with the O_NOFOLLOW walk (``ROCMBUILD_NO_OPENAT2``) alike."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest

from rocmbuild.fs import beneath
from rocmbuild.fs.root import ConfinementError, ContentMismatch, Root


@pytest.fixture(params=["openat2", "walk"])
def mode(request, monkeypatch):
    if request.param == "openat2" and not beneath.has_openat2():
        pytest.skip("this kernel (or its sandbox) has no openat2: the walk is what runs here")
    monkeypatch.setattr(beneath, "_openat2_ok", request.param == "openat2")
    return request.param


@pytest.fixture
def world(tmp_path):
    root = tmp_path / "root"
    (root / "lib").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    canary = outside / "canary"
    canary.write_bytes(b"canary\n")
    os.symlink(outside, root / "evil")
    os.symlink(outside, root / "lib" / "evil")
    return root, outside, canary


def _intact(outside, canary):
    assert canary.read_bytes() == b"canary\n" and os.lstat(canary).st_nlink == 1
    assert sorted(p.name for p in outside.iterdir()) == ["canary"]


@pytest.mark.parametrize("rel", ["evil/canary", "evil/new", "lib/evil/canary", "lib/evil/x/y"])
def test_no_write_goes_through_a_symlinked_directory(mode, world, rel):
    root_dir, outside, canary = world
    with Root.open(root_dir, "the test root") as root:
        for act in (lambda: root.write_atomic(rel, b"x"), lambda: root.unlink(rel), lambda: root.mkdir(rel),
                    lambda: root.symlink("/etc/shadow", rel), lambda: root.rmtree(rel),
                    lambda: root.replace("lib/a", rel), lambda: root.open_file(rel, os.O_WRONLY | os.O_CREAT)):
            (root_dir / "lib/a").write_bytes(b"a")
            with pytest.raises(ConfinementError) as e:
                act()
            assert "symbolic link" in e.value.message and "nothing was written" in e.value.message
    _intact(outside, canary)


@pytest.mark.parametrize("rel", ["../outside/canary", "/tmp/x", "lib/../../outside/canary", "a/\0b"])
def test_paths_leaving_the_root_are_refused_before_any_call(mode, world, rel):
    root_dir, outside, canary = world
    with Root.open(root_dir, "the test root") as root:
        with pytest.raises(ConfinementError):
            root.write_atomic(rel, b"x")
    _intact(outside, canary)


def test_a_link_as_the_last_component_is_replaced_not_followed(mode, world):
    root_dir, outside, canary = world
    os.symlink(canary, root_dir / "lib/link")
    with Root.open(root_dir, "the test root") as root:
        root.write_atomic("lib/a", b"new")
        root.replace("lib/a", "lib/link")  # renames over the link itself
        assert root.read_bytes("lib/link") == b"new"
        with pytest.raises(OSError):
            root.open_file("lib/evil")  # O_NOFOLLOW on the last component too
    assert not (root_dir / "lib/link").is_symlink()
    _intact(outside, canary)


def test_a_symlink_planted_after_opening_is_still_refused(mode, world, tmp_path):
    root_dir, outside, canary = world
    (root_dir / "share").mkdir()
    with Root.open(root_dir, "the test root") as root:
        root.write_atomic("share/db", b"1")
        (root_dir / "share").rename(root_dir / "share.real")  # swapped between two uses
        os.symlink(outside, root_dir / "share")
        with pytest.raises(ConfinementError):
            root.write_atomic("share/db", b"2")
        with pytest.raises(ConfinementError):
            root.unlink("share/canary")
    _intact(outside, canary)


def test_modes_do_not_depend_on_the_umask(mode, tmp_path):
    old = os.umask(0o077)
    try:
        with Root.open(tmp_path, "the test root") as root:
            made = root.makedirs("a/b/c")
            root.write_atomic("a/b/c/f", b"x", 0o644)
            src = os.open(tmp_path / "a/b/c/f", os.O_RDONLY)
            try:
                how = root.copy_in(src, "a/g", mode=0o755)
            finally:
                os.close(src)
    finally:
        os.umask(old)
    assert made == ["a", "a/b", "a/b/c"]
    assert {stat.S_IMODE(os.stat(tmp_path / d).st_mode) for d in made} == {0o755}
    assert stat.S_IMODE(os.stat(tmp_path / "a/b/c/f").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "a/g").st_mode) == 0o755
    assert how in ("reflink", "copy_file_range")  # no sha256 asked: kernel-side


def test_an_untrusted_copy_is_hashed_and_a_mismatch_leaves_nothing(mode, tmp_path):
    (tmp_path / "src").write_bytes(b"payload" * 1000)
    good = hashlib.sha256(b"payload" * 1000).hexdigest()
    with Root.open(tmp_path, "the test root") as root:
        fd = os.open(tmp_path / "src", os.O_RDONLY)
        try:
            assert root.copy_in(fd, "ok", mode=0o644, sha256=good) == "copy"
            with pytest.raises(ContentMismatch):
                root.copy_in(fd, "bad", mode=0o644, sha256="0" * 64)
            assert root.copy_in(fd, "trusted", mode=0o644, sha256="0" * 64, trusted=True) != "copy"
        finally:
            os.close(fd)
    assert (tmp_path / "ok").read_bytes() == b"payload" * 1000
    assert not (tmp_path / "bad").exists()


def test_a_large_kernel_side_copy_is_split_in_two_and_each_chunk_starts_its_writeback(tmp_path, mocker):
    """kcopy.copy_file_range: the first chunk, then two halves copied by two threads; every
    chunk's writeback started as it lands; the bytes are the source's, whatever the split."""
    from rocmbuild.fs import kcopy
    mocker.patch.object(kcopy, "WRITEBACK_CHUNK", 64 * 1024)
    mocker.patch.object(kcopy, "PARALLEL_MIN", 256 * 1024)
    mocker.patch.object(kcopy, "CHUNK", 4096)
    mocker.patch("os.cpu_count", return_value=2)
    data = os.urandom(1024 * 1024 + 12345)  # not a multiple of any chunk
    (tmp_path / "src").write_bytes(data)
    started = mocker.spy(kcopy, "start_writeback")
    threads = mocker.spy(kcopy.threading, "Thread")
    with Root.open(tmp_path, "the test root") as root:
        fd = os.open(tmp_path / "src", os.O_RDONLY)
        try:
            how = root.copy_in(fd, "copy", mode=0o644, trusted=True)
        finally:
            os.close(fd)
    if how == "reflink":
        pytest.skip("this filesystem reflinks: no copy_file_range to split")
    assert how == "copy_file_range"
    assert (tmp_path / "copy").read_bytes() == data
    assert threads.call_count == 1
    ranges = sorted((c.args[1], c.args[2]) for c in started.call_args_list)
    assert ranges[0] == (0, 64 * 1024)  # the first chunk, copied alone
    covered = sum(n for _, n in ranges)
    assert covered == len(data)  # every byte's writeback was started, once


def test_a_copy_that_comes_up_short_raises_and_leaves_no_file(tmp_path, mocker):
    from rocmbuild.fs import disk, kcopy
    mocker.patch.object(kcopy, "WRITEBACK_CHUNK", 64 * 1024)
    mocker.patch.object(kcopy, "PARALLEL_MIN", 256 * 1024)
    mocker.patch("os.cpu_count", return_value=2)
    (tmp_path / "src").write_bytes(os.urandom(1024 * 1024))
    real = kcopy._copy_range
    mocker.patch.object(kcopy, "_copy_range_into", lambda failed, *a: None)  # the second half never lands
    with Root.open(tmp_path, "the test root") as root:
        fd = os.open(tmp_path / "src", os.O_RDONLY)
        try:
            if disk.reflink_supported(tmp_path):
                pytest.skip("this filesystem reflinks: no copy_file_range to cut short")
            with pytest.raises(OSError, match="the source changed during the copy"):
                root.copy_in(fd, "copy", mode=0o644, trusted=True)
        finally:
            os.close(fd)
    assert not (tmp_path / "copy").exists() and real is kcopy._copy_range
