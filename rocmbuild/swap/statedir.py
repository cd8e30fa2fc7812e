"""Target state: ``<prefix>/.rocmbuild/`` (or ``<state home>/targets/<hash>/``, ``home.state_home``), lock, history.

Decisions:
* A target whose library lives outside its prefix (``--allow-outside-prefix``) keeps its state in
  ``state_home()/targets/<sha256(libdir)[:16]>/`` with a ``target.json`` naming the prefix and lib dir,
  so that verbs that only know the prefix (history, recover) find it again.
* a ``history.jsonl`` line names its files relative to the prefix and records the prefix's
  identity; reading rebases them onto the prefix the state dir is in now; each line is read by
  one schema (:data:`HISTORY_SPEC`, docs/state-files.md) into a frozen :class:`HistoryLine`; a line it
  refuses (not JSON, not an object, a field of another type, a commit that is not one) is
  reported, never hides the others;
* ``target.json`` is read by :data:`TARGET_SPEC`; one that cannot be read is a StateError (exit 2)
  where its state dir is about to be used, and is listed (:func:`unreadable_targets`) by every
  verb that lists what cannot be read;
* ``history.jsonl`` is rewritten atomically (read, append one line, ``write_state_file``: the state dir's Root) rather than
  appended in place: it is small, and a torn last line can never happen.
* The lock is ``fcntl.flock`` on the ``lock`` file (:class:`rocmbuild.fs.disk.FileLock`): the holder
  writes its holder record into the file after locking; a refused locker reads it to name the
  holder (pid, command, since when). A *shared* lock taken on an existing lock
  file opened read-only (``TargetLock(..., shared=True)``) excludes writers without writing
  anything: the "already applied" path uses it so that it writes no file in the target.
* A lock that cannot be taken for a reason of the filesystem is the target's problem, never a bug:
  a state path that is not what it must be (the lock a directory, ``.rocmbuild`` a file) is a
  :class:`StatePathError` naming it (exit 2); no space or a read-only prefix is a
  :class:`TargetFilesystemError` (exit 2). Either way nothing was changed.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rocmbuild import schema as s
from rocmbuild.fs.disk import FileLock, read_json
from rocmbuild.errors import RocmbuildError, StateError, StatePathError, from_os_error
from rocmbuild.fs.locks import LockWait
from rocmbuild.home import STATE_DIRNAME, state_home, target_state_dir, targets_dir
from rocmbuild.swap.landing import PrefixIdentity, rebased
from rocmbuild.results.swaprecords import Unreadable
from rocmbuild.swap.roots import open_state, write_state_file

__all__ = ["STATE_DIRNAME", "target_state_dir", "TargetLock", "register_outside_target", "state_dirs_for",
           "append_history", "read_history", "HistoryLine", "HISTORY_SPEC", "TargetRecord", "history_lines",
           "parse_history_line", "read_target_record", "unreadable_targets"]


@dataclass(frozen=True)
class TargetRecord:
    """``target.json`` of an outside-prefix state dir: the prefix and the lib dir it belongs to."""

    prefix: str
    libdir: str

    def to_json(self) -> dict[str, str]:
        return {"prefix": self.prefix, "libdir": self.libdir}


TARGET_SPEC = s.record(TargetRecord)


def read_target_record(state_dir: Path) -> TargetRecord | None:
    """The ``target.json`` of an outside-prefix state dir (None: there is none); StateError
    (exit 2) naming the file, the field and what was expected when it cannot be read."""
    path = Path(state_dir) / "target.json"
    try:
        data = read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise _bad_record(path, f"{type(exc).__name__}: {exc}") from None
    try:
        record: TargetRecord = s.load(TARGET_SPEC, data, path)
        return record
    except s.SchemaError as exc:
        raise _bad_record(path, str(exc)) from None


def _bad_record(path: Path, why: str) -> StateError:
    return StateError(f"the target record {path} cannot be read ({why}); nothing was changed",
                      f"it names the environment whose library lives outside its prefix: write "
                      f'{{"prefix": "/path/to/env", "libdir": "/its/lib/dir"}} into it, or move {path.parent} aside',
                      details={"path": str(path)})


def register_outside_target(state_dir: Path, prefix: Path, libdir: Path) -> None:
    """Record which prefix an outside-prefix state dir belongs to (a record that is there but
    cannot be read: StateError, exit 2), through the state dir's root."""
    if read_target_record(state_dir) is None:
        data = json.dumps(TargetRecord(str(prefix), str(libdir)).to_json(), indent=2, sort_keys=True) + "\n"
        write_state_file(state_dir, "target.json", data.encode())


