"""File actions: ReplaceFile, AddFile, ReplaceLink, RemoveFile -- stage / backup / apply / revert / discard.

Decisions (each step in full: docs/transactions.md, "File actions"):
* every step is idempotent (recovery re-runs them) and every change of a destination is one
  ``os.replace``: a destination is never missing, a process that maps the old file keeps its inode;
* new content from an artifact is staged beside the destination as the target's *own* inode,
  never a hardlink or symlink into the cache (a user's in-place ``cp`` over the target must not
  reach the cache or any other env): a reflink where the filesystem can and the cache file's
  identity is still the one recorded at publish, else a copy hashed on the way and compared with
  the manifest (a mismatch quarantines the artifact: exit 3, the target unchanged); a restore
  from a backup is a hardlink of it (the original inode back); each new directory entry is fsynced;
* an original is backed up by hardlink (O(1), nothing hashed); whether a backup is a copy is
  journaled, since a restore from a copy is a new inode (:meth:`FileAction.is_before`);
* a revert puts the original inode back by rename; an added path is removed only if it is what
  rocmbuild placed there.
"""

from __future__ import annotations

import abc
import errno
import os
import stat
from pathlib import Path

from rocmbuild.store import cache
from rocmbuild.store.artifact import MANIFEST, Artifact, Manifest, artifact_root, trust_check
from rocmbuild.fs.disk import ContentMismatch, read_json
from rocmbuild.errors import FetchError, InputError
from rocmbuild.fs.root import ConfinementError, Root, file_mode
from rocmbuild.swap.pathstate import PathState, same_kind
from rocmbuild.swap.plan import Action
from rocmbuild.swap.roots import Roots, state_sub

_NO_LINK = (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES)


def staged_name(dest: Path, txn: str) -> Path:
    return Path(dest).parent / f".{Path(dest).name}.rocmbuild-new-{txn}"


def restore_name(dest: Path, txn: str) -> Path:
    return Path(dest).parent / f".{Path(dest).name}.rocmbuild-old-{txn}"


def backup_rel(txn: str, index: int, dest: str | Path) -> str:
    """Where a transaction's backup of one path lives, relative to the state dir."""
    return f"backups/{txn}/{index:03d}-{Path(dest).name}"


def state_at(root: Root, rel: str) -> PathState:
    """What ``rel`` is beneath ``root`` now (never followed; a directory on its way that is a
    symlink is a :class:`~rocmbuild.fs.root.ConfinementError`)."""
    try:
        st = root.lstat(rel)
    except (FileNotFoundError, NotADirectoryError):
        return PathState("absent")
    if st is None:
        return PathState("absent")
    return PathState.from_stat(st, root.readlink(rel) if stat.S_ISLNK(st.st_mode) else None)


def link_or_copy_at(src: Root, src_rel: str, dst: Root, dst_rel: str) -> bool:
    """Hardlink ``src_rel`` as ``dst_rel`` (a leftover replaced); a copy keeping mode, owner and
    mtime where the filesystem will not link. True when bytes were copied."""
    try:
        src.link_to(src_rel, dst, dst_rel)
        return False
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
    fd = src.open_file(src_rel)
    try:
        st = os.fstat(fd)
        dst.copy_in(fd, dst_rel + ".part", mode=stat.S_IMODE(st.st_mode), trusted=True, owner=st,
                    mtime_ns=st.st_mtime_ns)
    finally:
        os.close(fd)
    dst.replace(dst_rel + ".part", dst_rel)
    return True


