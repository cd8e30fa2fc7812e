"""Retries reuse the work: each build attempt is recorded, and a build whose previous attempt for the
same recipe and commit failed starts from a copy of that attempt's build tree.

Each attempt writes ``build/<key>/.rocmbuild-attempt.json``: ``{"recipe", "commit", "key",
"status": "running"|"failed"|"succeeded", "started", "ended"}`` (ISO times, ``ended`` null while
running; ``cache gc`` reads the same record to find failed trees).

Decisions:

* The artifact is still keyed by every input; only the build tree is reused. The copy goes to the
  new key's tree (never a tree in use: :func:`rocmbuild.builder.buildtree.users`), made beside it
  under a temp name and renamed, so an interrupted copy is never taken for a tree. Files are
  copied with ``copy_file_range`` (a reflink on btrfs/XFS, like ``cp --reflink=auto -a``), their
  times kept (make and ninja compare them), symlinks kept.
* The trees differ in one path, ``build/<old key>`` vs ``build/<new key>``, of equal length. That
  path is rewritten in the text files cmake, make and ninja read (``CMakeCache.txt``, makefiles,
  ``build.ninja``, depfiles, ``.ninja_log``) and in ``.ninja_deps`` (a same-length byte swap),
  each file's mtime kept; cmake then reconfigures in place and leaves generated files whose text
  does not change untouched. Ninja also hashes each command into ``.ninja_log``: a command that
  differs only in that path gets its hash recomputed, so its object is not compiled again.
  Before each configure, :func:`reconcile` makes ``CMakeCache.txt`` agree with this attempt's
  command line (a copied cache holds the failed attempt's settings: a ``-D`` left out now would
  stay in effect, and an existing cache ignores a changed ``CC``): a ``-D`` no longer given has
  its entry removed, a changed ``[build.env]`` drops the cache (a fresh configure over the kept
  objects). Object files are not touched (their debug info may name the old tree; the bytes of the library
  are what the key promises, and an artifact keyed by the same inputs is the same either way).
* A candidate is an attempt that failed, or one still marked running whose process is gone (a
  SIGKILL), for the same recipe and commit, newest first. The copy is best effort: any OSError
  starts the build from zero instead, with a warning.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import subprocess  # for its TimeoutExpired only: processes run through rocmbuild.proc.runner
from dataclasses import dataclass
from pathlib import Path

from rocmbuild.proc import runner
from rocmbuild import ui
from rocmbuild import schema as s
from rocmbuild.schema import MappingRecord
from rocmbuild.builder import buildtree, tweak
from rocmbuild.store.cache import key_lock
from rocmbuild.fs.disk import atomic_write_json
from rocmbuild.errors import LockedError, RocmbuildError

ATTEMPT = ".rocmbuild-attempt.json"
NOT_COPIED = (ATTEMPT, buildtree.OWNER)
#: the files whose text names the build tree (read and rewritten; object files are never read)
_TEXT_NAMES = {"CMakeCache.txt", "Makefile", "Makefile2", "build.ninja", "rules.ninja", "link.txt",
               "relink.txt", ".ninja_log", "CMakeDirectoryInformation.cmake", "TargetDirectories.txt"}
_TEXT_SUFFIXES = (".make", ".cmake", ".ninja", ".d", ".ts", ".txt", ".json", ".marks", ".internal")
_MAX_TEXT = 256 << 20


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Attempt:
    """The record of one build attempt in ``tree``: running now; :meth:`end` says how it ended."""

    def __init__(self, tree: Path, *, recipe: str, commit: str | None, key: str) -> None:
        self.path = tree / ATTEMPT
        self.record = {"recipe": recipe, "commit": commit, "key": key, "status": "running",
                       "started": _now(), "ended": None}
        atomic_write_json(self.path, self.record)

    def end(self, ok: bool) -> None:
        self.record.update(status="succeeded" if ok else "failed", ended=_now())
        try:
            atomic_write_json(self.path, self.record)
        except OSError:
            pass  # the tree is gone (or the disk full): the record is advisory


@dataclass(frozen=True)
class AttemptRecord(MappingRecord):
    """One attempt record as read (also a mapping of its JSON object)."""

    recipe: str
    commit: str | None
    key: str
    status: str  # running | failed | succeeded
    started: str
    ended: str | None = None


ATTEMPT_SPEC = s.record(AttemptRecord, status=s.one_of("running", "failed", "succeeded"))


def parse_attempt(data: object, file: object) -> AttemptRecord:
    """An attempt record; SchemaError naming ``file``, the field and what was expected."""
    return s.load(ATTEMPT_SPEC, data, file)


def read_attempt(tree: Path) -> AttemptRecord | None:
    """The attempt record of ``tree``; None when there is none, or one its schema refuses: the
    record is advisory (such a tree is never a retry's seed, and ``cache gc`` judges it by its
    age as a tree without a record)."""
    path = tree / ATTEMPT
    try:
        return parse_attempt(json.loads(path.read_text()), path)
    except (OSError, ValueError, RecursionError):
        return None


def previous(root: Path, *, recipe: str, commit: str | None, key: str) -> Path | None:
    """The newest tree under ``root`` of a failed (or killed) attempt at ``recipe`` and ``commit``
    under another key, not in use by any live process; None when there is none."""
    if commit is None or not root.is_dir():
        return None
    found = []
    for tree in root.iterdir():
        rec = read_attempt(tree) if tree.name != key and not tree.is_symlink() and tree.is_dir() else None
        if rec and rec.recipe == recipe and rec.commit == commit and \
                rec.status in ("failed", "running") and (tree / "CMakeCache.txt").is_file():
            found.append((rec.ended or rec.started, tree))
    for _when, tree in sorted(found, reverse=True):
        if not buildtree.users(tree):
            return tree
    return None


def seed(tree: Path, *, recipe: str, commit: str | None, key: str, home: Path) -> Path | None:
    """Start ``tree`` (which must not exist yet) from the previous failed attempt's tree; returns
    that tree, or None when the build starts from zero. The old tree's key lock is held while it
    is copied (``cache gc`` removes build trees under that lock); when another run holds it, the
    build starts from zero rather than wait."""
    if tree.exists():
        return None  # this key's own earlier attempt: continued in place
    prev = previous(tree.parent, recipe=recipe, commit=commit, key=key)
    if prev is None:
        return None
    try:
        with key_lock(home, prev.name, wait=False):
            return _seed_from(prev, tree, key) if prev.is_dir() else None
    except LockedError:
        return None


def _seed_from(prev: Path, tree: Path, key: str) -> Path | None:
    tmp = tree.with_name(f".seed-{key}-{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(prev, tmp, symlinks=True, copy_function=_clone,
                        ignore=lambda _d, names: [n for n in names if n in NOT_COPIED])
        old = _cache_dir(prev) or str(prev)
        retarget(tmp, old, old[:-len(prev.name)] + tree.name if old.endswith(prev.name) else str(tree))
        os.replace(tmp, tree)
    except BaseException as exc:  # a stop (SIGTERM) mid-copy too: the half copy never stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(exc, (OSError, RocmbuildError, subprocess.TimeoutExpired)):
            raise
        ui.warn(f"could not start from the failed attempt in {prev} ({exc}); building from zero")
        return None
    ui.info(f"retry: starting from the failed attempt's build tree {prev.name[:16]} "
            "(only what changed is built again)")
    return prev


def _cache_dir(tree: Path) -> str | None:
    """The tree's path as cmake spelled it (``CMAKE_CACHEFILE_DIR`` in ``CMakeCache.txt``)."""
    for line in (tree / "CMakeCache.txt").read_text(errors="replace").splitlines():
        if line.startswith("CMAKE_CACHEFILE_DIR:"):
            return line.split("=", 1)[1].strip() or None
    return None