def unreadable_targets() -> list[Unreadable]:
    """The outside-prefix state dirs whose target record cannot be read (whose they are is unknown)."""
    out = []
    targets = targets_dir(state_home())
    for d in sorted(targets.iterdir()) if targets.is_dir() else ():
        try:
            read_target_record(d)
        except StateError as exc:
            out.append(Unreadable("target", str(d / "target.json"), exc.message))
    return out


def state_dirs_for(prefix: Path) -> list[Path]:
    """Every state directory that belongs to ``prefix`` (its own, and outside-prefix ones; one
    whose record cannot be read is :func:`unreadable_targets`')."""
    out = []
    own = Path(prefix) / STATE_DIRNAME
    if own.is_dir():
        out.append(own)
    targets = targets_dir(state_home())
    if targets.is_dir():
        for d in sorted(targets.iterdir()):
            try:
                rec = read_target_record(d)
            except StateError:
                continue
            if rec is not None and Path(rec.prefix) == Path(prefix):
                out.append(d)
    return out


def TargetLock(state_dir: Path, *, wait: bool | LockWait = False, shared: bool = False) -> FileLock:
    """The lock on ``<state_dir>/lock``: fails at once (``LockedError`` naming its holder, exit 5)
    unless ``wait`` (a bool, or a :class:`~rocmbuild.fs.locks.LockWait` with a timeout); a lock path
    that cannot be used (a directory, a file for ``.rocmbuild``) is a ``StatePathError`` (exit 2)."""
    return _StateLock(Path(state_dir) / "lock", wait=wait, shared=shared, what="the target")


class _StateLock(FileLock):
    def _open(self) -> bool:
        """The lock file, opened through the state dir's root: a symlinked ``.rocmbuild`` (or
        ``lock``) is refused, never followed; made 0644 whatever the umask."""
        root = open_state(self.path.parent, create=not self.shared)
        if root is None:
            self.fd = None
            return False
        with root:
            try:
                flags = os.O_RDONLY if self.shared else os.O_RDWR | os.O_CREAT
                self.fd = root.open_file("lock", flags, 0o644)
            except FileNotFoundError:
                if not self.shared:
                    raise
                self.fd = None
                return False
            if not self.shared:
                st = os.fstat(self.fd)
                if stat.S_IMODE(st.st_mode) != 0o644 and st.st_uid == os.geteuid():
                    os.fchmod(self.fd, 0o644)
                root.own_like(self.fd, os.fstat(root.fd))
        return True

    def acquire(self) -> FileLock:
        try:
            return super().acquire()
        except BlockingIOError:
            raise
        except OSError as exc:
            if self.fd is not None:  # opened, then the pid could not be written: let go of it
                os.close(self.fd)
                self.fd = None
            if exc.filename is None:  # ftruncate/pwrite on the open lock name no file
                exc.filename = str(self.path)
            err = unusable_state(self.path, exc)
            if err is exc:
                raise
            raise err from exc


# what the filesystem says when a state path has the wrong kind
WRONG_KIND = (errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.ELOOP)


def _kind(path: Path) -> str:
    """What is in the way at ``path``: itself, or a parent that is not a directory."""
    if path.is_symlink():
        return f"{path} is a symlink"
    if path.is_dir():
        return f"{path} is a directory"
    for p in path.parents:
        if p.exists() and not p.is_dir():
            return f"{p} is not a directory"
    return f"{path} is not a regular file"


def unusable_state(path: Path, exc: OSError) -> RocmbuildError | OSError:
    """The error for a state path (the lock) the filesystem will not let us use; ``exc`` itself when
    it is not an expected condition."""
    if exc.errno in WRONG_KIND:
        return StatePathError(
            f"the target's lock {path} cannot be used: {_kind(Path(path))}; nothing was changed",
            f"rocmbuild keeps a plain file there: move what is in the way aside (e.g. `mv {path} {path}.old`), "
            "then run the command again",
            details={"path": str(path), "errno": errno.errorcode.get(exc.errno or 0, str(exc.errno))})
    return from_os_error(exc, "target") or exc


def append_history(state_dir: Path, line: "HistoryLine") -> None:
    """Append ``line`` (saved whole, :meth:`HistoryLine.to_json`) to ``history.jsonl``."""
    path = Path(state_dir) / "history.jsonl"
    old = path.read_bytes() if path.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    text = json.dumps(line.to_json(), sort_keys=True, default=str) + "\n"
    write_state_file(state_dir, "history.jsonl", old + text.encode())


