"""Whose identity runs a target's code: run as root, a target another user owns runs as its owner.

rocmbuild runs the target's code whenever it asks the target's Python anything (``sys.prefix``:
its ``.pth`` files and ``sitecustomize`` run at startup), applies its activation (conda's
``activate.d`` scripts, a venv's ``bin/activate``, ``conda run``) and probes it (``import
torch``). That code is the owner's: as root, running it as root hands the owner root.

Decisions (docs/verification.md, "Whose code, as whom"):
* the owner of a target is the first of these that is not root: the prefix directory (followed
  if it is a link), and for the interpreter given, the directory above its ``bin/``, its ``bin/``
  and the interpreter itself (not followed: a venv's ``bin/python`` links to a root-owned
  ``/usr/bin/python3``, its ``.pth`` files are still the owner's), then the interpreter it links
  to (a root-owned venv made from another user's Python runs that user's binary and stdlib);
  then, in a root-owned env, the
  first of the code it runs at every ask that another user owns (``activate.d`` and its scripts,
  ``bin/activate``, ``lib/python*`` (a conda env's stdlib) and its ``site-packages``, and their
  top-level entries: the ``.pth`` files, ``sitecustomize``, ``torch``, ``os.py``, ``encodings``;
  not deeper, not files another user may only write to);
* policy ``owner`` (the default): run as root, the target's code runs as its owner -- the
  supervisor (``reaper.py``, still root, so it can end the tree) drops the child to the owner's
  uid, primary group and supplementary groups before ``exec``, and sets ``HOME``, ``USER`` and
  ``LOGNAME`` to the owner's as ``su`` does; the swap itself stays root (a placed file keeps the
  owner and mode of what it replaces); ``refuse``: exit 2 naming the owner; ``root``: run as root
  anyway (said once on stderr). ``--run-as`` or the config key ``run_as`` choose it;
* not root: nothing changes (a user cannot become another user, and runs what it runs as itself);
* the owner cannot be assumed to read rocmbuild's own files (``/root`` is 0700): what the owner's
  process must run of rocmbuild's (the probe) is handed over in its environment, not as a path.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rocmbuild.errors import TargetError

POLICIES = ("owner", "refuse", "root")
FLAG = "--run-as"
_state = {"policy": "owner", "warned": False}


@dataclass(frozen=True)
class Identity:
    """Who a child runs as: uid, primary gid, supplementary groups, and the name and home when
    the user database knows them."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str | None = None
    home: str | None = None

    def describe(self) -> str:
        return f"{self.name} (uid {self.uid})" if self.name else f"uid {self.uid}"

    def reaper_args(self) -> list[str]:
        """The supervisor's ``--user UID GID GROUPS`` (groups comma-separated, maybe empty)."""
        return ["--user", str(self.uid), str(self.gid), ",".join(map(str, self.groups))]

    def environment(self) -> dict[str, str]:
        """What ``su`` sets for a non-root user: HOME, USER, LOGNAME (only what is known)."""
        out = {"HOME": self.home} if self.home else {}
        if self.name:
            out.update(USER=self.name, LOGNAME=self.name)
        return out


def set_policy(policy: str | None) -> None:
    """``owner`` (default), ``refuse`` or ``root``: what a root run does with another user's target."""
    _state["policy"] = policy or "owner"


def policy() -> str:
    return str(_state["policy"])


def _uid(path: Path, follow: bool) -> tuple[int, int] | None:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    return st.st_uid, st.st_gid


MAX_ENTRIES = 20000  # entries of one directory looked at for another user's file (a site-packages)


def _code_of(base: Path) -> Iterator[tuple[Path, bool]]:
    """The paths under an env's prefix ``base`` whose code runs when rocmbuild asks it anything:
    conda's ``etc/conda/activate.d`` and its scripts, a venv's ``bin/activate``, each
    ``lib/python*/site-packages`` and its top-level entries (the ``.pth`` files, ``sitecustomize``,
    the ``torch`` package). Yielded as (path, follow links?) -- none is followed."""
    activate_d = base / "etc" / "conda" / "activate.d"
    yield activate_d, False
    yield base / "bin" / "activate", False
    dirs = [activate_d]
    try:
        libs = sorted(os.scandir(base / "lib"), key=lambda e: e.name)
    except OSError:
        libs = []
    for lib in libs:
        if lib.name.startswith("python") and lib.is_dir(follow_symlinks=False):
            site = Path(lib.path) / "site-packages"
            yield Path(lib.path), False
            yield site, False
            dirs += [Path(lib.path), site]  # a conda env's stdlib (os.py, site.py, encodings/) is there too
    for d in dirs:
        try:
            with os.scandir(d) as it:
                for n, entry in enumerate(it):
                    if n >= MAX_ENTRIES:
                        break
                    yield Path(entry.path), False
        except OSError:
            continue