def _clone(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` with ``copy_file_range`` (the kernel reflinks where it can), mode and
    times kept (make and ninja compare them)."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        size = os.fstat(fi.fileno()).st_size
        done = 0
        try:
            while done < size:
                n = os.copy_file_range(fi.fileno(), fo.fileno(), size - done)
                if n == 0:
                    break
                done += n
        except OSError:
            fi.seek(done)
            fo.seek(done)
            shutil.copyfileobj(fi, fo)
    shutil.copystat(src, dst)


# --------------------------------------------------------------------------------------------
# one path, rewritten


def retarget(tree: Path, old: str, new: str) -> int:
    """Rewrite ``old`` (the tree's former path) to ``new`` in the files of ``tree`` that cmake, make
    and ninja read, keeping each file's times; then recompute ninja's command hashes. Returns how
    many files changed."""
    a, b = old.encode(), new.encode()
    changed = 0
    for dirpath, _dirs, files in os.walk(tree):
        for name in files:
            p = Path(dirpath, name)
            same_length_binary = name == ".ninja_deps" and len(a) == len(b)
            if not (same_length_binary or name in _TEXT_NAMES or name.endswith(_TEXT_SUFFIXES)):
                continue
            changed += _rewrite(p, a, b, binary=same_length_binary)
    if (tree / ".ninja_log").is_file():
        _rehash_ninja_log(tree, old, new)
    return changed


def _rewrite(p: Path, a: bytes, b: bytes, *, binary: bool) -> int:
    st = p.lstat()
    if not p.is_file() or p.is_symlink() or st.st_size > _MAX_TEXT:
        return 0
    data = p.read_bytes()
    if a not in data or (not binary and b"\0" in data):
        return 0
    p.write_bytes(data.replace(a, b))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    return 1


def _rehash_ninja_log(tree: Path, old: str, new: str) -> None:
    """``.ninja_log`` keys each output by the hash of its command: for each command of the
    rewritten ``build.ninja`` that names the tree, the hash of its old spelling becomes the hash of
    the new one (the command did not change, only the tree's path)."""
    done = runner.capture(["ninja", "-C", str(tree), "-t", "commands"], timeout=300)
    if done.returncode != 0:
        return
    rehash = {}
    for cmd in done.stdout.splitlines():
        if new in cmd:
            rehash[f"{ninja_hash(cmd.replace(new, old)):x}"] = f"{ninja_hash(cmd):x}"
    log = tree / ".ninja_log"
    st = log.stat()
    lines = log.read_text().splitlines(keepends=True)
    out = []
    for line in lines:
        cols = line.rstrip("\n").split("\t")
        if len(cols) == 5 and cols[4] in rehash:
            line = "\t".join(cols[:4] + [rehash[cols[4]]]) + "\n"
        out.append(line)
    log.write_text("".join(out))
    os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns))


_M64 = (1 << 64) - 1


def ninja_hash(command: str) -> int:
    """Ninja's ``BuildLog::LogEntry::HashCommand``: MurmurHash64A, seed 0xDECAFBADDECAFBAD."""
    data = command.encode()
    m, r = 0xC6A4A7935BD1E995, 47
    h = (0xDECAFBADDECAFBAD ^ (len(data) * m)) & _M64
    n = len(data) // 8 * 8
    for i in range(0, n, 8):
        k = int.from_bytes(data[i:i + 8], "little")
        k = (k * m) & _M64
        k ^= k >> r
        k = (k * m) & _M64
        h ^= k
        h = (h * m) & _M64
    tail = data[n:]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * m) & _M64
    h ^= h >> r
    h = (h * m) & _M64
    h ^= h >> r
    return h


CONFIGURED = ".rocmbuild-configure.json"  # the ConfiguredRecord of the tree's last configure


@dataclass(frozen=True)
class ConfiguredRecord:
    """How a tree was last configured (:data:`CONFIGURED`): the ``-D`` names given, the recipe's
    ``[build.env]`` and the version tweak's ``GIT`` define; parsed by :data:`CONFIGURED_SPEC`."""

    defines: tuple[str, ...]
    env: dict[str, str]
    git: str | None = None

    def to_json(self) -> dict:
        return {"defines": list(self.defines), "env": dict(self.env), **({"git": self.git} if self.git else {})}


CONFIGURED_SPEC = s.record(ConfiguredRecord)


def read_configured(tree: Path) -> ConfiguredRecord | None:
    """The configure record of ``tree``; None when there is none or its schema refuses it (then
    :func:`reconcile` drops the cache whole, as for a cache with no record)."""
    path = tree / CONFIGURED
    try:
        return s.load(CONFIGURED_SPEC, json.loads(path.read_text()), path)
    except (OSError, ValueError, RecursionError):
        return None


def _defines(argv: list[str]) -> dict[str, str]:
    """``{NAME: VALUE}`` of the ``-DNAME[:TYPE]=VALUE`` arguments (the last one of a name wins)."""
    found: dict[str, str] = {}
    for a in argv:
        if a.startswith("-D") and len(a) > 2:
            entry, _, value = a[2:].partition("=")
            found[entry.split(":", 1)[0]] = value
    return found


def _without(text: str, names: set[str]) -> str:
    """``CMakeCache.txt`` text without the entries ``names`` (and their ``-ADVANCED`` entries),
    each with the ``//`` help lines above it (cmake refuses help lines with no entry under them)."""
    out: list[str] = []
    helps: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("//"):
            helps.append(line)
            continue
        entry = line.split("=", 1)[0].split(":", 1)[0].removesuffix("-ADVANCED") if "=" in line else None
        if entry not in names:
            out += helps + [line]
        helps = []
    return "".join(out + helps)


def reconcile(tree: Path, argv: list[str], env: dict[str, str]) -> None:
    """Before ``cmake`` configures ``tree`` with ``argv`` and ``env`` (the recipe's ``[build.env]``):
    drop what an earlier configure of this tree (a failed attempt's copy, or this key's own earlier
    attempt with another launcher) left in ``CMakeCache.txt`` that this one does not ask for. A
    ``-D`` no longer given loses its entry; a changed environment, or a cache with no record of how
    it was made, is removed whole; another ``GIT`` (the version tweak, builder/tweak.py) also drops
    the entries MIOpen's CMake derived from the old one (``tweak.DERIVED``). Then records this
    configure."""
    cache, record = tree / "CMakeCache.txt", read_configured(tree)
    defines = _defines(argv)
    names, git = set(defines), defines.get("GIT")
    if cache.is_file():
        if record is None or record.env != env:
            cache.unlink()
        else:
            gone = set(record.defines) - names
            if record.git != git:  # another version tweak: what MIOpen derived from it goes too
                gone |= set(tweak.DERIVED) - names
            if gone:
                cache.write_text(_without(cache.read_text(), gone))
    tree.mkdir(parents=True, exist_ok=True)
    atomic_write_json(tree / CONFIGURED, ConfiguredRecord(tuple(sorted(names)), dict(env), git).to_json())
