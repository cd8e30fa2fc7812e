"""The one way to touch a root: a directory fd, and every path resolved beneath it at the moment
of use (docs/transactions.md, Confinement).

A :class:`Root` holds an open directory (a target prefix, a state dir, the cache home and its
dirs, an export destination). Each operation takes a path *relative* to it, resolved beneath
the fd when it acts (:mod:`rocmbuild.fs.beneath`: ``openat2`` with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS``, else an ``O_NOFOLLOW`` walk); the final component is acted on with the
``*at`` calls on its directory's fd. A path string checked earlier is never trusted later: a
symlink planted in any directory component between a check and a write makes the write fail
(:class:`ConfinementError`, exit 2), never land elsewhere.

Decisions:
* a relative path is a clean one: no ``..``, no empty, ``.`` or absolute component (refused
  before any system call); the root itself is opened once, by the path the caller names (the
  user's own choice of prefix, followed as the user named it), with ``O_DIRECTORY``;
* modes never depend on the umask: a directory created here is 0755 and a file's mode is set
  with ``fchmod``; run as root, a new file or directory takes the owner and group of its parent
  directory, a replacing file those of the file it replaces (:meth:`Root.own_like`);
* every new or removed directory entry is followed by an fsync of its directory (the only
  place the name is recorded), before the caller records the step as done;
* copies go kernel-side: a reflink (``FICLONE``) where the filesystem can, else
  ``copy_file_range(2)``; both only for a trusted source (a sealed cache file whose identity
  still holds); an untrusted source is streamed through sha256 and compared.

One module because :class:`Root` is one door: every operation a root offers resolves its path the
same way beneath the same fd, and a newcomer reads the whole door in one place.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat

from rocmbuild.fs.beneath import DIR_FLAGS, culprit, has_openat2, open_beneath, parts, walk_open
from rocmbuild.fs.disk import ContentMismatch, copy_fd, sha256_fd
from rocmbuild.errors import TargetError

__all__ = ["Root", "ConfinementError", "ContentMismatch", "has_openat2", "parts", "file_mode"]


class ConfinementError(TargetError):
    """A path did not resolve beneath its root without a symlink: nothing was written there."""


class Root:
    """An open directory; every path given to it is resolved beneath it when used."""

    def __init__(self, fd: int, path: str, what: str) -> None:
        self.fd, self.path, self.what = fd, str(path), what

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], what: str, *, create: bool = False, mode: int = 0o755) -> "Root":
        """Open ``path`` (as named) as a root; with ``create``, make it first (``mkdir -p``)."""
        p = os.fspath(path)
        if create:
            os.makedirs(p, mode=mode, exist_ok=True)
        return cls(os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), p, what)

    @classmethod
    def under(cls, base: str | os.PathLike[str], path: str | os.PathLike[str], what: str, *, create: bool = False) -> "Root":
        """The directory ``path`` (``base`` or beneath it) as a root: ``base``, a home the user names,
        opened as named, the rest beneath its fd with no symlink followed (the cache home's dirs)."""
        rel = os.path.relpath(os.fspath(path), os.fspath(base))
        with cls.open(base, what, create=create) as top:
            return top.sub("" if rel == "." else rel, what, create=create)

    def sub(self, rel: str, what: str | None = None, *, create: bool = False, mode: int = 0o755) -> "Root":
        """The directory ``rel`` beneath this root as a root of its own (made with ``create``)."""
        comps = self._checked(rel)
        if create:
            fd = os.dup(self.fd)
            try:
                for c in comps:
                    self._mkdir_at(fd, c, mode)
                    nfd = self._open_dir_at(fd, c, rel)
                    os.close(fd)
                    fd = nfd
            except BaseException:
                os.close(fd)
                raise
        else:
            fd = self._opendir(comps, rel)
        return Root(fd, os.path.join(self.path, *comps), what or self.what)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "Root":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a root dropped without close() must not leak its fd
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    # -- resolving -------------------------------------------------------------------------
    def show(self, rel: str | os.PathLike[str] = "") -> str:
        """``rel`` as a path a person reads (the root's path joined with it)."""
        return os.path.join(self.path, os.fspath(rel)) if os.fspath(rel) else self.path

    def _checked(self, rel: str | os.PathLike[str]) -> list[str]:
        try:
            return parts(rel)
        except ValueError as exc:
            raise ConfinementError(f"{self.what}: refused path {os.fspath(rel)!r}: {exc}; nothing was written",
                                   "the state or manifest naming it is corrupt or hostile") from None

    def _culprit(self, rel: str) -> str:
        found = culprit(self.fd, rel)
        return f"{self.show(found[0])} {found[1]}" if found else f"{self.show(rel)} does not resolve beneath it"

    def _refused(self, rel: str, exc: OSError) -> BaseException:
        if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
            return ConfinementError(
                f"{self._culprit(rel)}: rocmbuild acts in {self.what} ({self.path}) only through real "
                "directories beneath it; nothing was written there",
                "replace that symlink by a real directory (or remove what is in the way), then run again",
                details={"path": self.show(rel), "root": self.path})
        return exc

    def _open_dir_at(self, fd: int, name: str, rel: str) -> int:
        try:
            return os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise self._refused(rel, exc) from None

    def _opendir(self, comps: list[str], rel: str) -> int:
        if not comps:
            return os.dup(self.fd)
        try:
            if has_openat2():
                return open_beneath(self.fd, "/".join(comps), os.O_RDONLY | os.O_DIRECTORY)
            return walk_open(self.fd, comps)
        except OSError as exc:
            err = self._refused(rel, exc)
            if err is exc:
                raise
            raise err from None

    def parent(self, rel: str | os.PathLike[str], *, create: bool = False, mode: int = 0o755) -> "_Parent":
        """A context: ``(dir_fd, name)`` of ``rel``'s directory (resolved now) and its last name."""
        comps = self._checked(rel)
        if not comps:
            raise ConfinementError(f"{self.what}: the root itself cannot be acted on as a file", "")
        if create and len(comps) > 1:
            self.makedirs("/".join(comps[:-1]), mode)
        return _Parent(self._opendir(comps[:-1], os.fspath(rel)), comps[-1])

    # -- reading ---------------------------------------------------------------------------
    def lstat(self, rel: str | os.PathLike[str] = "") -> os.stat_result | None:
        """``rel``'s own status (never followed); None when it (or a directory on its way) is absent."""
        comps = self._checked(rel)
        if not comps:
            return os.fstat(self.fd)
        try:
            with self.parent(rel) as (fd, name):
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def readlink(self, rel: str | os.PathLike[str]) -> str:
        with self.parent(rel) as (fd, name):
            return os.readlink(name, dir_fd=fd)

    def listdir(self, rel: str | os.PathLike[str] = "") -> list[str]:
        fd = self._opendir(self._checked(rel), os.fspath(rel))
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def open_file(self, rel: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
        """An fd of the file ``rel`` (the last component never followed either)."""
        with self.parent(rel) as (fd, name):
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)

    def read_bytes(self, rel: str | os.PathLike[str]) -> bytes:
        fd = self.open_file(rel)
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def sha256(self, rel: str | os.PathLike[str]) -> str:
        fd = self.open_file(rel)
        try:
            return sha256_fd(fd)
        finally:
            os.close(fd)

    # -- writing ---------------------------------------------------------------------------
    def fsync(self, rel: str | os.PathLike[str] = "") -> None:
        fd = self._opendir(self._checked(rel), os.fspath(rel))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def own_like(fd: int, ref: os.stat_result | None) -> None:
        """Give the open file ``fd`` the owner and group of ``ref`` (only as root: nobody else may)."""
        if ref is None or os.geteuid() != 0:
            return
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid) != (ref.st_uid, ref.st_gid):
            os.fchown(fd, ref.st_uid, ref.st_gid)

    def _mkdir_at(self, fd: int, name: str, mode: int) -> bool:
        try:
            os.mkdir(name, 0o700, dir_fd=fd)
        except FileExistsError:
            return False
        nfd = self._open_dir_at(fd, name, name)
        try:
            os.fchmod(nfd, mode)  # not the umask's say
            self.own_like(nfd, os.fstat(fd))
        finally:
            os.close(nfd)
        os.fsync(fd)  # the new entry
        return True

    def mkdir(self, rel: str | os.PathLike[str], mode: int = 0o755) -> bool:
        """Make the directory ``rel`` (its parent must exist); False when it already exists."""
        with self.parent(rel) as (fd, name):
            return self._mkdir_at(fd, name, mode)

    def makedirs(self, rel: str | os.PathLike[str], mode: int = 0o755) -> list[str]:
        """``mkdir -p rel`` beneath the root; the directories it made, outermost first."""
        made, fd = [], os.dup(self.fd)
        try:
            for i, c in enumerate(self._checked(rel)):
                if self._mkdir_at(fd, c, mode):
                    made.append("/".join(self._checked(rel)[: i + 1]))
                nfd = self._open_dir_at(fd, c, os.fspath(rel))
                os.close(fd)
                fd = nfd
        finally:
            os.close(fd)
        return made

    def unlink(self, rel: str | os.PathLike[str], *, sync: bool = True) -> bool:
        """Remove the file or link ``rel``; False when it was not there. The directory is fsynced."""
        try:
            with self.parent(rel) as (fd, name):
                os.unlink(name, dir_fd=fd)
                if sync:
                    os.fsync(fd)
                return True
        except FileNotFoundError:
            return False

    def rmdir(self, rel: str | os.PathLike[str], *, sync: bool = True) -> bool:
        """Remove the empty directory ``rel``; False when absent or not empty."""
        try:
            with self.parent(rel) as (fd, name):
                os.rmdir(name, dir_fd=fd)
                if sync:
                    os.fsync(fd)
                return True
        except (FileNotFoundError, OSError) as exc:
            if isinstance(exc, FileNotFoundError) or exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                return False
            raise

    def rmtree(self, rel: str | os.PathLike[str]) -> None:
        """Remove ``rel`` and everything beneath it, never following a link out."""
        st = self.lstat(rel)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            self.unlink(rel, sync=False)
            return
        names = self.listdir(rel)
        if names and not st.st_mode & stat.S_IWUSR:  # a read-only directory (a sealed tree): let go of it
            fd = self._opendir(self._checked(rel), os.fspath(rel))
            try:
                os.fchmod(fd, stat.S_IMODE(st.st_mode) | stat.S_IWUSR | stat.S_IXUSR)
            finally:
                os.close(fd)
        for name in names:
            self.rmtree(f"{os.fspath(rel)}/{name}")
        self.rmdir(rel, sync=False)

    def symlink(self, text: str, rel: str | os.PathLike[str]) -> None:
        """Make the link ``rel`` -> ``text`` (a leftover ``rel`` is replaced); fsync its directory."""
        with self.parent(rel) as (fd, name):
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            os.symlink(text, name, dir_fd=fd)
            ref = os.fstat(fd)
            if os.geteuid() == 0 and (ref.st_uid, ref.st_gid) != (0, 0):  # a link takes its directory's owner
                os.chown(name, ref.st_uid, ref.st_gid, dir_fd=fd, follow_symlinks=False)
            os.fsync(fd)

    def replace(self, src: str | os.PathLike[str], dst: str | os.PathLike[str], *, into: "Root | None" = None,
                sync: bool = True) -> None:
        """``renameat`` ``src`` over ``dst`` (in ``into``, this root by default): one atomic step."""
        other = into or self
        with self.parent(src) as (sfd, sname), other.parent(dst) as (dfd, dname):
            os.replace(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
            if sync:
                os.fsync(dfd)
                if other is not self:
                    os.fsync(sfd)

    def link_to(self, src: str | os.PathLike[str], into: "Root", dst: str | os.PathLike[str]) -> None:
        """Hardlink the file ``src`` as ``dst`` in ``into`` (``linkat``; a leftover ``dst`` is
        replaced). OSError(EXDEV etc.) when the filesystem will not: the caller copies."""
        with self.parent(src) as (sfd, sname), into.parent(dst) as (dfd, dname):
            try:
                os.unlink(dname, dir_fd=dfd)
            except FileNotFoundError:
                pass
            os.link(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd, follow_symlinks=False)
            os.fsync(dfd)

    def write_atomic(self, rel: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
        """Write ``rel`` whole or not at all: a temp beside it, fsync, rename, fsync the directory.
        The one atomic writer: :func:`rocmbuild.fs.disk.atomic_write_bytes` (a file named by its
        path) opens the file's directory as a root and calls this."""
        with self.parent(rel, create=True) as (dfd, name):
            tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"  # unique: two threads, one name
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dfd)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fchmod(fd, mode)
                    self.own_like(fd, os.fstat(dfd))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException as exc:
                if isinstance(exc, OSError) and exc.filename is None:
                    exc.filename = self.show(rel)
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                raise
            os.fsync(dfd)

    def copy_in(self, src_fd: int, rel: str | os.PathLike[str], *, mode: int, sha256: str | None = None,
                trusted: bool = False, owner: os.stat_result | None = None,
                mtime_ns: int | None = None, durable: bool = True) -> str:
        """Write ``src_fd``'s bytes as the new file ``rel`` (a leftover is replaced), mode ``mode``,
        owned like ``owner`` (or its directory). A trusted source (or no ``sha256`` to check) is
        copied kernel-side (``"reflink"`` or ``"copy_file_range"``); else its bytes are streamed
        through sha256 (``"copy"``) and a mismatch raises :class:`ContentMismatch` (the partial
        file removed). The file is fsynced (``durable=False``: its writeback is only started, and
        the caller fsyncs it before anything depends on its bytes surviving a power cut: the swap
        does before its commit); the caller renames it into place."""
        with self.parent(rel) as (dfd, name):
            try:
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dfd)
            try:
                how = copy_fd(src_fd, fd, self.show(rel), sha256, trusted or sha256 is None)
                os.fchmod(fd, mode)
                self.own_like(fd, owner or os.fstat(dfd))
                if mtime_ns is not None:
                    os.utime(fd, ns=(mtime_ns, mtime_ns))
                if durable:
                    os.fsync(fd)
            except BaseException:
                os.close(fd)
                try:
                    os.unlink(name, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                raise
            os.close(fd)
            os.fsync(dfd)
            return how


class _Parent:
    def __init__(self, fd: int, name: str) -> None:
        self.fd, self.name = fd, name

    def __enter__(self) -> tuple[int, str]:
        return self.fd, self.name

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def file_mode(src_mode: int) -> int:
    """A placed file's mode: 0755 when the artifact's file is executable by anyone, else 0644."""
    return 0o755 if src_mode & 0o111 else 0o644