@dataclass(frozen=True)
class HistoryLine:
    """One ``history.jsonl`` line (docs/json.md, ``history``), parsed by :data:`HISTORY_SPEC`;
    ``extra`` holds the keys the schema does not name (a newer rocmbuild's, a journal's meta),
    written back as they were."""

    id: str
    verb: str  # "apply" | "rollback"
    time: str | None = None
    recipe: str | None = None
    commit: str | None = None
    artifact: str | None = None
    version_before: str | None = None
    version_after: str | None = None
    files: tuple[str, ...] = ()
    outcome: str | None = None
    undoes: tuple[str, ...] = ()
    artifact_path: str | None = None
    python: str | None = None
    backup_bytes: int | None = None
    prefix_identity: PrefixIdentity | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The line as written (and as ``history --json`` shows it): the optional fields only when known."""
        out: dict[str, Any] = {**self.extra, "id": self.id, "time": self.time, "verb": self.verb,
                               "recipe": self.recipe, "commit": self.commit, "artifact": self.artifact,
                               "version_before": self.version_before, "version_after": self.version_after,
                               "files": list(self.files), "outcome": self.outcome, "undoes": list(self.undoes)}
        for key in _WHEN_KNOWN:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.prefix_identity is not None:
            out["prefix_identity"] = self.prefix_identity.to_json()
        return out


_WHEN_KNOWN = ("artifact_path", "python", "backup_bytes")
HISTORY_NAMED = frozenset(f.name for f in fields(HistoryLine)) - {"extra"}  # the keys of the schema
_RECORD = s.record(HistoryLine, verb=s.one_of("apply", "rollback"), recipe=s.optional(s.name("recipe")),
                   commit=s.optional(s.name("commit")), version_before=s.optional(s.name("version")),
                   version_after=s.optional(s.name("version")),
                   backup_bytes=s.optional(s.check(s.integer, lambda v: v >= 0, "an integer of 0 or more")))


def HISTORY_SPEC(v: Any, where: str) -> HistoryLine:
    """A history line's schema: every named field typed (the recipe, commit and versions by their
    grammar); the keys it does not name kept in ``extra``."""
    if type(v) is not dict:
        s.fail(where, "an object", v)
    line: HistoryLine = _RECORD({k: x for k, x in v.items() if k in HISTORY_NAMED}, where)
    return replace(line, extra={k: s.json_value(x, k) for k, x in v.items() if k not in HISTORY_NAMED})


def parse_history_line(rec: object, file: object) -> HistoryLine:
    """One ``history.jsonl`` line (decoded JSON) as the verbs read it: every field typed, the
    recipe, commit and versions by their grammar (docs/state-files.md); keys it does not name are
    kept. SchemaError (a ValueError) naming ``file`` (and the line), the field and what was expected."""
    line: HistoryLine = s.load(HISTORY_SPEC, rec, file)
    return line


def history_lines(state_dir: Path) -> tuple[list[HistoryLine], list[Unreadable]]:
    """The lines of ``history.jsonl`` that can be read (their paths absolute under the prefix the
    state dir belongs to now), and the others, each reported: one bad line hides nothing else."""
    path = Path(state_dir) / "history.jsonl"
    if not path.exists():
        return [], []
    good: list[HistoryLine] = []
    bad: list[Unreadable] = []
    sdir = Path(state_dir)
    for n, text in enumerate(path.read_bytes().decode("utf-8", errors="replace").split("\n"), 1):
        if not text.strip():
            continue
        try:
            line = parse_history_line(json.loads(text), f"{path} line {n}")
        except (ValueError, RecursionError) as exc:
            bad.append(Unreadable("history", str(path), f"{type(exc).__name__}: {exc}", line=n,
                                  known={"text": text.strip()[:120]}))
            continue
        ident = line.prefix_identity
        base = sdir.parent if sdir.name == STATE_DIRNAME else Path((ident.path if ident else "") or "/")
        good.append(replace(line, files=tuple(rebased(f, base) for f in line.files),
                            python=rebased(line.python, base) if line.python else line.python))
    return good, bad


def read_history(state_dir: Path) -> list[HistoryLine]:
    """The readable history lines (:func:`history_lines` reports the others)."""
    return history_lines(state_dir)[0]
