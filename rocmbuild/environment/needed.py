"""What an artifact's libraries need (``DT_NEEDED``) against what the target provides, judged
before any swap (``flows.guards.refuse_needed``).

Decisions:

* Read: each library of the artifact (its real file in the artifact's tree): ``DT_NEEDED``,
  ``DT_RUNPATH`` and ``DT_RPATH``, with pyelftools. A file that cannot be read as ELF (or a bundle
  read in place, whose files are not on disk) is skipped and said so (``skipped``).
* Provided: the SONAMEs the target's torch process has mapped (the probe: every shared object in
  its ``/proc/self/maps``; a SONAME read from the ELF while the path is still the mapped inode,
  else from the file name; read lazily, :class:`Mapped`), the artifact's own libraries (the swap
  places them together), and a file of that name where the loader would look: the lib dir the
  library is swapped into, its RUNPATH/RPATH entries with ``$ORIGIN`` standing for that lib dir,
  the dirs of the mapped libraries (the env's lib dirs), ``LD_LIBRARY_PATH`` (the caller's and
  the target's activation), the names ``ldconfig -p`` lists (when there is an ``ldconfig``) and
  the default dirs.
* A *conflict* (refused by the caller, exit 2): a needed SONAME the process does not map while
  it maps another SONAME of the same stem (the name before ``.so``): ``libamdhip64.so.7`` needed,
  ``libamdhip64.so.6`` mapped. The new library would pull a second HIP runtime into torch's
  process (or not load at all): that never works for the ROCm libraries, whose SONAME major
  follows the ROCm release (``libamdhip64.so.N`` is ROCm N, said in the message).
* A needed SONAME found nowhere is a *warning*, not a refusal: rocmbuild cannot see every place
  the loader will search at run time (a launcher's ``LD_LIBRARY_PATH``, the RPATH of the object
  that loads the library, ``ld.so.conf`` dirs not in the cache), and the verification after the
  swap proves the load (a library that does not load fails it: rolled back, exit 4). Refusing on
  a guess would block swaps that work.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from rocmbuild.proc import runner
from rocmbuild.errors import RequirementError
from rocmbuild.environment.probe import LoadedLibrary, ProbeReport, soname_from_name

DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
_LDCONFIG_RE = re.compile(r"^\s*(\S+)\s+\(.*\)\s+=>\s+(\S.*)$")


@dataclass(frozen=True)
class Elf:
    """What the loader reads of one library: its DT_NEEDED and its search path (RUNPATH, else RPATH)."""

    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    rpath: tuple[str, ...]


def read_elf(path: Path) -> Elf | None:
    """``path``'s dynamic section (pyelftools); None when it is not a readable ELF file."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    needed: list[str] = []
    runpath: list[str] = []
    rpath: list[str] = []
    try:
        with open(path, "rb") as f:
            for section in ELFFile(f).iter_sections():
                if not isinstance(section, DynamicSection):
                    continue
                # pyelftools sets needed/runpath/rpath on a tag at run time (its types do not declare them)
                for tag in section.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(tag.needed)  # type: ignore[attr-defined]
                    elif kind == "DT_RUNPATH":
                        runpath += [p for p in tag.runpath.split(":") if p]  # type: ignore[attr-defined]
                    elif kind == "DT_RPATH":
                        rpath += [p for p in tag.rpath.split(":") if p]  # type: ignore[attr-defined]
    except (ELFError, OSError, ValueError):
        return None
    return Elf(tuple(needed), tuple(runpath), tuple(rpath))


def stem(soname: str) -> str:
    """``libamdhip64.so.7`` -> ``libamdhip64`` (the name before ``.so``)."""
    return soname.split(".so", 1)[0]


def rocm_of(soname: str) -> str | None:
    """``libamdhip64.so.6`` -> ``ROCm 6`` (HIP's SONAME major is the ROCm release's); else None."""
    m = re.fullmatch(r"libamdhip64\.so\.(\d+)", soname)
    return f"ROCm {m.group(1)}" if m else None


@dataclass(frozen=True)
class Conflict:
    library: str  # the artifact's file, e.g. lib/libMIOpen.so.1.0
    needed: str  # libamdhip64.so.7
    mapped: str  # the SONAME of that stem the process maps: libamdhip64.so.6
    mapped_path: str

    def to_json(self) -> dict:
        return {"library": self.library, "needed": self.needed, "mapped": self.mapped, "mapped_path": self.mapped_path}


@dataclass(frozen=True)
class Needed:
    """The verdict: conflicts (refused), names found nowhere (warned), libraries not read."""

    conflicts: tuple[Conflict, ...] = ()
    missing: tuple[tuple[str, str], ...] = ()  # (artifact library, needed SONAME)
    skipped: tuple[str, ...] = ()  # artifact libraries that could not be read
    checked: tuple[str, ...] = ()
    searched: tuple[str, ...] = field(default=(), compare=False)  # the dirs looked in

    def to_json(self) -> dict:
        return {"conflicts": [c.to_json() for c in self.conflicts],
                "missing": [{"library": lib, "needed": n} for lib, n in self.missing],
                "skipped": list(self.skipped), "checked": list(self.checked)}


