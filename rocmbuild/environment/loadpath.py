"""Where else the library can come from: what makes the activated environment load another file
than the unactivated one, and every ``LD_LIBRARY_PATH``/``LD_PRELOAD`` entry holding another copy.

Decisions:

* The two runs differ when the sets of (device, inode) of the judged kind's mapped files differ,
  or torch imports in one and not in the other. The cause named is each relevant change
  (:meth:`Activation.relevant`) whose entries hold the file the activated run maps (an
  ``LD_LIBRARY_PATH``/``PYTHONPATH`` directory with a name that is that inode, an
  ``LD_PRELOAD``/``ROCM_SDK_PRELOAD_LIBRARIES`` entry that is it); none holds it: every relevant
  change is named.
* A copy is a file matching the library's names (``libMIOpen.so*``; a set's glob as given) that
  is not an inode the activated run maps (when it maps two files of one SONAME, e.g. an
  ``LD_PRELOAD`` copy beside the env's own, every matching file counts). ``LD_LIBRARY_PATH``
  entries are directories (``:`` or ``;`` separated; an empty entry is the current directory);
  ``LD_PRELOAD`` entries (whitespace or ``:`` separated) are files, a bare name is searched by the
  loader and only named when it matches. The caller's entries come first, then the ones the
  activation adds; each says where it came from.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from rocmbuild.environment.activation import Activation, Change
from rocmbuild.environment.probe import BACKEND_LIBRARY, LoadedLibrary, ProbeReport, is_set

CALLER = "the caller's environment"
_SPLIT = {"LD_LIBRARY_PATH": r"[:;]", "LD_PRELOAD": r"[\s:]+", "PYTHONPATH": r":",
          "ROCM_SDK_PRELOAD_LIBRARIES": r"[\s,;:]+"}


@dataclass(frozen=True)
class Difference:
    kind: str
    activated: tuple[str, ...]  # the files of that kind the activated run maps
    unactivated: tuple[str, ...]  # ... and the unactivated one
    unactivated_error: str | None  # torch does not import without the activation
    causes: tuple[Change, ...]

    def text(self) -> str:
        why = "; ".join(f"{c.var} set by {c.source}" + (f" puts {first_entry(c)} first" if first_entry(c) else "")
                        for c in self.causes) or "the activation"
        now = ", ".join(self.activated) or "no library of that kind"
        before = (f"`import torch` fails there ({self.unactivated_error})" if self.unactivated_error
                  else ", ".join(self.unactivated) or "no library of that kind")
        return (f"{why}: the activated environment loads {now}; without the activation it loads {before} "
                "(status, verify and apply judge the activated one)")

    def to_json(self) -> dict:
        return {"kind": self.kind, "activated": list(self.activated), "unactivated": list(self.unactivated),
                "unactivated_error": self.unactivated_error, "causes": [c.to_json() for c in self.causes],
                "text": self.text()}


@dataclass(frozen=True)
class Copy:
    var: str  # LD_LIBRARY_PATH | LD_PRELOAD
    entry: str
    source: str  # CALLER, or the activation file that added it
    files: tuple[str, ...]

    def text(self) -> str:
        came = f"from {self.source}" if self.source == CALLER else f"set by {self.source}"
        entry = self.entry or "(empty: the current directory)"
        return f"{self.var} entry {entry} ({came}) holds another copy: {', '.join(self.files)}"

    def to_json(self) -> dict:
        return {"var": self.var, "entry": self.entry, "source": self.source, "files": list(self.files)}


def entries(var: str, value: str | None) -> list[str]:
    if not value:
        return []
    parts = re.split(_SPLIT.get(var, ":"), value)
    return [p for p in parts if p or var == "LD_LIBRARY_PATH"]


def first_entry(c: Change) -> str | None:
    """The first entry a change adds in front (``LD_LIBRARY_PATH=/x/lib:$LD_LIBRARY_PATH`` -> /x/lib)."""
    before = set(entries(c.var, c.before))
    return next((e for e in entries(c.var, c.after) if e and e not in before), None)


def library_of(report: ProbeReport) -> tuple[str, str]:
    """(probe kind, library name) judged for this report's backend (a ROCm torch or none: MIOpen)."""
    kind = report.backend or "miopen"
    return kind, BACKEND_LIBRARY[kind]


def _pattern(library: str) -> str:
    return library if is_set(library) else f"{library}.so*"


def _holds(c: Change, lib: LoadedLibrary) -> bool:
    for e in entries(c.var, c.after):
        if not e:
            continue
        if c.var in ("LD_PRELOAD", "ROCM_SDK_PRELOAD_LIBRARIES"):
            if "/" in e and lib.same_file(e):
                return True
        elif os.path.realpath(e) == os.path.dirname(lib.path) or os.path.realpath(e) in Path(lib.path).parents:
            return True
    return False


def difference(act: Activation, activated: ProbeReport, other: ProbeReport | None) -> Difference | None:
    """What the activation changes in what torch loads; None when nothing (or not probed twice)."""
    if other is None:
        return None
    kind, _library = library_of(activated)
    mine, theirs = activated.loaded(kind), other.loaded(kind)
    if {(x.dev, x.inode) for x in mine} == {(x.dev, x.inode) for x in theirs} and not other.torch_error:
        return None
    relevant = act.relevant()
    causes = tuple(c for c in relevant if any(_holds(c, lib) for lib in mine)) or relevant
    return Difference(kind, tuple(x.path for x in mine), tuple(x.path for x in theirs), other.torch_error, causes)


def copies(act: Activation, report: ProbeReport, environ=None) -> list[Copy]:
    """Every LD_LIBRARY_PATH / LD_PRELOAD entry (the caller's, then the activation's) holding a copy
    of the judged library that the activated run does not map."""
    environ = os.environ if environ is None else environ
    kind, library = library_of(report)
    loaded = report.loaded(kind)
    sonames = [lib.soname for lib in loaded]
    if len(set(sonames)) != len(sonames):
        loaded = ()  # two files of one SONAME mapped: none of them is "the" library, every copy counts
    out = []
    for var in ("LD_LIBRARY_PATH", "LD_PRELOAD"):
        caller = entries(var, environ.get(var))
        ch = act.change(var)
        added = entries(var, ch.after) if ch is not None else []
        for e in dict.fromkeys(caller + added):
            files = _matching(var, e, _pattern(library))
            other = tuple(f for f in files if not any(lib.same_file(f) for lib in loaded))
            if other:
                # an entry not the caller's came from the activation's change
                out.append(Copy(var, e, CALLER if e in caller or ch is None else ch.source, other))
    return out


def _matching(var: str, entry: str, pattern: str) -> list[str]:
    if var == "LD_PRELOAD":
        ok = "/" in entry and fnmatch.fnmatchcase(os.path.basename(entry), pattern) and os.path.isfile(entry)
        return [entry] if ok else []
    try:
        names = sorted(os.listdir(entry or "."))
    except OSError:
        return []
    return [os.path.join(entry, n) for n in names
            if fnmatch.fnmatchcase(n, pattern) and os.path.isfile(os.path.join(entry, n))]


__all__ = ["Difference", "Copy", "difference", "copies", "entries", "first_entry", "library_of", "CALLER"]
