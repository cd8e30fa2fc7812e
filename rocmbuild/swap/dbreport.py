"""Which MIOpen databases the placed library reads, and whether they are the placed build's: the
database dir beside the loaded library, each DB file in it judged against what the transactions
in effect placed, and a ``MIOPEN_CUSTOM_CACHE_DIR`` holding kernels of another build (reported by
``status`` and ``verify``; docs/miopen.md).

Decisions (cheap checks only: names and ``lstat``, a hash only for a same-size file whose recorded
identity moved):
* the dir is ``<real lib dir>/../share/miopen/db`` (:func:`rocmbuild.swap.dbfiles.db_dir_of`),
  unless ``MIOPEN_SYSTEM_DB_PATH`` is set in the environment the target runs with (the caller's
  plus its activation): MIOpen then reads that dir, as it is (no ``~`` expansion), and so does the
  report, with a note naming the variable (checked on the real MIOpen 2.17: docs/miopen.md);
* a DB file is the placed build's when it is a file an active transaction placed (its journaled
  identity, or the same size and the recorded sha256); any other DB file is *foreign* -- with no
  apply in effect nothing is judged (``placed_build`` false: the stock library's dir);
* a custom cache dir (the caller's environment, or the one the flows pass) holding user databases
  (``*.ukdb``, ``*.udb``, ``*.ufdb.txt``, ``*.updb.txt``) at its top is reported: MIOpen up to
  3.3 (ROCm 6.3) uses that dir as it is, shared by every version and build, and nothing in a
  ``.ukdb`` says which build compiled it; later MIOpen use ``<dir>/<M.m.p.tweak>/``, which the
  tweak keeps apart (builder/tweak.py). The command that removes exactly those files is given.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rocmbuild.fs.disk import sha256_file
from rocmbuild.swap import statedir
from rocmbuild.swap.dbfiles import db_dir_of, is_db_name
from rocmbuild.swap.history import placed as placed_files
from rocmbuild.swap.ineffect import active
from rocmbuild.swap.pathstate import observe

CUSTOM = "MIOPEN_CUSTOM_CACHE_DIR"
SYSTEM = "MIOPEN_SYSTEM_DB_PATH"
USER_SUFFIXES = (".ukdb", ".udb", ".ufdb.txt", ".updb.txt")


@dataclass(frozen=True)
class DbReport:
    db_dir: str
    placed_build: bool  # an apply is in effect: files were judged against it
    ours: tuple[str, ...] = ()
    foreign: tuple[str, ...] = ()
    custom_cache: str | None = None
    custom_foreign: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.foreign and not self.custom_foreign

    @property
    def clear_command(self) -> str | None:
        if not self.custom_foreign:
            return None
        return "rm -rf -- " + " ".join(shlex.quote(p) for p in self.custom_foreign)

    def to_json(self) -> dict[str, Any]:
        return {"db_dir": self.db_dir, "placed_build": self.placed_build, "ours": list(self.ours),
                "foreign": list(self.foreign), "custom_cache": self.custom_cache,
                "custom_foreign": list(self.custom_foreign), "clear_command": self.clear_command,
                "ok": self.ok, "notes": list(self.notes)}


def _names(d: Path) -> list[str]:
    try:
        return sorted(os.listdir(d))  # read only: a listing, nothing is opened through it
    except OSError:
        return []


def _placed(prefix: Path) -> tuple[dict[str, tuple[Any, str]], list[Any]]:
    recs: dict[str, tuple[Any, str]] = {}
    applies = []
    for sdir in statedir.state_dirs_for(prefix):
        recs.update({p: (st, sha) for p, st, sha in placed_files(sdir)})
        try:
            applies += [j for j in active(sdir) if j.verb == "apply"]
        except (OSError, ValueError):
            pass
    return recs, applies


def _is_ours(path: Path, rec: tuple[Any, str] | None) -> bool:
    if rec is None:
        return False
    now, (after, sha) = observe(path), rec
    if now.kind != "file":
        return False
    if (now.dev, now.inode, now.size, now.mtime_ns) == (after.dev, after.inode, after.size, after.mtime_ns):
        return True
    return now.size == after.size and sha256_file(path) == sha


def _custom(env: Mapping[str, str]) -> tuple[str | None, tuple[str, ...]]:
    custom = (env.get(CUSTOM) or "").strip()
    if not custom:
        return None, ()
    d = Path(os.path.expanduser(custom))
    return str(d), tuple(str(d / n) for n in _names(d) if n.endswith(USER_SUFFIXES) and (d / n).is_file())


def report(prefix: Path, library: str, env: Mapping[str, str] | None = None) -> DbReport:
    """The databases the libMIOpen at ``library`` (as the process maps it) reads, in ``env`` (the
    environment the process runs with; the caller's when None)."""
    env = os.environ if env is None else env
    beside = db_dir_of(Path(os.path.realpath(library)).parent)
    override = env.get(SYSTEM) or None
    db_dir = beside if override is None else Path(override)
    recs, applies = _placed(Path(prefix))
    latest = next((j for j in reversed(applies) if os.path.realpath(j.plan.library) == os.path.realpath(library)), None)
    ours: list[str] = []
    foreign: list[str] = []
    for name in (n for n in _names(db_dir) if is_db_name(n)):
        p = db_dir / name
        (ours if _is_ours(p, recs.get(str(p))) else foreign).append(str(p))
    notes = [] if latest else ["no apply of rocmbuild is in effect for this library: its databases are not judged"]
    if override is not None:
        notes.insert(0, f"{SYSTEM}={override} replaces the dir beside the library "
                     f"({beside}); MIOpen reads this one")
    custom, custom_foreign = _custom(env)
    return DbReport(str(db_dir), latest is not None, tuple(ours), tuple(foreign) if latest else (),
                    custom, custom_foreign, tuple(notes))
