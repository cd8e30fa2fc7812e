"""What the cache holds and what may go: artifacts with their size and last use, build trees
left by failed builds, downloads, quarantined entries; and removing them under the key lock.

Decisions:
* **Last use** is the mtime of a stamp ``artifacts/.used/[imported-]<key>``, set (touched) on
  every cache hit, every build that made the artifact and every apply of it; an artifact without
  a stamp (made before stamps existed) was last used when it was published (its manifest's
  mtime). A dry run and ``plan`` change nothing, so they touch nothing.
* **Size** is real disk use: ``st_blocks * 512`` of every file, link and directory under the
  entry, each inode counted once (a hard link is not counted twice).
* **Build trees** ``build/<key>/``: removable when ``.rocmbuild-attempt.json`` says ``failed``;
  when it says ``running`` but nothing uses the tree (the run was killed: ``interrupted``); when
  the key has an artifact no more (``orphaned``: its artifact was removed); and when it has
  neither an attempt record nor an artifact (a tree of an older rocmbuild). A tree in use
  (:func:`rocmbuild.builder.buildtree.users`) or whose key lock is held is never touched.
* **Ages**: artifacts by last use, build trees by the attempt's ``ended`` (else the tree's
  mtime), downloads by mtime (a reused download is touched), quarantined entries by the time
  in their name. ``--keep-days N`` keeps everything younger than N days (default 30); a
  ``.part`` download is only removed when also over an hour old (a live download writes it).
* **Removal** renames the entry aside (``.gc-<name>-<pid>``: a reader of the old name sees all
  or nothing) and removes it; sealed files are read-only but their directories are writable, and
  a directory that is not is made writable first (only inside the entry being removed).
* **Sources** ``src/<remote>/`` (a clone), ``src/<remote>-commits.git`` (its commits-only mirror)
  and extracted archives: removable when not fetched for ``--keep-days`` days. The last fetch is
  the newest mtime of the entry and of git's ``FETCH_HEAD``, ``HEAD`` and ``index`` in it (every
  fetch and checkout writes one of them). One is taken under its source lock (``src/<remote>.lock``,
  the lock a fetch holds), never while a fetch or a build holds it. A removed source costs one
  clone on the next build; an artifact never needs its source.
* **Logs** ``logs/<recipe>/``: the newest :data:`KEEP_LOGS` of each recipe always stay (the last
  failure is the one a person reads); older ones go when older than ``--keep-days``. A log whose
  writer is still running (:func:`rocmbuild.builder.logs.writer`) is never removed. Logs of older
  releases (``logs/<key>-<stamp>.log``) count with the recipe their first line names; their
  ``logs/<key>.log`` links go when what they point to is gone.

One module because it is the one answer to "what may ``cache gc`` take, and how": every kind of
entry is judged and removed by the same rules (age, the lock that guards it, the rename aside).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import stat as _stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AbstractSet, Mapping

from rocmbuild.builder import buildtree, logs
from rocmbuild.store import differs
from rocmbuild.builder.retry import ATTEMPT, AttemptRecord, read_attempt  # noqa: F401 - ATTEMPT: the record's name, for callers
from rocmbuild.store.artifact import MANIFEST, Manifest
from rocmbuild.store.provenance import Origin, origin
from rocmbuild.store.cache import entries, imported_dir, key_lock
from rocmbuild.fs.root import ConfinementError, Root
from rocmbuild.fs.disk import FileLock, read_json
from rocmbuild.errors import InputError, LockedError
from rocmbuild.home import artifacts_dir, build_dir, downloads_dir, logs_dir, src_dir

DEFAULT_KEEP_DAYS = 30
PART_GRACE = 3600.0
_KEY = re.compile(r"^[0-9a-f]{64}$")
_QSTAMP = re.compile(r"-(\d{8}T\d{6})\d*Z-\d+$")


def iso(t: float | None) -> str | None:
    return None if t is None else _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")


def _stamp(home: Path, key: str, imported: bool) -> Path:
    return artifacts_dir(home) / ".used" / (f"imported-{key}" if imported else key)


def touch(home: Path, path: Path) -> None:
    """Record a use of the artifact at ``path`` now (best effort: a read-only cache is no error)."""
    path = Path(path)
    stamp = _stamp(home, path.name, path.parent.name == "imported")
    try:
        with Root.under(home, stamp.parent.parent, "the artifact cache") as root:
            root.makedirs(stamp.parent.name)
            fd = root.open_file(f"{stamp.parent.name}/{stamp.name}", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.utime(fd)
            finally:
                os.close(fd)
    except (OSError, ConfinementError):  # best effort: the use is recorded where it may be
        pass


def last_use(home: Path, path: Path) -> float | None:
    path = Path(path)
    for p in (_stamp(home, path.name, path.parent.name == "imported"), path / MANIFEST):
        try:
            return p.stat().st_mtime
        except OSError:
            continue
    return None


def disk_bytes(path: Path, seen: set[tuple[int, int]] | None = None) -> int:
    """``st_blocks * 512`` of everything under ``path``, each inode once (``seen`` spans calls)."""
    seen = set() if seen is None else seen
    total = 0
    stack = [str(path)]
    while stack:
        p = stack.pop()
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
        if _stat.S_ISDIR(st.st_mode):
            try:
                stack += [os.path.join(p, n) for n in os.listdir(p)]
            except OSError:
                pass
    return total


@dataclass(frozen=True)
class ArtifactInfo:
    key: str
    kind: str  # built | imported
    path: str
    recipe: str | None
    version: str | None
    commit: str | None
    size: int
    created: str | None
    last_used: str | None
    last_used_ts: float | None
    substituted: Origin | None = None  # from a binary cache
    build: Mapping[str, str] = field(default_factory=dict)  # what it was built with (store/differs.py)


def artifact_info(home: Path, path: Path, seen: set | None = None) -> ArtifactInfo:
    try:
        m: Manifest | None = Manifest.from_json(read_json(path / MANIFEST))
        created = (path / MANIFEST).stat().st_mtime
    except (OSError, ValueError, KeyError, TypeError, InputError):  # unreadable or hostile: listed, not trusted
        m, created = None, None
    used = last_use(home, path)
    return ArtifactInfo(path.name, "imported" if path.parent == imported_dir(home) else "built", str(path),
                        m.recipe if m else None, m.version if m else None, m.commit if m else None,
                        disk_bytes(path, seen), iso(created), iso(used), used, origin(path),
                        differs.facts(m.inputs) if m else {})


def artifacts(home: Path) -> list[ArtifactInfo]:
    """Every artifact of the cache (built, then imported), hard links shared between them counted once."""
    seen: set[tuple[int, int]] = set()
    return [artifact_info(home, p, seen) for p in entries(home)]


@dataclass(frozen=True)
class Candidate:
    """Something ``cache gc`` may remove: what (``kind``), where, why, how big, since when."""

    kind: str  # artifact | build-dir | temp | download | quarantined
    path: str
    reason: str
    bytes: int
    since: str | None
    key: str | None = None

    def to_json(self) -> dict:
        return {"kind": self.kind, "path": self.path, "key": self.key, "reason": self.reason,
                "bytes": self.bytes, "since": self.since}


def attempt(tree: Path) -> AttemptRecord | None:
    """The builder's record of the last attempt in ``tree`` (``retry.read_attempt``), or None when
    it has none that can be read."""
    return read_attempt(Path(tree))


def parse_iso(text) -> float | None:
    try:
        return _dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except (TypeError, ValueError):
        return None


def _mtime(p: Path) -> float | None:
    try:
        return p.lstat().st_mtime
    except OSError:
        return None


def build_dir_reason(home: Path, tree: Path, gone: AbstractSet[str] = frozenset()) -> tuple[str | None, float | None]:
    """Why the build tree may go (None: it stays) and since when; ``gone``: keys whose artifact is
    being removed."""
    rec = attempt(tree)
    has_artifact = tree.name not in gone and (artifacts_dir(home) / tree.name / MANIFEST).is_file()
    since = parse_iso(rec.ended) if rec else None
    since = since or _mtime(tree)
    status = rec.status if rec else None
    if status == "failed":
        return "the build failed", since
    if status == "running":
        return "the build was interrupted (nothing runs in it)", since
    if not has_artifact:
        return ("its artifact is gone" if rec else "no artifact and no attempt record"), since
    return None, since


def build_dirs(home: Path, cutoff: float, gone: AbstractSet[str] = frozenset()) -> list[Candidate]:
    root = build_dir(home)
    out = []
    for tree in sorted(root.iterdir()) if root.is_dir() else ():
        if not (_KEY.match(tree.name) and tree.is_dir() and not tree.is_symlink()):
            continue
        reason, since = build_dir_reason(home, tree, gone)
        if reason and (since or 0) <= cutoff:
            out.append(Candidate("build-dir", str(tree), reason, disk_bytes(tree), iso(since), tree.name))
    return out


def temps(home: Path) -> list[Candidate]:
    """``artifacts/.tmp-<key>-<pid>``: half-made artifacts of killed builds (checked under the key lock);
    ``build/.seed-<key>-<pid>``: half-made copies of a failed tree (``retry``), and
    ``build/.check-<key>-<pid>``: ``build --check`` rebuilds (builder/rebuild.py), whose process is gone."""
    adir = artifacts_dir(home)
    out = []
    broot = build_dir(home)
    for kind, why in ((".seed-", "a killed retry's unfinished copy of a build tree"),
                      (".check-", "a killed `build --check`'s rebuild")):
        for p in sorted(broot.glob(f"{kind}*-*")) if broot.is_dir() else ():
            key, _, pid = p.name[len(kind):].rpartition("-")
            if _KEY.match(key) and pid.isdigit() and not alive(int(pid)) and p.is_dir() and not p.is_symlink():
                out.append(Candidate("temp", str(p), why, disk_bytes(p), iso(_mtime(p)), key))
    for p in sorted(adir.glob(".tmp-*-*")) if adir.is_dir() else ():
        key = p.name[len(".tmp-"):].rsplit("-", 1)[0]
        if _KEY.match(key) and p.is_dir() and not p.is_symlink():
            out.append(Candidate("temp", str(p), "a killed build's unfinished artifact", disk_bytes(p),
                                 iso(_mtime(p)), key))
    return out


def downloads(home: Path, cutoff: float) -> list[Candidate]:
    d = downloads_dir(home)
    out = []
    now = time.time()
    for p in sorted(d.iterdir()) if d.is_dir() else ():
        since = _mtime(p)
        if since is None or since > cutoff or p.is_symlink():
            continue
        partial = p.name.endswith(".part") or p.name.startswith(".pip-download-")
        if partial and since > now - PART_GRACE:
            continue
        out.append(Candidate("download", str(p), "an unfinished download" if partial else f"not used since {iso(since)}",
                             disk_bytes(p), iso(since)))
    return out


def quarantined(home: Path, cutoff: float) -> list[Candidate]:
    q = artifacts_dir(home) / ".quarantine"
    out = []
    for p in sorted(q.iterdir()) if q.is_dir() else ():
        m = _QSTAMP.search(p.name)
        since = (_dt.datetime.strptime(m.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=_dt.timezone.utc).timestamp()
                 if m else _mtime(p))
        if since is not None and since <= cutoff and not p.is_symlink():
            out.append(Candidate("quarantined", str(p), "quarantined (did not match its manifest)",
                                 disk_bytes(p), iso(since)))
    return out


def remove(path: Path, home: Path) -> None:
    """Rename ``path`` aside, then remove it (files or trees; read-only files are fine), through
    its directory's fd, opened beneath the cache ``home``'s: no link on the way nor beneath it is
    followed (a symlinked ``artifacts/imported``: ConfinementError, exit 2, nothing removed)."""
    path = Path(path)
    aside = f".gc-{path.name}-{os.getpid()}"
    with Root.under(home, path.parent, "the cache") as root:
        root.replace(path.name, aside)
        root.rmtree(aside)


def removable_now(home: Path, c: Candidate) -> str | None:
    """Under the key lock: why ``c`` must stay after all (None: it may go)."""
    if c.kind == "build-dir":
        busy = buildtree.users(Path(c.path))
        if busy:
            return f"in use by pid {', '.join(str(p.pid) for p in busy[:5])}"
    return None if Path(c.path).exists() or Path(c.path).is_symlink() else "gone meanwhile"


def take(home: Path, c: Candidate, *, dry_run: bool, still=None) -> str | None:
    """Remove ``c`` under its key lock; returns why it was kept, or None. ``still()``, called
    under the lock, may veto (e.g. an artifact used since it was listed). A dry run takes no lock
    (it writes nothing, not even a lock's holder record) and removes nothing."""
    if dry_run or c.key is None:
        why = removable_now(home, c) or (still() if still else None)
        if why is None and not dry_run:
            _remove(home, c)
        return why
    try:
        with key_lock(home, c.key, wait=False):
            why = removable_now(home, c) or (still() if still else None)
            if why is None:
                _remove(home, c)
            return why
    except LockedError:
        return "its key is locked by a running build"


def _remove(home: Path, c: Candidate) -> None:
    remove(Path(c.path), home)
    if c.kind == "artifact" and c.key:
        stamp = _stamp(home, c.key, Path(c.path).parent.name == "imported")
        try:
            with Root.under(home, stamp.parent, "the artifact cache") as root:
                root.unlink(stamp.name)
        except FileNotFoundError:  # never used: no stamp
            pass


def alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists (None: no process)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- sources and logs (beside artifacts and build trees) ---------------------------------------

KEEP_LOGS = 5
_GIT_STAMPS = (".git/FETCH_HEAD", ".git/HEAD", ".git/index", "FETCH_HEAD", "HEAD")


def last_fetch(entry: Path) -> float | None:
    times = [t for t in (_mtime(entry), *(_mtime(entry / s) for s in _GIT_STAMPS)) if t is not None]
    return max(times) if times else None


def _lock_of(entry: Path) -> Path:
    name = entry.name.removesuffix("-commits.git")
    return entry.with_name(name + ".lock")


def sources(home: Path, cutoff: float) -> list[Candidate]:
    d = src_dir(home)
    out = []
    for p in sorted(d.iterdir()) if d.is_dir() else ():
        if p.name.startswith(".") or p.name.endswith(".lock") or p.is_symlink() or not p.is_dir():
            continue
        since = last_fetch(p)
        if since is not None and since <= cutoff:
            out.append(Candidate("source", str(p), f"not fetched since {iso(since)}", disk_bytes(p), iso(since)))
    return out


def take_source(c: Candidate, home: Path, *, dry_run: bool) -> str | None:
    """Remove a source under its lock; why it was kept, or None."""
    if dry_run:
        return None
    try:
        with FileLock(_lock_of(Path(c.path)), wait=False, what="the source cache"):
            if not Path(c.path).exists():
                return "gone meanwhile"
            remove(Path(c.path), home)
    except LockedError:
        return "a fetch or a build is using it"
    return None


def old_logs(home: Path, cutoff: float, keep: int = KEEP_LOGS) -> list[Candidate]:
    """The logs ``cache gc`` may remove (see the module notes)."""
    out = []
    names = set(logs.recipes(home))
    top = logs_dir(home)
    olds = [p for p in top.iterdir() if logs.OLD_NAME.match(p.name)] if top.is_dir() else []
    names |= {n for n in (logs.named_recipe(p) for p in olds) if n}
    seen = set()
    for name in sorted(names):
        found = logs.of_recipe(home, name)
        seen |= set(found)
        for p in found[:-keep] if keep else found:
            since = _mtime(p)
            if since is not None and since <= cutoff and not alive(logs.writer(p)):
                out.append(Candidate("log", str(p), f"an older log of {name} (the newest {keep} stay)",
                                     disk_bytes(p), iso(since)))
    for p in olds:  # an old-named log whose first line names no recipe: by age alone
        since = _mtime(p)
        if p not in seen and since is not None and since <= cutoff:
            out.append(Candidate("log", str(p), "an old log naming no recipe", disk_bytes(p), iso(since)))
    return out


def dangling_links(home: Path) -> list[Path]:
    """``logs/<key>.log`` links of older releases whose log is gone."""
    top = logs_dir(home)
    return [p for p in top.glob("*.log") if p.is_symlink() and not p.exists()] if top.is_dir() else []
