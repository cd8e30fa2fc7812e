"""Safe extraction of tar archives (source tarballs and artifact bundles), member by member.

Decisions:
* Never trust ``tarfile``'s filter alone: it is version-dependent, and Python 3.11.7's
  ``filter="data"`` resolves links with ``os.path.realpath``, which gives up past PATH_MAX
  (CVE-2025-4517: nested long names and a chain of links climb out unseen).
* Two walls before anything is written: each header by :func:`~rocmbuild.sources.archive.unsafe_member`
  (absolute names, ``..``, devices), then :func:`check_members` over a model of the tree the headers
  make: a member whose path goes through a symlink or a file, a duplicate that would replace
  anything (a directory over a directory is fine), a hardlink to anything but a regular file
  extracted before it, and a symlink that leaves the tree when resolved *within the tree*
  (in-tree links followed, at most :data:`MAX_HOPS`) are refused. This needs no disk, so a dry run
  checks a bundle the same way without extracting it.
* Writing walks every parent from a directory fd of the root with ``O_NOFOLLOW | O_DIRECTORY``
  and creates files ``O_CREAT | O_EXCL | O_NOFOLLOW``: even a gap in the model cannot write
  through a link or over a file. ``tarfile.data_filter`` runs per member as a third wall where
  present. File contents are streamed. After the last member every symlink on disk is resolved
  again over the extracted tree. Any refusal removes the whole extraction dir
  (:class:`FetchError`, exit 3, "nothing was extracted").
* Modes: setuid, setgid, sticky and group/other write are dropped, exec bits kept; the owner
  always keeps rw on files and rwx on directories (the tree is patched and removed later).
  Owners and groups in the archive are ignored. Parent directories without an entry of their own
  are created.
* Zip archives (``.zip``, ``.whl``) are read as tar members (:mod:`rocmbuild.sources.ziparchive`),
  and so is a Debian package's data tar (``.deb``: :mod:`rocmbuild.sources.debarchive`); both pass
  the same walls; the format is told by the bytes, not the name. An RPM is refused with the way
  round (``rpm2cpio``).
* A *subtree* (a prebuilt recipe's install tree) is the whole archive checked first, then the
  members below its root (its single top-level directory, if any; a ``.deb``'s tree is rooted at
  ``/``, so none is dropped there) and ``subdir``, renamed relative to it and checked again as a
  tree of their own: a link that leaves the subtree, or a hardlink to a file outside it, is
  refused, and nothing else is written.
* Sizes: the regular members to be written are summed from their headers before the first
  write, and an extraction that would not fit in the free space of ``dest``'s filesystem is
  refused (:class:`BuildFilesystemError`, exit 3, nothing written): a small archive that declares
  a huge file (a bomb) never fills the disk. Sparse members are refused (a tree to install has
  none; they are how a tiny archive declares a huge file). Each file is written from its own
  member's bytes, at most its declared size (``tarfile``).
"""

from __future__ import annotations

import copy
import gzip
import lzma
import os
import shutil
import stat
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Callable, Iterable, Optional

from rocmbuild.sources.archive import unsafe_member
from rocmbuild.sources.debarchive import RPM_HINT, DebFormatError, DebReader, Package, is_deb, is_rpm, zstd_errors
from rocmbuild.sources.ziparchive import ZipReader, is_zip
from rocmbuild.fs.disk import CHUNK
from rocmbuild.errors import BuildFilesystemError, CorruptArchiveError, FetchError

MAX_HOPS = 40  # symlinks followed while resolving one link (Linux's MAXSYMLINKS)
Parts = tuple[str, ...]
Kind = Optional[tuple[str, Optional[str]]]  # ("dir"|"file"|"link"|"other", link text) or None: absent
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CORRUPT: tuple[type[BaseException], ...] = (tarfile.TarError, EOFError, zlib.error, zipfile.BadZipFile,
                                           lzma.LZMAError, gzip.BadGzipFile, *zstd_errors())
ARCHIVE_HINT = "check [source] archive points at a .tar*, .zip, .whl or .deb file"


class Refused(Exception):
    """A member that may not be extracted: its name and why."""

    def __init__(self, member: str, why: str) -> None:
        super().__init__(f"{member}: {why}")
        self.member, self.why = member, why