class FileAction(abc.ABC):
    """Base: one destination path of one transaction, acted on only through its roots."""

    def __init__(self, action: Action, txn: str, roots: Roots, index: int, *,
                 backup_copied: bool = False) -> None:
        self.action = action
        self.backup_copied = backup_copied  # the backup is a copy (another filesystem), not the inode
        self.txn = txn
        self.roots = roots
        self.dest = Path(action.path)  # for messages; every use goes through self.rel
        self.rel = roots.rel(action.path)
        self.staged = str(staged_name(Path(self.rel), txn))
        self.restore_tmp = str(restore_name(Path(self.rel), txn))
        self.backup = backup_rel(txn, index, self.dest)
        self.before = action.before

    def now(self) -> PathState:
        return state_at(self.roots.target, self.rel)

    # -- stage -----------------------------------------------------------------------------
    def _make_dirs(self) -> None:
        for d in self.action.create_dirs:
            self.roots.target.mkdir(self.roots.rel(d), 0o755)  # fsyncs its parent

    @abc.abstractmethod
    def stage(self) -> PathState:
        """Place the new content under the temp name; returns its identity (the "after")."""

    # -- backup ----------------------------------------------------------------------------
    def needs_backup(self) -> bool:
        return self.before.kind == "file"

    def backup_file(self) -> bool:
        """Hardlink the original into the backups dir. Returns True when bytes were copied."""
        if not self.needs_backup():
            return False
        state_sub(self.roots.state, os.path.dirname(self.backup), create=True).close()  # never a symlink
        existing = state_at(self.roots.state, self.backup)
        if existing.kind == "file" and (existing.dev, existing.inode) == (self.before.dev, self.before.inode):
            return False  # done already (idempotent)
        if existing.kind == "file" and existing.size == self.before.size and \
                existing.mtime_ns == self.before.mtime_ns and existing.dev != self.before.dev:
            self.backup_copied = True
            return False  # a cross-filesystem copy made before
        now = self.now()
        if now.kind != "file" or (now.dev, now.inode) != (self.before.dev, self.before.inode):
            raise OSError(errno.ESTALE, f"{self.dest} changed since it was planned", str(self.dest))
        self.backup_copied = link_or_copy_at(self.roots.target, self.rel, self.roots.state, self.backup)
        return self.backup_copied

    def is_before(self, now: PathState) -> bool:
        """``now`` is this path's before state: the same inode; or, when the backup is a copy
        (another filesystem, so a restore made a new inode), the same size and mode and -- only
        then, lazily -- the same sha256 as the backup. (Size + mtime_ns + mode alone cannot tell
        two builds apart: reproducible builds share an mtime, and same-size versions exist.)"""
        b = self.before
        kind = same_kind(now, b)
        if kind is not None:
            return kind
        if (now.dev, now.inode) == (b.dev, b.inode):
            return True
        if not self.backup_copied or (now.size, now.mode) != (b.size, b.mode):
            return False
        try:
            return self.roots.target.sha256(self.rel) == self.roots.state.sha256(self.backup)
        except OSError:
            return False

    # -- apply -----------------------------------------------------------------------------
    def apply(self) -> None:
        self.roots.target.replace(self.staged, self.rel)

    def make_durable(self, after: PathState | None) -> None:  # noqa: B027 (a no-op unless overridden, not abstract)
        """Before the commit: the placed file's bytes on disk (its copy only started their
        writeback, so the disk worked during the swap and the verification). Nothing to do for
        a link or a removal (their directories are fsynced); a file that is not the inode this
        transaction placed raises (the transaction is rolled back)."""

    # -- revert ----------------------------------------------------------------------------
    def revert(self, after: PathState | None) -> str | None:
        """Put ``before`` back. Returns a message when something was done, "" when it already
        was, and raises when it cannot be done."""
        now, b, troot = self.now(), self.before, self.roots.target
        if b.kind == "file":
            if self.is_before(now):
                return ""
            if state_at(self.roots.state, self.backup).kind != "file":
                raise OSError(errno.ENOENT, f"cannot restore {self.dest}: backup "
                              f"{self.roots.state.show(self.backup)} is missing", self.roots.state.show(self.backup))
            troot.makedirs(os.path.dirname(self.rel))
            link_or_copy_at(self.roots.state, self.backup, troot, self.restore_tmp)
            troot.replace(self.restore_tmp, self.rel)
            return f"restored {self.dest}"
        if b.kind == "link":
            if now.kind == "link" and now.target == b.target:
                return ""
            troot.makedirs(os.path.dirname(self.rel))
            troot.symlink(b.target or "", self.restore_tmp)
            troot.replace(self.restore_tmp, self.rel)
            return f"restored link {self.dest} -> {b.target}"
        if b.kind == "absent":
            if now.kind == "absent":
                return ""
            ours = after is not None and now.same(after)
            if not ours and self.action.link is not None:
                ours = now.kind == "link" and now.target == self.action.link
            if not ours:
                return f"left {self.dest} alone: it is not what rocmbuild placed there ({now.describe()})"
            troot.unlink(self.rel)  # its directory fsynced before the journal says finished
            return f"removed {self.dest}"
        return ""

    def remove_created_dirs(self) -> None:
        for d in reversed(self.action.create_dirs):
            try:
                self.roots.target.rmdir(self.roots.rel(d))  # not empty or gone: kept (False)
            except (OSError, ConfinementError):
                pass

    # -- discard ---------------------------------------------------------------------------
    def discard(self) -> None:
        for p in (self.staged, self.restore_tmp, self.staged + ".part", self.restore_tmp + ".part"):
            try:
                self.roots.target.unlink(p)
            except (FileNotFoundError, NotADirectoryError):
                pass


