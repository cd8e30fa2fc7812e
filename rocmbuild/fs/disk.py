"""Files: durable writes, hashing, copies, locks -- one place for each.

A durable write is a temp file in the same directory, fsync, ``os.replace``, fsync of the directory,
made by one writer, :meth:`rocmbuild.fs.root.Root.write_atomic`; :func:`atomic_write_bytes` here is
its form for a file named by its path (the builder's records in a build tree, a staged artifact's
manifest and identities, a lock file the user names): its directory opened as a root. Directories
that must survive a power cut (``journal/``, ``backups/<txn>/``, the state dir itself) are made by
:func:`makedirs_durable`: each new directory is followed by an fsync of its parent, the only place
its name is recorded.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from rocmbuild.fs import kcopy, locks
from rocmbuild import ui
from rocmbuild.errors import InputError


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
    """Write the file ``path`` whole or not at all, its directory made durably first: the directory
    opened as a root and :meth:`rocmbuild.fs.root.Root.write_atomic`, the one atomic writer."""
    from rocmbuild.fs.root import Root  # root.py builds on this module: imported when first used

    path = Path(path)
    makedirs_durable(path.parent)
    with Root.open(path.parent, "directory") as parent:
        parent.write_atomic(path.name, data, mode)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(Path(path), (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------
# reading and copying


CHUNK = kcopy.CHUNK


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
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


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



def sha256_fd(fd: int) -> str:
    h = hashlib.sha256()
    while chunk := os.read(fd, CHUNK):
        h.update(chunk)
    return h.hexdigest()


def copy_fd(src_fd: int, dst_fd: int, what: str, sha256: str | None, trusted: bool) -> str:
    """Copy ``src_fd``'s bytes into the empty ``dst_fd``. A ``trusted`` source goes kernel-side
    (``"reflink"``, else ``"copy_file_range"``: nothing hashed, its identity vouches for it);
    otherwise (or where neither works) the bytes are streamed through sha256 (``"copy"``) and
    compared with ``sha256``: :class:`ContentMismatch` when they differ."""
    if trusted:
        if _reflink(src_fd, dst_fd):
            return "reflink"
        if kcopy.copy_file_range(src_fd, dst_fd):
            return "copy_file_range"
    h = hashlib.sha256()
    os.lseek(src_fd, 0, os.SEEK_SET)
    os.lseek(dst_fd, 0, os.SEEK_SET)
    os.ftruncate(dst_fd, 0)
    written = 0
    while chunk := os.read(src_fd, CHUNK):
        h.update(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst_fd, view):]
        written += len(chunk)
        if written % kcopy.WRITEBACK_CHUNK == 0:
            kcopy.start_writeback(dst_fd, written - kcopy.WRITEBACK_CHUNK, kcopy.WRITEBACK_CHUNK)
    if sha256 is not None and h.hexdigest() != sha256:
        raise ContentMismatch(Path(what), sha256, h.hexdigest())
    return "copy"


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
# locks (the holder record and the wait policy are in rocmbuild/fs/locks.py)


class FileLock:
    """An exclusive (or shared) ``fcntl.flock`` on ``path``; a context manager.

    One policy for every lock (target, source cache, artifact key): a held lock fails at once
    with a :class:`~rocmbuild.errors.LockedError` naming its holder (exit 5), unless ``wait``
    (``--wait``: poll until free, saying at once who we wait for; ``--wait-timeout S``: give up
    after S seconds, exit 5). ``wait`` is a bool or a :class:`~rocmbuild.fs.locks.LockWait`.

    The exclusive holder writes a JSON holder record (pid, argv, since, host, process start) into
    the file after locking and empties it before unlocking, so a record found by the next taker
    means its writer ended without releasing (killed): that takeover is reported. A *shared* lock
    opens an existing file read-only and writes nothing (no file: nothing to exclude, nothing
    created). ``on_busy(holder, waited)`` builds the exception instead of the default one.
    """

    def __init__(self, path: Path, *, wait: "bool | locks.LockWait" = False, shared: bool = False,
                 what: str = "a lock", on_busy: Callable[..., BaseException] | None = None) -> None:
        self.path = Path(path)
        self.policy = locks.LockWait.of(wait)
        self.shared = shared
        self.what = what
        self.on_busy = on_busy
        self.fd: int | None = None

    @property
    def wait(self) -> bool:
        return self.policy.wait

    def holder(self) -> "locks.Holder":
        """Who holds the lock now, as its record says (checked against /proc)."""
        return locks.read_holder(self.path)

    def _try(self) -> bool:
        assert self.fd is not None, "the lock file is open"
        op = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        try:
            fcntl.flock(self.fd, op | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _open(self) -> bool:
        """Open the lock file, never through a symlink (the holder truncates and writes it)."""
        try:
            if self.shared:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
            else:
                makedirs_durable(self.path.parent)
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except FileNotFoundError:
            if not self.shared:
                raise
            self.fd = None
            return False
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise InputError(f"the lock file {self.path} is a symbolic link; rocmbuild will not write through it",
                             f"remove it (`rm {self.path}`): rocmbuild makes a plain file there") from None
        return True

    def _close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _busy(self, holder: "locks.Holder", waited: float | None) -> BaseException:
        if self.on_busy is not None:
            return self.on_busy(holder, waited)
        return locks.locked_error(self.what, self.path, holder, waited)

    def acquire(self) -> "FileLock":
        if not self._open():
            return self
        try:
            if not self._try():
                self._wait_for_it()
        except BaseException:
            self._close()
            raise
        if not self.shared:
            self._write_record()
        return self

    def _wait_for_it(self) -> None:
        """Fail at once, or poll until the lock is free (or the timeout is reached)."""
        holder = self.holder()
        if not self.wait:
            raise self._busy(holder, None)
        locks.say_waiting(self.what, self.path, holder, self.policy)
        start = time.monotonic()
        while True:
            time.sleep(locks.POLL)
            if self._try():
                break
            now = self.holder()  # empty for a moment while a holder lets go: keep the one we know
            if now.pid is not None and now.pid != holder.pid:  # another run took it meanwhile
                holder = now
                locks.say_waiting(self.what, self.path, holder, self.policy)
            waited = time.monotonic() - start
            if self.policy.timeout is not None and waited >= self.policy.timeout:
                raise self._busy(holder, waited)
        ui.info(f"got {self.what} after {time.monotonic() - start:.1f} s")

    def _write_record(self) -> None:
        assert self.fd is not None
        old = locks.parse_record(os.pread(self.fd, 64 * 1024, 0))
        if old is not None and old.pid != os.getpid():
            locks.say_taken_over(self.what, self.path, old)
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, locks.my_record(), 0)
        os.fsync(self.fd)

    def release(self) -> None:
        if self.fd is not None:
            try:
                if not self.shared:
                    os.ftruncate(self.fd, 0)  # released cleanly: no record is left to take over
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                self._close()

    def __enter__(self) -> "FileLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
