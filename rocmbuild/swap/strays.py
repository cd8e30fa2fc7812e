"""Stray library files: names matching TheRock's preload glob that are not the placed library.

TheRock's wheels load MIOpen by preload: ``torch/_rocm_init.py`` calls
``rocm_sdk.initialize_process(preload_shortnames=[..., "miopen", ...])``, whose
``find_libraries`` dlopens ``sorted(<libraries package>/lib.glob("libMIOpen.so*"))[0]`` (and
``ROCM_SDK_PRELOAD_LIBRARIES`` names more shortnames the same way). So in such a lib dir the
*first sorted name* decides what loads, whatever the linker would pick by SONAME.

Decisions (in full: docs/transactions.md, "Stray files"; docs/miopen.md, "TheRock wheels"):
* a stray is a name in the library's directory matching ``<stem>.so*`` (the preload's glob, by
  ``fnmatch`` on the name: a leading dot never matches) that does not resolve to the placed file;
  a dangling link is a stray too (the preload's ``dlopen`` of it fails);
* in a TheRock lib dir (layout ``therock``, both generations) the destination is the libraries
  package's own file: the SONAME-named file (TheRock's runtime wheels ship only SONAME files, no
  links), even when a stray sorted first is what the process loaded;
* there, any stray refuses the apply (exit 2): sorted first it is what the preload loads; sorted
  after it loads as soon as the names before it go, so the glob must match only the placed chain.
  ``--move-strays`` moves each into the transaction's backups instead (a ``remove`` action, role
  ``stray``, done before the library is placed; rollback puts it back). Elsewhere (conda, wheel,
  system) the linker loads by SONAME: a stray is only noted, and moved with the flag;
* rocmbuild's own temp names start with a dot (``.libMIOpen.so.1.rocmbuild-new-<txn>``) and its
  backups live in the state dir, so nothing it makes ever matches the glob in a lib dir.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from rocmbuild.errors import TargetError
from rocmbuild.names import safe_text
from rocmbuild.swap.pathstate import FsObserver, Observer, resolve

FLAG = "--move-strays"
PRELOAD = "TheRock's preload"
SPECIAL = "special file"


def glob_of(stem: str) -> str:
    """The preload's pattern for a library stem (``libMIOpen`` -> ``libMIOpen.so*``)."""
    return f"{stem}.so*"


def therock_package(path: str | Path) -> tuple[str, str] | None:
    """(package dir name, generation) of a TheRock libraries package on ``path``'s way, or None.
    ``_rocm_sdk_libraries_gfx1151``: "per-family"; ``_rocm_sdk_libraries`` (with device overlays
    from ``rocm-sdk-device-gfxNNNN``): "multi-arch"."""
    for part in Path(path).parts:
        if re.fullmatch(r"_rocm_sdk_libraries_gfx[0-9a-zA-Z]+(-[a-z]+)?(_.*)?", part):
            return part, "per-family"
        if part.startswith("_rocm_sdk_libraries"):
            return part, "multi-arch"
    return None


def package_file(loaded: str | Path, soname: str | None, obs: Observer) -> Path:
    """Where a TheRock lib dir's library lives: the SONAME-named file beside the loaded one when it
    resolves to a file (the package's own, which the preload loads once strays are gone), else the
    file the loaded name resolves to."""
    real = Path(resolve(loaded, obs))
    if soname:
        own = Path(loaded).parent / soname
        if obs.state(own).kind in ("file", "link"):
            target = Path(resolve(own, obs))
            if obs.state(target).kind == "file":
                return target
    return real


@dataclass(frozen=True)
class Stray:
    """A name matching the preload's glob that does not lead to the placed library."""

    path: str
    first: bool  # sorted first among the glob's matches: what TheRock's preload loads
    before: str  # the first sorted name that leads to the placed file ("" : none does)
    what: str  # "file", "link -> X", "dangling link -> X", or a special kind ("directory", "FIFO", ...)

    @property
    def movable(self) -> bool:
        """A file or a link (a backup is a hardlink): not a directory, FIFO, socket or device."""
        return self.what == "file" or "link -> " in self.what

    def reason(self, preload: bool = True) -> str:
        """Why it matters (without its name)."""
        if not preload:
            return (f"matches {glob_of(_stem(Path(self.path).name))} but is not the placed library; the linker "
                    "loads by SONAME here, so it does not decide what loads")
        if self.first:
            return f"sorted first, it is what {PRELOAD} loads"
        return f"sorted after {self.before} today, it is what {PRELOAD} loads as soon as the names before it go"

    def why(self, preload: bool = True) -> str:
        return f"{Path(self.path).name} ({self.what}): {self.reason(preload)}"

    def to_json(self, preload: bool = True) -> dict[str, Any]:
        return {"path": self.path, "first": self.first, "what": self.what, "why": self.why(preload)}


