"""The loop-mounted filesystems of benchmarks/swap.py: an ext4 and a reflink one (XFS, else
btrfs) on images in the work dir, burned in (every block written once through the filesystem,
fsynced, then freed: :func:`burn_in`), so that every procedure measured meets blocks of one kind.
The decisions are in benchmarks/swap.py's docstring ("Like with like") and on each function."""

from __future__ import annotations

import errno
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rocmbuild.proc import runner

MiB = 1 << 20


def burn_in(mnt: Path) -> tuple[int, float]:
    """Write every free block of the filesystem at ``mnt`` once (a file of random MiB blocks up to
    ENOSPC, fsynced), then delete it: (bytes written, seconds).

    Why: this VM's disk writes a block the filesystem has not written before several times slower
    than one it has (1 GiB onto fresh blocks 3.2-3.6 s, onto just-freed ones 0.6-0.7 s, measured
    here, also inside a loop-mounted ext4 whose backing file was fully written before ``mkfs``). A
    procedure that happens to meet fresh blocks would pay the VM's penalty, not its own cost. After
    the burn-in every block of the filesystem is one it has written, for all three procedures."""
    block = os.urandom(MiB)
    path = mnt / "burn-in"
    written, start = 0, time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        while True:
            try:
                n = os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
            if n < len(block):  # the last partial write: the next one fails with ENOSPC
                written += n
                continue
            written += n
        os.fsync(fd)
    finally:
        os.close(fd)
    path.unlink()
    os.sync()
    return written, time.perf_counter() - start


@contextmanager
def loop_fs(base: Path, name: str, mkfs: list[str], image_bytes: int) -> Iterator[tuple[Path | None, str]]:
    """``mkfs`` on an image of ``image_bytes`` in ``base``, loop-mounted and burned in
    (:func:`burn_in`): (its mount point, "") or (None, why there is none). Unmounted, detached and
    removed afterwards.

    Decisions: the image is allocated whole (``posix_fallocate``: never sparse, so it cannot run
    out of room half-way) and ``mkfs`` is told not to discard it. The loop device does direct I/O
    to its image (``losetup --direct-io=on``), as a disk does: a buffered loop device caches every
    byte twice (its filesystem's page cache and the image's), and an fsync inside it waits on the
    outer filesystem's write-back too (1 GiB fsync'd 2.1-4.1 s buffered, 0.76-0.95 s direct, on
    the same burned-in image here). Where the kernel refuses direct I/O the device is buffered
    and the output says so."""
    img, mnt = base / f"{name}.img", base / f"{name}-mnt"
    fd = os.open(img, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, image_bytes)
    finally:
        os.close(fd)
    mnt.mkdir()
    dev, io = None, "direct I/O"
    try:
        try:
            runner.run([*mkfs, img], what=f"{mkfs[0]} failed")
            dev = _losetup("--direct-io=on", img)
            if dev is None:  # an old kernel or a backing fs without O_DIRECT: buffered
                dev, io = _losetup(img), "buffered I/O"
            if dev is None:
                raise RuntimeError("losetup --find --show failed")
            runner.run(["mount", dev, mnt], what="mount failed")
        except Exception as exc:  # noqa: BLE001 - no loop devices (not root, a container): say so
            yield None, f"this machine does not allow a loop-mounted {mkfs[0][5:]} image ({exc})"
            return
        try:
            written, seconds = burn_in(mnt)
            print(f"\n{name}: a loop-mounted {mkfs[0][5:]} ({io}) on a {image_bytes // MiB} MiB image, burned in "
                  f"({written // MiB} MiB written once and fsynced in {seconds:.1f} s, "
                  f"{written / MiB / seconds:.0f} MiB/s, then deleted)", flush=True)
            yield mnt, ""
        finally:
            runner.run(["umount", mnt], what="umount failed")
    finally:
        if dev:
            runner.run(["losetup", "-d", dev], what="losetup -d failed")
        img.unlink()


def _losetup(*args: str | Path) -> str | None:
    """``losetup --find --show ARGS``: the loop device attached, or None."""
    done = runner.capture(["losetup", "--find", "--show", *args])
    return done.stdout.strip() or None if done.returncode == 0 else None


def image_size(size: int) -> int:
    """Room for the whole apply's world at the peak (fixture builds, cache, stock library, two
    envs, the floor's write) with a margin."""
    return 10 * size + 3072 * MiB


@contextmanager
def reflink_fs(base: Path, size: int) -> Iterator[tuple[Path | None, str]]:
    """A loop-mounted XFS (reflink=1) or btrfs image in ``base`` (see :func:`loop_fs`)."""
    mkfs = next(([t, *opts] for t, opts in (("mkfs.xfs", ["-q", "-K", "-m", "reflink=1"]), ("mkfs.btrfs", ["-q", "--nodiscard"]))
                 if runner.which(t)), None)
    if mkfs is None:
        yield None, "no mkfs.xfs or mkfs.btrfs here (apt-get install xfsprogs btrfs-progs)"
        return
    with loop_fs(base, "reflink", mkfs, image_size(size)) as got:
        yield got


@contextmanager
def ext4_fs(base: Path, size: int) -> Iterator[tuple[Path | None, str]]:
    """A loop-mounted ext4 image in ``base`` (see :func:`loop_fs`): the figure the ext4 goals are
    judged on. Its inode tables and journal are written by ``mkfs`` itself (no lazy init running
    in the background during the runs)."""
    if not runner.which("mkfs.ext4"):
        yield None, "no mkfs.ext4 here (apt-get install e2fsprogs)"
        return
    mkfs = ["mkfs.ext4", "-q", "-F", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0"]
    with loop_fs(base, "ext4", mkfs, image_size(size)) as got:
        yield got
