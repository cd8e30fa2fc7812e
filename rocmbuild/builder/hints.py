"""What to install, in the words of the machine found: a recipe hint picked for its distribution
(``/etc/os-release``), and the fixes of many failed checks merged into one line to paste.

Decisions:

* ``/etc/os-release`` (else ``/usr/lib/os-release``) under ``ROCMBUILD_ROOT`` (tests fake a
  machine with it); ``ID`` and the words of ``ID_LIKE``. Only its first 64 KiB are read.
* A hint table's lookup order: ``rocm`` when the ROCm found has AMD's layout (``/opt/rocm``, AMD's
  repository's packages), then ``ID``, then each ``ID_LIKE`` in order, then ``default``; none of
  them: no hint (the check's own generic fix stays).
* Merging: a fix that is exactly one install command of a known package manager (``apt install``,
  ``apt-get install``, ``dnf install``, ``yum install``, ``zypper install``/``in``, ``pacman -S``,
  ``apk add``, ``pip install``; an optional ``sudo`` and ``-y`` style options kept in the
  prefix), or several joined by ``;`` / ``&&``, joins the commands with the same prefix: one
  command each, packages once, in the order first named. Commands of different managers are
  joined with `` && ``. A fix that is not such a command (prose, a URL) is kept apart, once.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from rocmbuild.recipe.model import Hint
from rocmbuild.recipe.rocm import host_root

_MANAGERS = {"apt": ("install",), "apt-get": ("install",), "dnf": ("install",), "yum": ("install",),
             "zypper": ("install", "in"), "pacman": ("-S", "-Sy", "-Syu"), "apk": ("add",), "pip": ("install",),
             "pip3": ("install",)}
_PKG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_:=<>~@/-]*$")


@dataclass(frozen=True)
class OsRelease:
    id: str = ""
    like: tuple[str, ...] = ()
    pretty: str = ""

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(x for x in (self.id, *self.like) if x))


def os_release(root: Path | None = None) -> OsRelease:
    """``ID``, ``ID_LIKE`` and ``PRETTY_NAME`` of the machine (``ROCMBUILD_ROOT``'s), empty when unknown."""
    root = root or host_root()
    for rel in ("etc/os-release", "usr/lib/os-release"):
        try:
            with open(root / rel, "rb") as f:
                text = f.read(64 << 10).decode("utf-8", "replace")
        except OSError:
            continue
        fields = {}
        for line in text.splitlines():
            key, eq, value = line.partition("=")
            if not eq or not re.fullmatch(r"[A-Z_]+", key.strip()):
                continue
            try:
                words = shlex.split(value, comments=False)
            except ValueError:
                continue
            fields[key.strip()] = " ".join(words)
        return OsRelease(fields.get("ID", "").lower(), tuple(fields.get("ID_LIKE", "").lower().split()),
                         fields.get("PRETTY_NAME", ""))
    return OsRelease()


def pick(hint: Hint | None, *, amd_layout: bool, osr: OsRelease | None = None) -> str | None:
    """The text of ``hint`` for this machine (the module notes)."""
    if hint is None or isinstance(hint, str):
        return hint
    table = dict(hint)
    osr = osr if osr is not None else os_release()
    for key in (("rocm",) if amd_layout else ()) + osr.ids + ("default",):
        if key in table:
            return table[key]
    return None


def _command(text: str) -> tuple[tuple[str, ...], list[str]] | None:
    """``(prefix, packages)`` of one install command, or None when ``text`` is not exactly one."""
    try:
        words = shlex.split(text)
    except ValueError:
        return None
    prefix: list[str] = []
    if words[:1] == ["sudo"]:
        prefix, words = ["sudo"], words[1:]
    if len(words) < 3 or words[0] not in _MANAGERS:
        return None
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] not in _MANAGERS[words[0]]:
        i += 1  # options before the verb (apt-get -y install)
    if i >= len(words) or words[i] not in _MANAGERS[words[0]]:
        return None
    j = i + 1
    while j < len(words) and words[j].startswith("-"):
        j += 1  # options after the verb (dnf install -y)
    pkgs = words[j:]
    if not pkgs or not all(_PKG_RE.match(p) for p in pkgs):
        return None
    return tuple(prefix + words[:j]), pkgs


def merge(fixes: list[str]) -> tuple[str | None, list[str]]:
    """``(one command line, the other fixes)`` for a list of fixes (the module notes)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    other: list[str] = []
    for fix in fixes:
        parts = [p.strip() for p in re.split(r"\s*(?:;|&&)\s*", fix) if p.strip()]
        cmds = [_command(p) for p in parts]
        known = [c for c in cmds if c is not None]
        if not parts or len(known) != len(cmds):
            if fix.strip() and fix.strip() not in other:
                other.append(fix.strip())
            continue
        for prefix, pkgs in known:
            have = groups.setdefault(prefix, [])
            have += [p for p in pkgs if p not in have]
    line = " && ".join(shlex.join([*prefix, *pkgs]) for prefix, pkgs in groups.items()) or None
    return line, other


def summary(fixes: list[str]) -> str:
    """The fixes as one line to paste first, then the others once each, ``; ``-joined."""
    line, other = merge([f for f in fixes if f])
    return "; ".join(([line] if line else []) + other)


def install_line(checks) -> str | None:
    """The failed checks' install commands merged into one line to paste (doctor, plan, the build
    error); None when fewer than two failed checks name a command (their own fix line says it)."""
    bad = [c.fix for c in checks if c.status == "fail" and c.fix]
    line, _other = merge(bad)
    return line if line and sum(merge([f])[0] is not None for f in bad) >= 2 else None
