"""The roots a transaction acts through: the target's (its prefix, or for a library outside it
the lib dir's parent) and its state dir's. Every file action, journal write, backup and history
line goes through one of them (:class:`rocmbuild.fs.root.Root`), never by a path string.

Decisions:
* the target root is the prefix, opened by the path the user named; the paths of a plan are made
  relative to it (named or resolved) and resolved beneath it at every use, no symlink followed.
  A target whose library lives outside its prefix (``--allow-outside-prefix``) acts beneath the
  real parent of its lib dir instead (the lib dir and ``share`` beside it are all it may change);
* the state dir (``<prefix>/.rocmbuild``) is opened beneath the prefix, the outside-prefix one
  (``<state home>/targets/<hash>``) beneath its ``targets`` dir: a state dir, ``journal/`` or
  ``backups/`` that is a symbolic link is refused (exit 2, :class:`~rocmbuild.errors.StatePathError`),
  never followed; state dirs are made 0755 and state files 0644 whatever the umask;
* a path that is not beneath its root is refused before anything is done with it.
"""

from __future__ import annotations

import os
from typing import Literal, overload
from dataclasses import dataclass
from pathlib import Path

from rocmbuild.errors import StatePathError
from rocmbuild.home import STATE_DIRNAME, state_home, targets_dir
from rocmbuild.fs.root import ConfinementError, Root
from rocmbuild.swap.landing import under


def _state_refused(state_dir: Path, exc: BaseException) -> StatePathError:
    return StatePathError(
        f"rocmbuild's state dir {state_dir} cannot be used: {exc}",
        f"rocmbuild keeps its lock, journals and backups in a real directory there: move what is in the way "
        f"aside (e.g. `mv {state_dir} {state_dir}.old`) and run the command again",
        details={"path": str(state_dir)})


@overload
def open_state(state_dir: str | os.PathLike[str], *, create: Literal[True]) -> Root: ...
@overload
def open_state(state_dir: str | os.PathLike[str], *, create: bool) -> Root | None: ...
def open_state(state_dir: str | os.PathLike[str], *, create: bool) -> Root | None:
    """The state dir as a root (made, 0755, with ``create``); None when it does not exist."""
    sdir = Path(state_dir)
    own = sdir.name == STATE_DIRNAME
    try:
        home = state_home()
        if not own and sdir.parent == targets_dir(home):  # beneath the state home's fd: no link followed
            parent = Root.under(home, sdir.parent, "rocmbuild's targets dir", create=create)
        else:
            parent = Root.open(sdir.parent, "the environment" if own else "rocmbuild's targets dir",
                               create=create)
        with parent:
            return parent.sub(sdir.name, "rocmbuild's state dir", create=create)
    except FileNotFoundError:
        if create:
            raise
        return None
    except ConfinementError as exc:
        raise _state_refused(sdir, exc) from None
    except NotADirectoryError as exc:
        raise _state_refused(sdir, exc) from None


@overload
def state_sub(root: Root, rel: str, *, create: Literal[True]) -> Root: ...
@overload
def state_sub(root: Root, rel: str, *, create: bool) -> Root | None: ...
def state_sub(root: Root, rel: str, *, create: bool) -> Root | None:
    """``journal/``, ``backups/<txn>`` ... beneath a state root (None: absent and not made)."""
    try:
        return root.sub(rel, f"rocmbuild's state ({rel})", create=create)
    except FileNotFoundError:
        if create:
            raise
        return None
    except (ConfinementError, NotADirectoryError) as exc:
        raise _state_refused(Path(root.path) / rel, exc) from None


def write_state_file(state_dir: str | os.PathLike[str], rel: str, data: bytes) -> None:
    """Write ``<state_dir>/<rel>`` atomically, 0644, through the state root."""
    root = open_state(state_dir, create=True)
    assert root is not None
    with root:
        if "/" in rel:
            state_sub(root, rel.rsplit("/", 1)[0], create=True).close()
        root.write_atomic(rel, data, 0o644)


@dataclass
class Roots:
    """The two roots of one transaction, and how its absolute paths map beneath them."""

    target: Root
    base: str  # what the target root stands for (the prefix, or the outside lib dir's parent)
    state: Root
    state_dir: str

    @classmethod
    def of(cls, prefix: str, libdir: str, outside: bool, state_dir: str) -> "Roots":
        base = os.path.realpath(os.path.dirname(libdir)) if outside else prefix
        target = Root.open(base, "the environment" if not outside else "the library's directory")
        try:
            state = open_state(state_dir, create=True)
        except BaseException:
            target.close()
            raise
        assert state is not None
        return cls(target, base, state, str(state_dir))

    def rel(self, path: str | os.PathLike[str]) -> str:
        """``path`` relative to the target root (as named or resolved); refused when not beneath."""
        p = os.path.normpath(os.fspath(path))
        for b in dict.fromkeys((os.path.normpath(self.base), os.path.realpath(self.base))):
            if under(p, b, strictly=True):
                rel = os.path.relpath(p, b)
                if STATE_DIRNAME not in rel.split("/"):
                    return rel
        raise ConfinementError(f"{p} is not a path rocmbuild may change in {self.base}; nothing was done there",
                               "the journal or plan naming it is corrupt or hostile: `rocmbuild status` names it")

    def state_rel(self, path: str | os.PathLike[str]) -> str | None:
        """``path`` relative to the state dir (None: not beneath it)."""
        p, s = os.path.normpath(os.fspath(path)), os.path.normpath(self.state_dir)
        return os.path.relpath(p, s) if under(p, s, strictly=True) else None

    def close(self) -> None:
        self.target.close()
        self.state.close()

    def __enter__(self) -> "Roots":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
