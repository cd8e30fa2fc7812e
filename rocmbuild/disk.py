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
    except BaseException as exc:
        if isinstance(exc, OSError) and exc.filename is None:  # a write() names no file: say which
            exc.filename = str(path)
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
