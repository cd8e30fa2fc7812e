"""Which of the target's names receive which artifact file, the layouts' one vocabulary, and the
check that every link of a chain still resolves to the placed file. Pure: read through an Observer.

Decisions (in full: docs/transactions.md, "Planning"; the vocabulary: docs/verification.md):
* a layout is named from where the loaded file is, the same word in ``status``, ``plan`` and JSON:
  ``therock`` (a path component ``_rocm_sdk_*``: TheRock's Python packages), ``wheel`` (below a
  ``site-packages``/``dist-packages``: pip's files), ``conda`` (``<prefix>/lib``), ``system``
  (anything else: ``/opt/rocm/lib``, ``/usr/lib/x86_64-linux-gnu``: what ``ldconfig`` manages);
* an artifact's names are taken relative to the library's own directory: a link elsewhere in the
  tree (MIOpen's ``miopen/lib/libMIOpen.so -> ../../lib/libMIOpen.so``) is no lib-dir name and is
  never mapped;
* the new bytes go to the file the target's chain resolves to, under its own name; the target's
  links are kept as they are, and an artifact name the target lacks is not added (pip's RECORD and
  ``ldconfig`` see nothing move). Only a set member the target has under no name at all is added,
  under the artifact's names;
* after the plan, every name of the chain that exists in the target must resolve to the placed
  file (dangling, or another file: refused before anything changes).
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from rocmbuild.errors import TargetError
from rocmbuild.swap.pathstate import Observer, PathState, resolve

LAYOUTS = ("conda", "wheel", "therock", "system")


def layout_of(path: str | Path, prefixes: Iterable[str | Path]) -> str:
    """The layout word for a library file at ``path`` (see the module notes); ``prefixes``: the
    target's prefix as named and as resolved."""
    p = Path(os.path.normpath(str(path)))
    if any(part.startswith("_rocm_sdk_") for part in p.parts):
        return "therock"
    if any(part in ("site-packages", "dist-packages") for part in p.parts):
        return "wheel"
    if any(p.parent == Path(os.path.normpath(str(pre))) / "lib" for pre in prefixes if pre):
        return "conda"
    return "system"


@dataclass(frozen=True)
class NameMap:
    """One line of "which name maps to which, and why" (``target`` None: not placed)."""

    artifact: str  # the artifact's path, relative to its tree
    target: str | None
    why: str

    def describe(self) -> str:
        return f"{self.artifact} -> {self.target or '(nothing)'}: {self.why}"


def lib_dir_names(file: str, links: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the names in the library's own directory, dev link first and the file last; the links that
    live elsewhere in the tree)."""
    here = posixpath.dirname(file)
    own = sorted((posixpath.basename(x) for x in links if posixpath.dirname(x) == here), key=len)
    other = tuple(sorted(x for x in links if posixpath.dirname(x) != here))
    return tuple(dict.fromkeys([*own, posixpath.basename(file)])), other


def find_beside(names: Iterable[str], dirs: Iterable[Path], obs: Observer) -> Path | None:
    """A set member torch has not mapped yet: the first of its names (SONAME first) that exists
    beside a mapped member, resolved to its file (None: under no name in any of ``dirs``)."""
    for d in dirs:
        for name in names:
            st = obs.state(d / name)
            if st.kind in ("file", "link"):
                real = Path(resolve(d / name, obs))
                if obs.state(real).kind == "file":
                    return real
    return None


class After:
    """The target as a plan would leave it: the planned files and links over ``obs``."""

    def __init__(self, obs: Observer, files: Iterable[str], links: dict[str, str], gone: Iterable[str] = ()):
        self.obs, self.files, self.links, self.gone = obs, set(files), links, set(gone)

    def state(self, path: Path) -> PathState:
        p = str(path)
        if p in self.gone:  # removed by the plan (a stray moved aside)
            return PathState("absent")
        if p in self.links:
            return PathState("link", target=self.links[p])
        if p in self.files:
            return PathState("file")
        return self.obs.state(path)

    def sha256(self, path: Path) -> str:  # pragma: no cover - never hashed here
        return self.obs.sha256(path)


def check_chains(chains: Iterable[tuple[Path, tuple[str, ...]]], after: After) -> None:
    """Every existing name of each chain (placed file, names) resolves to that file after the plan;
    else a TargetError listing each bad name, before anything changes."""
    bad = []
    for dest, names in chains:
        for name in names:
            p = dest.parent / name
            if p == dest or after.state(p).kind == "absent":
                continue
            try:
                real = resolve(p, after)
            except ValueError:
                real = "(a symlink loop)"
            if real != str(dest) or after.state(Path(real)).kind != "file":
                what = "dangling" if after.state(Path(real)).kind == "absent" else f"another file, {real}"
                bad.append(f"{p} would lead to {what}, not to the placed {dest.name}")
    if bad:
        raise TargetError(
            "the swap would leave a link of the library's chain pointing elsewhere; nothing was changed:\n  "
            + "\n  ".join(bad),
            "repair or remove those links in the environment (each should lead to the library file "
            "the target loads), then run again",
            details={"links": bad},
        )


def soname_notes(members: Iterable[Any], after: After) -> list[str]:  # plan's members: .dest, .lib
    """A member whose SONAME has no name resolving to its file: ``ldconfig`` would add that link
    (said, not refused: the file the target had is named so too, as a rule)."""
    return [f"{mem.dest.parent / mem.lib.soname} does not exist: the placed file's SONAME is "
            f"{mem.lib.soname}, so `ldconfig` would add a link {mem.lib.soname} -> {mem.dest.name}"
            for mem in members if mem.lib.soname and mem.lib.soname != mem.dest.name
            and after.state(mem.dest.parent / mem.lib.soname).kind == "absent"]


def placed_unchanged(before: PathState, rec: tuple[PathState, str] | None, sha: str | None) -> bool:
    """``before`` is the file the active transaction placed, untouched since (its identity after
    the swap, ctime included): known to hold ``sha`` without reading a byte."""
    if rec is None or not sha or rec[1] != sha or not rec[0].ctime_ns or before.kind != "file":
        return False
    keys = ("dev", "inode", "size", "mtime_ns", "ctime_ns")
    return all(getattr(before, k) == getattr(rec[0], k) for k in keys)