def parts_of(name: str) -> Parts:
    """A member name as path components ('' and '.' dropped; '..' is refused before this)."""
    return tuple(p for p in name.split("/") if p not in ("", "."))


def _short(name: str) -> str:
    return name if len(name) <= 120 else f"{name[:60]}...{name[-40:]}"


def refusal(archive: Path, exc: Refused) -> FetchError:
    return FetchError(
        f"refusing to extract {archive.name}: member '{_short(exc.member)}' is unsafe ({exc.why}); "
        "nothing was extracted",
        "use a trusted archive; rocmbuild never writes outside the extraction directory",
        details={"member": exc.member, "reason": exc.why, "archive": str(archive)},
    )


def corrupt(archive: Path, exc: BaseException) -> CorruptArchiveError:
    return CorruptArchiveError(
        f"the tarball {archive} cannot be read to its end: it is truncated, corrupt or not a tar archive "
        f"({type(exc).__name__}: {exc}); nothing was extracted",
        "download or copy it again (compare its size and sha256 with the original)",
        details={"archive": str(archive), "reason": f"{type(exc).__name__}: {exc}"})


# --------------------------------------------------------------------------------------------
# the model: what the headers would make, checked before anything is written


def escape(parent: Parts, text: str, kind_of: Callable[[Parts], Kind]) -> str | None:
    """Why the link ``text`` placed in ``parent`` leaves the tree (None: it stays inside),
    resolving each component over the tree through ``kind_of`` and following in-tree links."""
    stack, pending, hops = list(parent), text.split("/")[::-1], 0
    if text.startswith("/"):
        return f"symlink to the absolute path {text}"
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return f"symlink leaving the tree when resolved ({text})"
            stack.pop()
            continue
        stack.append(part)
        kind = kind_of(tuple(stack))
        if kind is not None and kind[0] == "link":
            hops += 1
            if hops > MAX_HOPS:
                return f"symlink loop or a chain of more than {MAX_HOPS} links ({text})"
            stack.pop()
            nxt = kind[1] or ""
            if nxt.startswith("/"):
                return f"symlink chain reaching the absolute path {nxt}"
            pending.extend(nxt.split("/")[::-1])
    return None


def _place(tree: dict[Parts, tuple[str, str | None]], m: tarfile.TarInfo, parts: Parts) -> str | None:
    for i in range(1, len(parts)):
        have = tree.setdefault(parts[:i], ("dir", None))
        if have[0] != "dir":
            return f"its path goes through the {'symlink' if have[0] == 'link' else have[0]} {'/'.join(parts[:i])}"
    kind = "dir" if m.isdir() else "link" if m.issym() else "file"
    before = tree.get(parts)
    if before is not None and not (kind == before[0] == "dir"):
        return f"a duplicate entry: it would replace the {before[0]} extracted before it"
    if m.islnk():
        if ".." in m.linkname.split("/") or tree.get(parts_of(m.linkname), ("",))[0] != "file":
            return f"hardlink to {m.linkname}, which is not a file extracted before it"
    if m.issym() and not m.linkname:
        return "symlink with an empty target"
    tree[parts] = (kind, m.linkname if m.issym() else None)
    return None


def check_members(members: Iterable[tarfile.TarInfo]) -> list[tuple[tarfile.TarInfo, Parts]]:
    """The members in order with their components, or :class:`Refused` for the first unsafe one."""
    tree: dict[Parts, tuple[str, str | None]] = {(): ("dir", None)}
    out: list[tuple[tarfile.TarInfo, Parts]] = []
    first: dict[Parts, str] = {}
    for m in members:
        parts = parts_of(m.name)
        why = unsafe_member(m) or ("a sparse file (a tree to install has none)" if m.issparse() else None)
        if why is None and not parts:
            if m.isdir():
                continue  # "./": the root itself
            why = "an empty name"
        why = why or _place(tree, m, parts)
        if why:
            raise Refused(m.name, why)
        first.setdefault(parts, m.name)
        out.append((m, parts))
    for parts, (kind, text) in tree.items():
        if kind == "link":
            why = escape(parts[:-1], text or "", tree.get)
            if why:
                raise Refused(first.get(parts, "/".join(parts)), why)
    return out


# --------------------------------------------------------------------------------------------
# writing, from a directory fd of the root