def ldconfig_names(timeout: float = 10) -> dict[str, str] | None:
    """SONAME -> path from ``ldconfig -p`` (the loader's cache); None when there is no ldconfig."""
    prog = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)),
                                            None)
    if prog is None:
        return None
    try:
        done = runner.capture([prog, "-p"], timeout=timeout)
    except (RequirementError, OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    out: dict[str, str] = {}
    for line in done.stdout.splitlines():
        m = _LDCONFIG_RE.match(line)
        if m:
            out.setdefault(m.group(1), m.group(2))
    return out


def _expand(entry: str, origin: Path) -> str:
    return entry.replace("${ORIGIN}", str(origin)).replace("$ORIGIN", str(origin))


def check(tree: Path, library_files: Iterable[str], report: ProbeReport, libdir: Path, *,
          env: Mapping[str, str | None] | None = None, system: dict[str, str] | None = None,
          sonames: Iterable[str | None] = ()) -> Needed:
    """The artifact's libraries (``library_files``, relative to ``tree``; ``sonames``: theirs)
    against the target whose probe is ``report``, the library swapped into ``libdir`` (see the
    module notes). ``env``: the target's activation (its ``LD_LIBRARY_PATH``); ``system``:
    ``ldconfig -p``'s names (None: asked, once, only when a needed name is neither mapped, nor the
    artifact's own, nor a file in a searched dir: the usual apply, whose new library needs what the
    old one did, starts no ``ldconfig``)."""
    files = tuple(library_files)
    mapped = Mapped(report.mapped or report.libraries)
    own = ({soname_from_name(os.path.basename(f)) for f in files} | {os.path.basename(f) for f in files}
           | {n for n in sonames if n})
    elves: dict[str, Elf] = {}
    skipped = []
    for rel in files:
        elf = read_elf(tree / rel)
        if elf is None:
            skipped.append(rel)
        else:
            elves[rel] = elf
    base_dirs = _dirs(libdir, report, env)
    conflicts: list[Conflict] = []
    missing: list[tuple[str, str]] = []
    searched: list[str] = []
    for rel, elf in elves.items():
        dirs = [_expand(p, libdir) for p in (elf.runpath or elf.rpath)] + base_dirs
        searched += [d for d in dirs if d not in searched]
        for need in elf.needed:
            if need in own or mapped.has(need):
                continue
            other = [n for n in mapped.by_stem().get(stem(need), []) if n != need]
            if other:
                conflicts.append(Conflict(rel, need, other[0], mapped.by_soname()[other[0]].path))
            elif not any(os.path.exists(os.path.join(d, need)) for d in dirs):
                if system is None:  # asked once, and only for a name found nowhere else
                    system = ldconfig_names() or {}
                if need not in system:
                    missing.append((rel, need))
    return Needed(tuple(conflicts), tuple(missing), tuple(skipped), tuple(elves), tuple(searched))


class Mapped:
    """The libraries torch's process maps, by SONAME, read lazily: the same answers as reading
    every mapped file's DT_SONAME up front, which took 0.3 s for the 87 files a real CUDA torch maps.

    A needed name is first looked for among the files whose *name* gives it (``libc.so.6``,
    ``libamdhip64.so.7.2.70204`` -> ``libamdhip64.so.7``), each one's DT_SONAME read to confirm it:
    a library needs a dozen names, each found that way. Only a name not confirmed so (missing,
    a conflict, or a file whose name is not its SONAME) reads every file, as before."""

    def __init__(self, libs: Iterable[LoadedLibrary]) -> None:
        self.libs = tuple(libs)
        self._all: dict[str, LoadedLibrary] | None = None

    def has(self, soname: str) -> bool:
        """Whether a mapped file's SONAME is ``soname``."""
        if any(soname_from_name(os.path.basename(lib.path)) == soname and lib.soname == soname for lib in self.libs):
            return True
        return soname in self.by_soname()

    def by_soname(self) -> dict[str, LoadedLibrary]:
        """Every mapped file by its SONAME (the first file of a SONAME), each file read once."""
        if self._all is None:
            self._all = {}
            for lib in self.libs:
                self._all.setdefault(lib.soname, lib)
        return self._all

    def by_stem(self) -> dict[str, list[str]]:
        """The mapped SONAMEs by stem (the name before ``.so``)."""
        out: dict[str, list[str]] = {}
        for name in self.by_soname():
            out.setdefault(stem(name), []).append(name)
        return out


def _dirs(libdir: Path, report: ProbeReport, env: Mapping[str, str | None] | None) -> list[str]:
    """Where the loader may look besides a library's own RUNPATH: the lib dir, the mapped
    libraries' dirs, ``LD_LIBRARY_PATH`` (the target's activation, then the caller's), the defaults."""
    out = [str(libdir)]
    out += [os.path.dirname(lib.path) for lib in report.mapped or report.libraries]
    for value in ((env or {}).get("LD_LIBRARY_PATH"), os.environ.get("LD_LIBRARY_PATH")):
        out += [p for p in (value or "").split(":") if p]
    out += list(DEFAULT_DIRS)
    seen: list[str] = []
    for d in out:
        if d not in seen:
            seen.append(d)
    return seen
