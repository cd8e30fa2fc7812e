"""Files: durable writes, hashing, copies, locks -- one place for each.

Every write that matters goes through :func:`atomic_write_bytes`: a temp file in the same
directory, fsync, ``os.replace``, fsync of the directory. Directories that must survive a power cut
(``journal/``, ``backups/<txn>/``, the state dir itself) are made by :func:`makedirs_durable`: each
new directory is followed by an fsync of its parent, the only place its name is recorded.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durable(path: Path) -> None:
    """``mkdir -p path``, fsyncing the parent of every directory it creates (a new directory's
    name lives in its parent; without that fsync a power cut can lose it, and what is inside)."""
    path = Path(path)
    missing = []
    d = path
    while not d.is_dir():
        missing.append(d)
        if d.parent == d:
            break
        d = d.parent
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            if not d.is_dir():
                raise
            continue
        fsync_dir(d.parent)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    path = Path(path)
    makedirs_durable(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(Path(path), (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))




# --------------------------------------------------------------------------------------------
# reading and copying


CHUNK = 1024 * 1024


def sha256_file(path: Path, bufsize: int = CHUNK) -> str:
    """The sha256 of a file's bytes, streamed (a real libMIOpen is about 1 GiB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(bufsize):
            h.update(chunk)
    return h.hexdigest()


def nearest_existing(path: Path) -> Path:
    """``path`` itself, or its nearest ancestor that exists (where a new file would be made)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def link_or_copy(src: Path, dst: Path) -> bool:
    """Hardlink ``src`` to ``dst`` (replacing a leftover ``dst``); copy across filesystems.
    Returns True when bytes were copied."""
    _unlink(dst)
    try:
        os.link(src, dst)
        return False
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            raise
    tmp = dst.parent / (dst.name + ".part")
    _unlink(tmp)
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        shutil.copyfileobj(fi, fo, CHUNK)
        fo.flush()
        shutil.copystat(src, tmp)  # mode and mtime, so the copy's identity can be compared
        os.fsync(fo.fileno())  # data and the inode (mode, mtime) together
    os.replace(tmp, dst)
    return True


# --------------------------------------------------------------------------------------------
# an own copy: a reflink where the filesystem can, else a copy hashed on the way

FICLONE = 0x40049409  # _IOW(0x94, 9, int): share the source's extents, copy-on-write
_NO_REFLINK = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EINVAL, errno.ENOTTY, errno.ENOSYS,
                         errno.EPERM, errno.EBADF})


class ContentMismatch(Exception):
    """The bytes read from ``path`` do not hash to the sha256 they were expected to have."""

    def __init__(self, path: Path, expected: str, actual: str) -> None:
        super().__init__(f"{path}: sha256 {actual}, expected {expected}")
        self.path, self.expected, self.actual = Path(path), expected, actual


def _reflink(src_fd: int, dst_fd: int) -> bool:
    try:
        fcntl.ioctl(dst_fd, FICLONE, src_fd)
        return True
    except OSError as exc:
        if exc.errno not in _NO_REFLINK:
            raise
        return False


def _hashing_copy(src_fd: int, dst_fd: int, path: Path, sha256: str | None) -> None:
    h = hashlib.sha256()
    while chunk := os.read(src_fd, CHUNK):
        h.update(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst_fd, view):]
    if sha256 is not None and h.hexdigest() != sha256:
        raise ContentMismatch(path, sha256, h.hexdigest())


def own_copy(src: Path, dst: Path, *, sha256: str | None = None,
             trusted: Callable[[os.stat_result], bool] | None = None) -> str:
    """Give ``dst`` its own inode holding ``src``'s bytes (replacing a leftover ``dst``); never a
    hardlink. Returns ``"reflink"`` or ``"copy"``.

    A reflink (``FICLONE``) reads no byte, so it is taken only when ``trusted(fstat(src))`` says
    the source is still the file that was checked (or when no ``sha256`` is expected at all); else,
    and wherever the filesystem cannot reflink, the bytes are streamed through sha256 and compared
    with ``sha256``: a mismatch removes the partial copy and raises :class:`ContentMismatch`. The
    copy keeps ``src``'s mtime and its mode plus owner write (cache files are read-only; the
    target's copy is an ordinary file). It is fsynced before it is renamed to ``dst``.
    """
    src, dst = Path(src), Path(dst)
    tmp = dst.parent / (dst.name + ".part")
    _unlink(dst)
    _unlink(tmp)
    sfd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(sfd)
        dfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            may_clone = sha256 is None or (trusted is not None and trusted(st))
            how = "reflink" if may_clone and _reflink(sfd, dfd) else "copy"
            if how == "copy":
                _hashing_copy(sfd, dfd, src, sha256)
            os.fchmod(dfd, (st.st_mode & 0o7777) | 0o200)
            os.utime(dfd, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        _unlink(tmp)
        raise
    finally:
        os.close(sfd)
    os.replace(tmp, dst)
    return how


def reflink_supported(directory: Path) -> bool:
    """Whether files in ``directory`` can be reflinked (tried on two temp files, removed after)."""
    fd1, p1 = tempfile.mkstemp(prefix=".rocmbuild-reflink-", dir=directory)
    fd2, p2 = tempfile.mkstemp(prefix=".rocmbuild-reflink-", dir=directory)
    try:
        os.write(fd1, b"x" * 4096)
        return _reflink(fd1, fd2)
    finally:
        for fd, p in ((fd1, p1), (fd2, p2)):
            os.close(fd)
            _unlink(Path(p))


def make_read_only(root: Path) -> None:
    """Clear every write bit of the regular files below ``root`` (directories keep theirs: see
    docs/cache.md, "Immutable")."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o222:
                os.chmod(p, stat.S_IMODE(st.st_mode) & 0o7555)


# --------------------------------------------------------------------------------------------
# locks


class FileLock:
    """An exclusive (or shared) ``fcntl.flock`` on ``path``; a context manager.

    The exclusive holder writes its pid into the file after locking, so a refused locker can
    name it. ``wait=False`` fails at once: ``on_busy(holder)`` builds the exception to raise.
    A *shared* lock opens an existing file read-only and writes nothing (no file: nothing to
    exclude, nothing created).
    """

    def __init__(self, path: Path, *, wait: bool = True, shared: bool = False,
                 on_busy: Callable[[str], BaseException] | None = None) -> None:
        self.path = Path(path)
        self.wait = wait
        self.shared = shared
        self.on_busy = on_busy
        self.fd: int | None = None

    def holder(self) -> str:
        try:
            text = self.path.read_text().strip()
        except OSError:
            text = ""
        return text or "unknown"

    def acquire(self) -> "FileLock":
        if self.shared:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                self.fd = None
                return self
        else:
            makedirs_durable(self.path.parent)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        op = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        try:
            fcntl.flock(self.fd, op if self.wait else op | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self.holder()
            os.close(self.fd)
            self.fd = None
            if self.on_busy is None:
                raise
            raise self.on_busy(holder) from None
        if not self.shared:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
            os.fsync(self.fd)
        return self

    def release(self) -> None:
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None

    def __enter__(self) -> "FileLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
