"""MIOpen's system databases in the swap: the old version's DB files that the new artifact does not
replace are moved aside in the same transaction (what MIOpen reads and why: docs/miopen.md,
"Which database files a libMIOpen reads").

Decisions:
* the database dir is ``<lib dir>/../share/miopen/db`` in every layout: MIOpen takes the canonical
  path of its own file (``dladdr`` + ``canonical``) and appends ``../share/miopen/db``; rocmbuild
  places the library as the target's own file, so the lib dir the plan writes is that dir;
* a DB file is a name MIOpen may open there: ``*.kdb`` (no version check at all), ``*.db``,
  ``*.db.txt``, ``*.pdb.txt``, ``*.fdb.txt`` (found by prefix, other CU counts included),
  ``*.model`` and any ``*.HIP.*``/``*.OpenCL.*``; anything else in the dir is left alone;
* each such file the artifact does not place is a ``remove`` action (role ``db``): the protocol
  hardlinks it into ``backups/<txn>/`` before unlinking it, and a rollback or a recovery puts the
  same inode back; the dir is listed through a :class:`~rocmbuild.fs.root.Root` beneath the target
  (a symlink on the way refuses the plan), or through the Observer's ``listdir`` when it has one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from rocmbuild.errors import TargetError
from rocmbuild.fs.root import ConfinementError, Root
from rocmbuild.swap.pathstate import Observer
from rocmbuild.swap.landing import under

if TYPE_CHECKING:
    from rocmbuild.store.artifact import Manifest
    from rocmbuild.swap.plan import Action

DB_DIR = "share/miopen/db"
DB_SUFFIXES = (".kdb", ".db", ".db.txt", ".pdb.txt", ".fdb.txt", ".model")
DB_INFIXES = (".HIP.", ".OpenCL.")
ROLE = "db"


def is_db_name(name: str) -> bool:
    """A file name MIOpen may open in its system database dir."""
    return not name.startswith(".") and (name.endswith(DB_SUFFIXES) or any(i in name for i in DB_INFIXES))


def db_dir_of(libdir: str | Path) -> Path:
    """The system database dir a libMIOpen in ``libdir`` reads."""
    return Path(libdir).parent / DB_DIR


def list_names(db_dir: Path, base: str) -> list[str]:
    """The names in ``db_dir``, listed beneath the root ``base`` (no symlink followed on the way);
    [] when the dir does not exist."""
    p = os.path.normpath(str(db_dir))
    for b in dict.fromkeys((os.path.normpath(base), os.path.realpath(base))):
        if under(p, b, strictly=True):
            try:
                with Root.open(b, "the environment") as root:
                    return root.listdir(os.path.relpath(p, b))
            except (FileNotFoundError, NotADirectoryError):
                return []
            except ConfinementError as exc:
                raise TargetError(f"cannot list MIOpen's database dir {db_dir}: {exc.message}",
                                  "replace the symlink on its way by a directory and run again",
                                  details={"path": str(db_dir)}) from None
    return []


def stale_actions(m: "Manifest", libdir: Path, base: str, taken: set[str], obs: Observer,
                  allow_outside: bool = False) -> list["Action"]:
    """A ``remove`` action for each DB file in the target's database dir that the plan does not
    place (``taken``: the destinations already planned); none for a non-MIOpen artifact. A
    database dir reached through a symlink out of the target is refused, unless
    ``--allow-outside-prefix``: then its files are left as they are (rocmbuild moves nothing
    aside outside the target; the data actions already said they place files there)."""
    from rocmbuild.swap.plan import Action

    if m.encoding != "miopen":
        return []
    db_dir = db_dir_of(libdir)
    lister: Callable[[Path], list[str]] | None = getattr(obs, "listdir", None)
    try:
        names = lister(db_dir) if lister is not None else list_names(db_dir, base)
    except TargetError:
        if not allow_outside:
            raise
        return []
    out = []
    for name in sorted(n for n in names if is_db_name(n)):
        path = db_dir / name
        before = obs.state(path)
        if str(path) in taken or before.kind not in ("file", "link"):
            continue
        out.append(Action("remove", str(path), ROLE, before))
    return out