def _stem(name: str) -> str:
    return name.split(".so", 1)[0]


def _listing(libdir: Path) -> list[str]:
    try:
        return os.listdir(libdir)
    except OSError:
        return []


def find(libdir: str | Path, stem: str, placed: str | Path, obs: Observer,
         names: Iterable[str] | None = None) -> tuple[Stray, ...]:
    """Every stray of ``stem`` in ``libdir`` (sorted as the preload sorts them) for the file
    ``placed``; ``names``: the directory's listing (default: read now)."""
    libdir, placed = Path(libdir), str(placed)
    pattern = glob_of(stem)
    matches = sorted(n for n in (_listing(libdir) if names is None else names) if fnmatch.fnmatchcase(n, pattern))
    leads, what = {}, {}
    for n in matches:
        st = obs.state(libdir / n)
        try:
            real = resolve(libdir / n, obs)
        except ValueError:
            real = ""
        leads[n] = real == placed and obs.state(Path(real)).kind == "file"
        if st.kind == "other":
            what[n] = special_kind(libdir / n)
        else:
            what[n] = "file" if st.kind == "file" else (f"link -> {st.target}" if real and obs.state(
                Path(real)).kind == "file" else f"dangling link -> {st.target}")
    ok = [n for n in matches if leads[n]]
    return tuple(Stray(str(libdir / n), i == 0, ok[0] if ok else "", what[n])
                 for i, n in enumerate(matches) if not leads[n])


def special_kind(path: Path) -> str:
    """What a name that is neither a file nor a link is (``directory``, ``FIFO``, ``socket``, ...)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return SPECIAL
    for test, word in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return word
    return SPECIAL


def check(found: tuple[Stray, ...], placed: str | Path, preload: bool, move: bool) -> None:
    """Refuse (exit 2, nothing changed) what a plan cannot do with the strays: any stray in a TheRock
    lib dir without ``move``; with ``move``, one that is no file or link (a backup is a hardlink: a
    directory, a FIFO or a socket cannot be moved aside, and must not fail at swap time)."""
    stuck = tuple(s for s in found if not s.movable)
    if (found and preload and not move) or (move and stuck):
        raise refusal(found if preload else stuck, placed, preload)


def refusal(strays: tuple[Stray, ...], placed: str | Path, preload: bool = True) -> TargetError:
    """The refusal of strays (exit 2), naming each and why it matters."""
    glob = glob_of(_stem(Path(placed).name))
    # one line per stray: a name holding a newline must not print a line of its own (safe_text)
    lines = "\n  ".join(safe_text(f"{s.path} is a {s.what}: {s.reason(preload)}" if not s.movable else
                                  f"{s.path} ({s.what}): {s.reason(preload)}") for s in strays)
    stuck = [safe_text(s.path) for s in strays if not s.movable]
    if preload:
        what = (f"{len(strays)} stray file(s) in {Path(placed).parent} match {glob}, the names {PRELOAD} "
                "(rocm_sdk.find_libraries) loads the first sorted of")
    else:
        what = f"{len(strays)} name(s) in {Path(placed).parent} match {glob} and cannot be moved aside by {FLAG}"
    hint = (f"remove them yourself, or pass {FLAG} to move them into this transaction's backups "
            "(`rocmbuild rollback` puts them back)")
    if stuck:
        hint = (f"move {'it' if len(stuck) == 1 else 'them'} out of the library's directory yourself ({', '.join(stuck)}; {FLAG} moves only files "
                "and links, into the transaction's backups by hardlink), then run again"
                + (f"; the other names {FLAG} can move" if len(stuck) < len(strays) else ""))
    return TargetError(
        f"{what}; nothing was changed:\n  {lines}", hint,
        details={"strays": [s.to_json(preload) for s in strays], "placed": str(placed)},
    )


def notes(strays: tuple[Stray, ...], preload: bool, moved: bool) -> list[str]:
    """The plan's notes on strays (moved, or merely reported where the linker decides)."""
    if moved:
        return [f"stray {s.path} moved into the transaction's backups ({s.why(preload)})" for s in strays]
    return [f"stray {s.path}: {s.why(preload)} (pass {FLAG} to move it aside)" for s in strays]


def scan(loaded: str | Path, soname: str | None) -> tuple[tuple[Stray, ...], bool]:
    """For ``status`` and ``doctor``: the strays beside a loaded library file (judged against the
    file a plan would place: in a TheRock lib dir the package's own), and whether the dir is a
    TheRock libraries package's (where the preload's first sorted name decides)."""
    obs = FsObserver()
    preload = therock_package(loaded) is not None
    placed = package_file(loaded, soname, obs) if preload else Path(resolve(loaded, obs))
    stem = _stem(Path(loaded).name)
    return find(Path(loaded).parent, stem, placed, obs), preload
