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
from pathlib import Path

from rocmbuild.build import cache
from rocmbuild.build.artifact import MANIFEST, Artifact, Manifest, artifact_root, trust_check
from rocmbuild.disk import ContentMismatch, fsync_dir, link_or_copy, makedirs_durable, own_copy, read_json, sha256_file
from rocmbuild.errors import FetchError, InputError
from rocmbuild.swap.observe import PathState, observe, same_kind
from rocmbuild.swap.plan import Action


def staged_name(dest: Path, txn: str) -> Path:
    return dest.parent / f".{dest.name}.rocmbuild-new-{txn}"


def restore_name(dest: Path, txn: str) -> Path:
    return dest.parent / f".{dest.name}.rocmbuild-old-{txn}"


def _unlink(path: Path) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def _fsync_parent(path: Path) -> None:
    try:
        fsync_dir(Path(path).parent)
    except FileNotFoundError:
        pass


class FileAction(abc.ABC):
    """Base: one destination path of one transaction."""

    def __init__(self, action: Action, txn: str, backup_dir: Path, index: int, *,
                 backup_copied: bool = False) -> None:
        self.action = action
        self.backup_copied = backup_copied  # the backup is a copy (another filesystem), not the inode
        self.txn = txn
        self.dest = Path(action.path)
        self.staged = staged_name(self.dest, txn)
        self.restore_tmp = restore_name(self.dest, txn)
        self.backup_path = backup_dir / f"{index:03d}-{self.dest.name}"
        self.before = action.before

    # -- stage -----------------------------------------------------------------------------
    def _make_dirs(self) -> None:
        for d in self.action.create_dirs:
            try:
                os.mkdir(d)
            except FileExistsError:
                continue
            _fsync_parent(Path(d))  # the new directory's entry in its parent

    @abc.abstractmethod
    def stage(self) -> PathState:
        """Place the new content under the temp name; returns its identity (the "after")."""

    # -- backup ----------------------------------------------------------------------------
    def needs_backup(self) -> bool:
        return self.before.kind == "file"

    def backup(self) -> bool:
        """Hardlink the original into the backups dir. Returns True when bytes were copied."""
        if not self.needs_backup():
            return False
        existing = observe(self.backup_path)
        if existing.kind == "file" and (existing.dev, existing.inode) == (self.before.dev, self.before.inode):
            return False  # done already (idempotent)
        if existing.kind == "file" and existing.size == self.before.size and \
                existing.mtime_ns == self.before.mtime_ns and existing.dev != self.before.dev:
            self.backup_copied = True
            return False  # a cross-filesystem copy made before
        now = observe(self.dest)
        if now.kind != "file" or (now.dev, now.inode) != (self.before.dev, self.before.inode):
            raise OSError(errno.ESTALE, f"{self.dest} changed since it was planned", str(self.dest))
        makedirs_durable(self.backup_path.parent)
        self.backup_copied = link_or_copy(self.dest, self.backup_path)
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
            return sha256_file(self.dest) == sha256_file(self.backup_path)
        except OSError:
            return False

    # -- apply -----------------------------------------------------------------------------
    def apply(self) -> None:
        os.replace(self.staged, self.dest)

    # -- revert ----------------------------------------------------------------------------
    def revert(self, after: PathState | None) -> str | None:
        """Put ``before`` back. Returns a message when something was done, "" when it already
        was, and raises when it cannot be done."""
        now = observe(self.dest)
        b = self.before
        if b.kind == "file":
            if self.is_before(now):
                return ""
            bk = observe(self.backup_path)
            if bk.kind != "file":
                raise OSError(errno.ENOENT, f"cannot restore {self.dest}: backup {self.backup_path} is missing",
                              str(self.backup_path))
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            link_or_copy(self.backup_path, self.restore_tmp)
            os.replace(self.restore_tmp, self.dest)
            return f"restored {self.dest}"
        if b.kind == "link":
            if now.kind == "link" and now.target == b.target:
                return ""
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            _unlink(self.restore_tmp)
            os.symlink(b.target or "", self.restore_tmp)
            os.replace(self.restore_tmp, self.dest)
            return f"restored link {self.dest} -> {b.target}"
        if b.kind == "absent":
            if now.kind == "absent":
                return ""
            ours = after is not None and now.same(after)
            if not ours and self.action.link is not None:
                ours = now.kind == "link" and now.target == self.action.link
            if not ours:
                return f"left {self.dest} alone: it is not what rocmbuild placed there ({now.describe()})"
            _unlink(self.dest)
            return f"removed {self.dest}"
        return ""

    def remove_created_dirs(self) -> None:
        for d in reversed(self.action.create_dirs):
            try:
                os.rmdir(d)
            except OSError:
                pass  # not empty (something else lives there) or already gone

    # -- discard ---------------------------------------------------------------------------
    def discard(self) -> None:
        for p in (self.staged, self.restore_tmp, self.staged.parent / (self.staged.name + ".part"),
                  self.restore_tmp.parent / (self.restore_tmp.name + ".part")):
            _unlink(p)


class ReplaceFile(FileAction):
    """A regular file (or whatever was there) replaced by ``action.source``'s content."""

    def stage(self) -> PathState:
        self._make_dirs()
        src = Path(self.action.source or "")
        if self.action.sha256 is None and artifact_root(src) is None:  # a backup: its inode is put back
            cur, srcst = observe(self.staged), observe(src)
            if not (cur.kind == "file" and (cur.dev, cur.inode) == (srcst.dev, srcst.inode)):
                link_or_copy(src, self.staged)  # a copy is fsynced there
        else:
            try:
                own_copy(src, self.staged, sha256=self.action.sha256, trusted=trust_check(src))
            except ContentMismatch as exc:
                raise _corrupt_source(src, exc) from None
        _fsync_parent(self.staged)  # the new directory entry
        return observe(self.staged)


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
        _unlink(self.staged)
        os.symlink(self.action.link or "", self.staged)
        _fsync_parent(self.staged)
        return PathState("link", target=self.action.link)


class RemoveFile(FileAction):
    """Rollback of an added file: back it up, then unlink it."""

    def needs_backup(self) -> bool:
        return self.before.kind == "file"

    def stage(self) -> PathState:
        return PathState("absent")

    def apply(self) -> None:
        _unlink(self.dest)


KINDS = {"replace_file": ReplaceFile, "add_file": AddFile, "replace_link": ReplaceLink, "remove": RemoveFile}


def make(action: Action, txn: str, backup_dir: Path, index: int, *, backup_copied: bool = False) -> FileAction:
    return KINDS[action.kind](action, txn, backup_dir, index, backup_copied=backup_copied)
