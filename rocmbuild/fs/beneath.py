"""Opening a directory beneath another without following any symlink: ``openat2(2)`` with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` where the kernel (and its
sandbox) has it, else a walk of ``O_NOFOLLOW | O_DIRECTORY`` opens. The primitive under
:mod:`rocmbuild.fs.root`; ``ROCMBUILD_NO_OPENAT2=1`` forces the walk (tests run both).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x01, 0x02, 0x04, 0x08
_SYS_OPENAT2 = 437  # the same number on every Linux architecture (the unified syscall table)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - no C library to call through
        return None


_LIBC = _libc()
_openat2_ok: bool | None = None


def open_beneath(dirfd: int, rel: str, flags: int, mode: int = 0) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0,
                   RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    if _LIBC is None:  # no C library to call through: has_openat2() said so
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS), rel)
    for _ in range(8):  # EAGAIN: a rename raced the lookup; the kernel asks us to try again
        fd: int = _LIBC.syscall(_SYS_OPENAT2, dirfd, os.fsencode(rel), ctypes.byref(how), ctypes.sizeof(how))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), rel)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), rel)


def has_openat2() -> bool:
    """Whether this kernel (and its sandbox) answers ``openat2``; else the O_NOFOLLOW walk."""
    global _openat2_ok
    if _openat2_ok is None:
        if _LIBC is None or os.environ.get("ROCMBUILD_NO_OPENAT2"):
            _openat2_ok = False
        else:
            try:
                top = os.open("/", DIR_FLAGS)
                try:
                    os.close(open_beneath(top, ".", os.O_RDONLY | os.O_DIRECTORY))
                finally:
                    os.close(top)
                _openat2_ok = True
            except OSError:
                _openat2_ok = False
    return _openat2_ok


def parts(rel: str | os.PathLike[str]) -> list[str]:
    """The components of a clean relative path; ValueError for anything else."""
    s = os.fspath(rel)
    if isinstance(s, bytes):
        s = os.fsdecode(s)
    if s in ("", "."):
        return []
    if s.startswith("/"):
        raise ValueError(f"{s!r} is absolute; a root takes paths relative to it")
    out = [p for p in s.split("/") if p not in ("", ".")]
    if ".." in out or "\0" in s:
        raise ValueError(f"{s!r} leaves its root ('..')")
    return out


def walk_open(dirfd: int, comps: list[str]) -> int:
    """Open the directory ``comps`` beneath ``dirfd`` one component at a time, never following."""
    fd = os.dup(dirfd)
    try:
        for c in comps:
            nfd = os.open(c, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise




def culprit(dirfd: int, rel: str) -> tuple[str, str] | None:
    """Which component of ``rel`` beneath ``dirfd`` is in the way: (its relative path, what it
    is) -- a symbolic link (with its text) or not a directory; None when none is."""
    fd = os.dup(dirfd)
    try:
        done: list[str] = []
        for c in parts(rel):
            st = os.stat(c, dir_fd=fd, follow_symlinks=False)
            done.append(c)
            if stat.S_ISLNK(st.st_mode):
                return "/".join(done), f"is a symbolic link (-> {os.readlink(c, dir_fd=fd)})"
            if not stat.S_ISDIR(st.st_mode):
                return "/".join(done), "is not a directory"
            nfd = os.open(c, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except (OSError, ValueError):
        pass
    finally:
        os.close(fd)
    return None