def owner(python: Path | None, prefix: Path | None = None) -> tuple[int, int] | None:
    """(uid, gid) of the target's owner when that is not root (None: root's own, or unknown).

    A root-owned env holding another user's code (its site-packages, a ``.pth`` file, an
    ``activate.d`` script) is that user's: that code runs whenever rocmbuild asks the env anything."""
    for path, follow in _paths(python, prefix):
        found = _uid(path, follow)
        if found is not None and found[0] != 0:
            return found
    return None


def _paths(python: Path | None, prefix: Path | None) -> Iterator[tuple[Path, bool]]:
    """Every path :func:`owner` judges: the prefix, the interpreter and its dirs, then the code
    under each env base (:func:`_code_of`)."""
    bases = [prefix] if prefix is not None else []
    if prefix is not None:
        yield prefix, True
    if python is not None:
        py = Path(os.path.abspath(python))
        yield from ((py.parent.parent, True), (py.parent, True), (py, False), (py, True))
        bases.append(py.parent.parent)
    for base in dict.fromkeys(bases):
        yield from _code_of(base)


def open_to_others(python: Path | None, prefix: Path | None = None) -> tuple[Path, int] | None:
    """The first judged path (a dir or file whose code root would run) that users other than its
    owner may write: world-writable, or group-writable with a group other than root's -- anyone
    there can drop a ``.pth`` file or an ``activate.d`` script. (path, mode); None: none is."""
    for path, follow in _paths(python, prefix):
        try:
            st = os.stat(path) if follow else os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            continue  # a link's own mode means nothing; what it names is judged where it is followed
        if st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid != 0):
            return path, stat.S_IMODE(st.st_mode)
    return None


NOGROUP = 65534  # the kernel's overflow gid: what an unknown owner runs as when its file's group is root's


def identity(uid: int, gid: int) -> Identity:
    """The user ``uid`` as the user database knows it (else ``gid``, the owning group -- never
    root's: an env of ``5000:0``, an image built for arbitrary uids, gets :data:`NOGROUP` -- and
    no supplementary group)."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return Identity(uid, gid or NOGROUP, ())
    try:
        groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
    except OSError:
        groups = (pw.pw_gid,)
    return Identity(uid, pw.pw_gid, groups, pw.pw_name, pw.pw_dir)


def for_target(python: Path | None, prefix: Path | None = None) -> Identity | None:
    """Who runs the code of the target (``python``, ``prefix``): None (as this process) unless this
    process is root and another user owns it; then its owner (policy ``owner``), a TargetError
    naming the owner (``refuse``), or None after one warning (``root``)."""
    if os.geteuid() != 0:
        return None
    found = owner(python, prefix)
    if found is None:
        _refuse_open(python, prefix)
        return None
    who = identity(*found)
    where = prefix if prefix is not None else python
    if policy() == "refuse":
        raise TargetError(
            f"the target {where} belongs to {who.describe()}, and rocmbuild runs as root: its activation, its "
            ".pth files and torch are that user's code, which rocmbuild does not run as root",
            f"run rocmbuild as that user (sudo -u {who.name or '#' + str(who.uid)} rocmbuild ...), or pass "
            f"{FLAG} owner to run the target's code as {who.describe()} (the swap itself stays root), or "
            f"{FLAG} root to run it as root anyway",
            details={"owner_uid": who.uid, "owner": who.name, "target": str(where), "run_as": "refuse"})
    if policy() == "root":
        if not _state["warned"]:
            _state["warned"] = True
            from rocmbuild import ui

            ui.warn(f"the target {where} belongs to {who.describe()}; its code (activation, .pth files, torch) "
                    f"runs as root ({FLAG} root)")
        return None
    return who


def _refuse_open(python: Path | None, prefix: Path | None) -> None:
    """As root, a root-owned target whose code any other user may write (a ``chmod -R 777``'d
    env): there is no owner to run it as, so it is refused (exit 2) unless ``--run-as root``."""
    opened = open_to_others(python, prefix)
    if opened is None:
        return
    path, mode = opened
    where = prefix if prefix is not None else python
    if policy() == "root":
        if not _state["warned"]:
            _state["warned"] = True
            from rocmbuild import ui

            ui.warn(f"{path} (mode {mode:04o}) may be written by other users; the target's code runs as root "
                    f"({FLAG} root)")
        return
    raise TargetError(
        f"the target {where} is root's, but {path} (mode {mode:04o}) may be written by other users: code any "
        "of them put there (a .pth file, an activate.d script) would run as root, and there is no owner to "
        "run it as instead",
        f"make it writable only by root (chmod go-w {path}), or pass {FLAG} root to run the target's code as "
        "root anyway",
        details={"target": str(where), "writable": str(path), "mode": f"{mode:04o}", "run_as": policy()})