def _open_dir(root: int, parts: Parts, *, create: bool = False) -> int:
    """A new fd of the directory ``parts`` below ``root``, never through a symlink."""
    fd = os.dup(root)
    try:
        for i, part in enumerate(parts):
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o700, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:  # ELOOP, ENOTDIR: a symlink or a file on the way
                raise Refused("/".join(parts), f"its path goes through {'/'.join(parts[:i + 1])}, "
                                               f"which is not a directory ({exc.strerror})") from exc
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _mode(m: tarfile.TarInfo, owner: int) -> int:
    return (m.mode & 0o755) | owner


def _write_file(tf: tarfile.TarFile, m: tarfile.TarInfo, name: str, parent: int) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
    with open(fd, "wb") as out:
        src = tf.extractfile(m)
        assert src is not None
        with src:
            shutil.copyfileobj(src, out, CHUNK)
        os.fchmod(out.fileno(), _mode(m, 0o600))
        os.utime(out.fileno(), ns=(int(m.mtime * 1e9),) * 2)


def _write_dir(m: tarfile.TarInfo, name: str, parent: int) -> None:
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass  # a directory over a directory (the model refused anything else); O_NOFOLLOW checks
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        os.fchmod(fd, _mode(m, 0o700))
    finally:
        os.close(fd)


def _write_hardlink(m: tarfile.TarInfo, name: str, parent: int, root: int) -> None:
    src = parts_of(m.linkname)
    sfd = _open_dir(root, src[:-1])
    try:
        if not stat.S_ISREG(os.stat(src[-1], dir_fd=sfd, follow_symlinks=False).st_mode):
            raise Refused(m.name, f"hardlink to {m.linkname}, which is not a regular file")
        os.link(src[-1], name, src_dir_fd=sfd, dst_dir_fd=parent, follow_symlinks=False)
    finally:
        os.close(sfd)


def _write(tf: tarfile.TarFile, m: tarfile.TarInfo, parts: Parts, root: int, dest: Path) -> None:
    if hasattr(tarfile, "data_filter"):
        try:
            tarfile.data_filter(m, str(dest))
        except tarfile.FilterError as exc:
            raise Refused(m.name, f"tarfile's data filter: {exc}") from exc
    parent = _open_dir(root, parts[:-1], create=True)
    try:
        if m.isdir():
            _write_dir(m, parts[-1], parent)
        elif m.issym():
            os.symlink(m.linkname, parts[-1], dir_fd=parent)
        elif m.islnk():
            _write_hardlink(m, parts[-1], parent, root)
        else:
            _write_file(tf, m, parts[-1], parent)
    except FileExistsError as exc:
        raise Refused(m.name, "a duplicate entry: it would replace something extracted before it") from exc
    finally:
        os.close(parent)


def _disk_kind(root: int) -> Callable[[Parts], Kind]:
    def kind_of(parts: Parts) -> Kind:
        try:
            fd = _open_dir(root, parts[:-1])
        except (OSError, Refused):
            return None  # a file or nothing on the way: resolution goes on lexically
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                return "link", os.readlink(parts[-1], dir_fd=fd)
            return ("dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"), None
        except OSError:
            return None
        finally:
            os.close(fd)

    return kind_of


def _check_disk(root: int) -> None:
    """Every entry on disk: a directory, a regular file, or a symlink that stays in the tree."""
    kind_of = _disk_kind(root)
    for dirpath, dirnames, filenames, dfd in os.fwalk(".", dir_fd=root):
        here = parts_of(dirpath)
        for name in dirnames + filenames:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            rel = "/".join((*here, name))
            if stat.S_ISLNK(st.st_mode):
                why = escape(here, os.readlink(name, dir_fd=dfd), kind_of)
                if why:
                    raise Refused(rel, why)
            elif not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                raise Refused(rel, "not a file, a directory or a symlink")