class _PlacesData(FileAction):
    """An action whose staged file is a copy of the artifact's (see :meth:`make_durable`)."""

    def make_durable(self, after: PathState | None) -> None:
        fd = self.roots.target.open_file(self.rel, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if after and (st.st_dev, st.st_ino) != (after.dev, after.inode):
                raise OSError(errno.ESTALE, f"{self.dest} was replaced while the transaction ran", str(self.dest))
            os.fsync(fd)
        finally:
            os.close(fd)


class ReplaceFile(_PlacesData):
    """A regular file (or whatever was there) replaced by ``action.source``'s content."""

    def stage(self) -> PathState:
        self._make_dirs()
        src = self.action.source or ""
        in_state = self.roots.state_rel(src)
        if self.action.sha256 is None and in_state is not None:  # a backup: its inode is put back
            if not in_state.startswith("backups/"):
                raise ConfinementError(f"{src} is not a backup; rocmbuild restores only from backups/",
                                       "the journal naming it is corrupt or hostile")
            cur, bk = state_at(self.roots.target, self.staged), state_at(self.roots.state, in_state)
            if not (cur.kind == "file" and (cur.dev, cur.inode) == (bk.dev, bk.inode)):
                link_or_copy_at(self.roots.state, in_state, self.roots.target, self.staged)
        else:
            self._copy_artifact_file(Path(src))
        return state_at(self.roots.target, self.staged)

    def _copy_artifact_file(self, src: Path) -> None:
        root = artifact_root(src)
        if root is None:
            raise InputError(f"{src} is not a file of an artifact in the cache; nothing was changed",
                             "build or import the artifact again")
        with Root.open(root, "the artifact") as art:
            fd = art.open_file(os.path.relpath(src, root))
        try:
            st, trusted = os.fstat(fd), trust_check(src)
            before = self.roots.target.lstat(self.rel) if self.before.kind == "file" else None
            self.roots.target.copy_in(fd, self.staged, mode=file_mode(st.st_mode), sha256=self.action.sha256,
                                      trusted=bool(trusted and trusted(st)), owner=before, mtime_ns=st.st_mtime_ns,
                                      durable=False)
        except ContentMismatch as exc:
            raise _corrupt_source(src, exc) from None
        finally:
            os.close(fd)


def _corrupt_source(src: Path, exc: ContentMismatch) -> FetchError:
    """The artifact file ``src`` no longer holds its manifest's bytes: quarantine the artifact."""
    root = artifact_root(src)
    problem = f"{src.name}: sha256 {exc.actual[:16]}..., manifest {exc.expected[:16]}..."
    if root is None:
        return FetchError(f"{src} does not hold the bytes it should ({problem}); nothing was changed",
                          "build or import the artifact again")
    try:
        art = Artifact(root, Manifest.from_json(read_json(root / MANIFEST)), cached=True)
    except (OSError, ValueError, KeyError, TypeError, InputError) as err:
        return FetchError(f"{src} does not hold the bytes it should ({problem}); its manifest: {err}",
                          "build or import the artifact again")
    return cache.corrupt(art, [problem])


class AddFile(ReplaceFile):
    """A new file where nothing was."""


class ReplaceLink(FileAction):
    """A symlink (new or replacing a link or file) created under a temp name, renamed over."""

    def stage(self) -> PathState:
        self._make_dirs()
        self.roots.target.symlink(self.action.link or "", self.staged)  # its directory fsynced
        return PathState("link", target=self.action.link)


class RemoveFile(FileAction):
    """Rollback of an added file: back it up, then unlink it."""

    def needs_backup(self) -> bool:
        return self.before.kind == "file"

    def stage(self) -> PathState:
        return PathState("absent")

    def apply(self) -> None:
        self.roots.target.unlink(self.rel)


KINDS: dict[str, type[FileAction]] = {"replace_file": ReplaceFile, "add_file": AddFile, "replace_link": ReplaceLink,
                                      "remove": RemoveFile}


def make(action: Action, txn: str, roots: Roots, index: int, *, backup_copied: bool = False) -> FileAction:
    return KINDS[action.kind](action, txn, roots, index, backup_copied=backup_copied)
