"""Kernel-side copies: ``copy_file_range(2)`` with the writeback started as the bytes land.

Used by :func:`rocmbuild.fs.disk.copy_fd` for a trusted source (a reflink failed or is not
possible). On ext4 the copy is a page-cache memcpy and the new file's bytes reach the disk only
at its fsync: here each WRITEBACK_CHUNK's writeback is started at once (``sync_file_range(2)``,
no wait), so the disk writes while the copy, the swap and the verification go on, and a large
file's two halves are copied by two threads (the syscall releases the GIL).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import threading
from typing import Callable

CHUNK = 1024 * 1024
_NO_CFR = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF,
                     errno.EPERM})
WRITEBACK_CHUNK = 64 * CHUNK
_SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start writeback of the range's dirty pages, do not wait


@functools.cache
def _sync_file_range() -> Callable[..., int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def start_writeback(fd: int, offset: int, count: int) -> None:
    """Ask the kernel to start writing ``fd``'s dirty pages in the range to disk now, without
    waiting (``sync_file_range(2)`` with SYNC_FILE_RANGE_WRITE). Best effort, and no durability
    promise: the fsync that follows still makes the file durable, but finds most of it written,
    so the disk works while the copy (and what comes after it) goes on."""
    fn = _sync_file_range()
    if fn is not None:
        fn(fd, offset, count, _SYNC_FILE_RANGE_WRITE)  # an error only means no head start


PARALLEL_MIN = 128 * CHUNK  # a kernel-side copy this large is split between two threads


def _copy_range(src_fd: int, dst_fd: int, lo: int, hi: int) -> None:
    """``copy_file_range`` bytes ``lo``..``hi`` in WRITEBACK_CHUNK steps, starting each one's
    writeback at once (:func:`start_writeback`): the disk writes while the copy goes on."""
    off = lo
    while off < hi and (n := os.copy_file_range(src_fd, dst_fd, min(hi - off, WRITEBACK_CHUNK), off, off)):
        start_writeback(dst_fd, off, n)
        off += n


def copy_file_range(src_fd: int, dst_fd: int) -> bool:
    """``copy_file_range(2)`` the whole of ``src_fd`` (kernel-side); False when it cannot be used.

    The first chunk tells whether it can; the rest of a large file (``PARALLEL_MIN``) is copied
    as two halves by two threads (the syscall releases the GIL; on ext4 the copy is a page-cache
    memcpy, so two cores halve it), each chunk's writeback started as it lands."""
    size = os.fstat(src_fd).st_size
    first = min(size, WRITEBACK_CHUNK)
    try:
        _copy_range(src_fd, dst_fd, 0, first)
    except OSError as exc:
        if exc.errno not in _NO_CFR or os.fstat(dst_fd).st_size:
            raise
        return False
    if size - first >= PARALLEL_MIN and (os.cpu_count() or 1) > 1:
        mid = first + (size - first) // 2 // CHUNK * CHUNK
        failed: list[BaseException] = []
        other = threading.Thread(target=_copy_range_into, args=(failed, src_fd, dst_fd, mid, size),
                                 name="rocmbuild-copy")
        other.start()
        try:
            _copy_range(src_fd, dst_fd, first, mid)
        finally:
            other.join()
        if failed:
            raise failed[0]
    else:
        _copy_range(src_fd, dst_fd, first, size)
    if (got := os.fstat(dst_fd).st_size) != size:  # the source shrank under us: never a short copy
        raise OSError(errno.EIO, f"copied {got} bytes of {size}: the source changed during the copy")
    return True


def _copy_range_into(failed: list[BaseException], *args: int) -> None:
    try:
        _copy_range(*args)
    except BaseException as exc:  # noqa: BLE001 - handed to the copying thread, which raises it
        failed.append(exc)