def subtree(planned: list[tuple[tarfile.TarInfo, Parts]], subdir: str,
            archive: Path, *, strip_top: bool = True) -> list[tuple[tarfile.TarInfo, Parts]]:
    """The checked members below the archive's root and ``subdir``, renamed relative to it and
    checked again on their own (see the module notes); a :class:`FetchError` if there are none.
    ``strip_top``: a single top-level directory is the root (not for a ``.deb``, rooted at ``/``)."""
    tops = {parts[0] for _, parts in planned}
    base: Parts = ()
    if strip_top and len(tops) == 1 and all(len(p) > 1 or m.isdir() for m, p in planned):
        base = (tops.pop(),)
    base += parts_of(subdir)
    n, out = len(base), []
    for m, parts in planned:
        if parts[:n] != base or len(parts) == n:
            continue
        m2 = copy.copy(m)
        m2.name = "/".join(parts[n:])
        if m.islnk():
            target = parts_of(m.linkname)
            m2.linkname = "/".join(target[n:]) if target[:n] == base else f"../{m.linkname}"
        out.append(m2)
    if not out:
        raise FetchError(f"the archive {archive.name} has nothing below '{'/'.join(base) or '/'}' "
                         f"([source] subdir = {subdir!r}); nothing was extracted",
                         "check [source] subdir against the archive's layout (unzip -l / tar tf)",
                         details={"archive": str(archive), "subdir": subdir})
    return check_members(out)


def _not_deb(archive: Path, exc: DebFormatError) -> FetchError:
    if exc.truncated:
        return corrupt(archive, exc)
    return FetchError(f"{archive.name} is an ar archive but not a Debian binary package rocmbuild reads: {exc}; "
                      "nothing was extracted", exc.hint or "give a .deb as dpkg-deb --build writes it (dpkg-deb "
                      "--info FILE shows what it holds)", details={"archive": str(archive), "reason": str(exc)})


def _open(archive: Path):
    try:
        if is_deb(archive):
            try:
                return DebReader(archive)
            except CORRUPT as exc:  # a member that is not what its name says, cut short
                raise corrupt(archive, exc) from exc
        if is_rpm(archive):
            raise FetchError(f"{archive.name} is an RPM package: rocmbuild does not read RPMs", RPM_HINT)
        return ZipReader(archive) if is_zip(archive) else tarfile.open(archive, "r:*")
    except DebFormatError as exc:
        raise _not_deb(archive, exc) from exc
    except CORRUPT + (OSError,) as exc:
        raise FetchError(f"cannot open archive {archive}: {exc}", ARCHIVE_HINT) from exc


def _check_space(planned: list[tuple[tarfile.TarInfo, Parts]], archive: Path, root: int, dest: Path) -> None:
    need, st = sum(m.size for m, _ in planned if m.isreg()), os.fstatvfs(root)
    if need > (free := st.f_bavail * st.f_frsize):
        raise BuildFilesystemError(
            f"no space to extract {archive.name}: its members declare {need} bytes, {free} are free in {dest}; "
            "nothing was extracted",
            "free some space (`rocmbuild cache gc`), or set ROCMBUILD_HOME to a larger filesystem; an archive "
            "far smaller than that may be a decompression bomb",
            details={"archive": str(archive), "declared": need, "free": free})


def safe_extract(archive: Path, dest: Path, *, subdir: str | None = None) -> Package | None:
    """Extract ``archive`` (tar, zip or .deb) into the new directory ``dest`` (see the module
    notes); with ``subdir`` (``""``: the archive's root) only that :func:`subtree`. On any refusal
    ``dest`` is removed and a :class:`FetchError` raised. Returns a ``.deb``'s control fields."""
    tf = _open(archive)
    with tf:
        try:
            planned = check_members(tf.getmembers())
            if subdir is not None:
                planned = subtree(planned, subdir, archive, strip_top=getattr(tf, "strip_top", True))
        except Refused as exc:
            raise refusal(archive, exc) from None
        except DebFormatError as exc:
            raise _not_deb(archive, exc) from exc
        except CORRUPT as exc:
            raise corrupt(archive, exc) from exc
        dest.mkdir(parents=True)
        try:
            root = os.open(dest, _DIR_FLAGS)
            try:
                _check_space(planned, archive, root, dest)
                for m, parts in planned:
                    _write(tf, m, parts, root, dest)
                _check_disk(root)
            finally:
                os.close(root)
        except Refused as exc:
            shutil.rmtree(dest, ignore_errors=True)
            raise refusal(archive, exc) from None
        except CORRUPT as exc:
            shutil.rmtree(dest, ignore_errors=True)
            raise corrupt(archive, exc) from exc
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        return getattr(tf, "package", None)
