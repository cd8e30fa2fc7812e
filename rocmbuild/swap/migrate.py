"""Moving rocmbuild's state out of the cache home (older releases kept it there).

Up to this release the state of ``--allow-outside-prefix`` targets (``targets/<hash>/``: their
journals, backups and history) and the known-targets records lived in the cache home, so the
``rm -rf ~/.cache/rocmbuild`` users do to a cache lost rollback state. They now live in the state
home (``home.state_home()``); :func:`migrate`, run by the CLI before every verb, moves what is
still in the old place.

Decisions:
* The old ``targets/`` and ``known-targets/`` are opened beneath the cache home's fd: one that is
  a symbolic link is not followed (nothing it points to is moved); a warning names it.
* Each entry moves on its own, by one ``renameat`` through the roots of the two directories
  (nothing is copied, no symlink is followed, the backups keep their inodes), so an interrupted
  migration leaves every entry whole in one place or the other, and the next run moves the rest.
  A state dir moves under a shared lock on its own ``lock`` file: a transaction running on it
  (an exclusive holder) makes the migration leave it for the next run, said once in a note.
* A known-targets record that names an outside-prefix state dir in the old place is rewritten to
  name the new one (its file name follows, it is the hash of that path): written atomically in the
  new place, then the old one is removed (a rerun writes the same bytes again).
* An entry already in the new place is never overwritten: the old one stays, with a warning that
  names both (rocmbuild does not merge two histories).
* Another filesystem (``EXDEV``: a rename cannot cross it) is not copied: the warning says the
  ``mv`` to run. Until then that target's state is not found.
* A journal records its state dir; one read from an outside-prefix state dir is taken to be where
  it is read from (swap/journal.py), so a moved state dir acts in its new place.
* The note is one line, printed when something moved (so once); with ``ROCMBUILD_HOME`` set the
  state home is ``$ROCMBUILD_HOME/state``, so the old and new places are in the same directory.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from typing import Callable
from pathlib import Path

from rocmbuild import ui
from rocmbuild.errors import LockedError
from rocmbuild.home import cache_home, known_targets_dir, state_home, targets_dir
from rocmbuild.fs.root import ConfinementError, Root
from rocmbuild.swap import knowntargets
from rocmbuild.swap.statedir import TargetLock

logger = logging.getLogger(__name__)


class _Tally:
    def __init__(self) -> None:
        self.moved = 0
        self.left: list[str] = []


def migrate(cache: Path | None = None, state: Path | None = None) -> int:
    """Move ``targets/`` and ``known-targets/`` entries from ``cache`` to ``state`` (the homes of
    today by default); returns how many moved. Never raises for what it cannot move: it warns."""
    cache = Path(cache) if cache is not None else cache_home()
    state = Path(state) if state is not None else state_home()
    old_targets, old_known = targets_dir(cache), known_targets_dir(cache)
    if os.path.normpath(cache) == os.path.normpath(state) or not (old_targets.is_dir() or old_known.is_dir()):
        return 0
    tally = _Tally()
    try:
        _move_dir(old_targets, targets_dir(state), tally, _move_state_dir)
        _move_dir(old_known, known_targets_dir(state), tally,
                  lambda old, new, name, t: _move_record(old, new, name, t, old_targets, targets_dir(state)))
    except OSError as exc:
        ui.warn(f"could not move rocmbuild's state from {cache} to {state}: {exc.strerror or exc}")
    if tally.moved:
        ui.info(f"note: moved rocmbuild's state ({tally.moved} item(s): outside-prefix targets, known targets) "
                f"from {cache} to {state}; the cache dir now holds only what can be made again")
    for why in tally.left:
        ui.warn(why)
    return tally.moved


def _move_dir(old: Path, new: Path, tally: _Tally, move: Callable[[Root, Root, str, _Tally], None]) -> None:
    try:
        old_root = Root.under(old.parent, old, "the old state in the cache")  # a link there is not followed
    except (FileNotFoundError, NotADirectoryError):
        return
    except ConfinementError:
        tally.left.append(f"{old} is a symbolic link (or not a directory): rocmbuild follows no link in its cache "
                          "home, so no state was moved from there; remove it (what it points to is not touched)")
        return
    with old_root, Root.open(new.parent, "rocmbuild's state home", create=True) as home:
        with home.sub(new.name, "rocmbuild's state home", create=True) as new_root:
            for name in sorted(old_root.listdir()):
                if name.startswith("."):  # a temp of an atomic write: not an entry
                    continue
                move(old_root, new_root, name, tally)
    try:
        with Root.open(old.parent, "the cache") as parent_root:
            parent_root.rmdir(old.name)  # empty now: the old place is gone (not empty: what is left is warned of)
    except OSError:
        pass


def _move_state_dir(old_root: Root, new_root: Root, name: str, tally: _Tally) -> None:
    where = Path(old_root.path) / name
    st = old_root.lstat(name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):  # a link (or a stray file) is no state dir: not followed, not moved
        tally.left.append(f"{where} was not moved: it is not a directory (a symbolic link is never followed)")
        return
    if new_root.lstat(name) is not None:
        tally.left.append(f"{where} was not moved: {Path(new_root.path) / name} exists already (two states of one "
                          "target); look at both and keep one")
        return
    try:
        with TargetLock(where, shared=True):  # no transaction runs on it while it moves
            old_root.replace(name, name, into=new_root)
        tally.moved += 1
        logger.debug("moved %s to %s", where, Path(new_root.path) / name)
    except LockedError:
        tally.left.append(f"{where} is in use by a running rocmbuild: it moves on the next run")
    except FileNotFoundError:  # moved meanwhile by another rocmbuild
        pass
    except OSError as exc:
        _left(tally, where, Path(new_root.path) / name, exc)


def _move_record(old_root: Root, new_root: Root, name: str, tally: _Tally, old_targets: Path, new_targets: Path) -> None:
    where = Path(old_root.path) / name
    try:
        data = knowntargets.read_record(where)
    except (OSError, ValueError):  # unreadable: moved as it is (cache gc still sees it and says so)
        data = None
    if data is None or not data.state_dir.startswith(str(old_targets) + "/"):
        if new_root.lstat(name) is None:
            try:
                old_root.replace(name, name, into=new_root)
                tally.moved += 1
            except FileNotFoundError:
                pass
            except (OSError, ConfinementError) as exc:
                _left(tally, where, Path(new_root.path) / name, exc)
        else:
            old_root.unlink(name)  # the same target's record is there (a newer apply wrote it)
        return
    sdir = new_targets / Path(data.state_dir).name
    new_root.write_atomic(knowntargets.record_name(sdir), knowntargets.record_json(sdir, data.prefix, data.registered))
    old_root.unlink(name)
    tally.moved += 1


def _left(tally: _Tally, where: Path, to: Path, exc: BaseException) -> None:
    if isinstance(exc, OSError) and exc.errno == errno.EXDEV:
        tally.left.append(f"{where} is on another filesystem than {to.parent}: move it yourself "
                          f"(`mv {where} {to}`); until then rocmbuild does not find that state")
    else:
        tally.left.append(f"{where} was not moved to {to}: {getattr(exc, 'strerror', None) or exc}")
