"""Where the paths a manifest names may land in a target: checked while planning, before anything
changes (a refusal is exit 2: InputError for a path the manifest names, TargetError for a target
whose own symlinks lead out).

Decisions:
* a library and its links land in the lib dir the target loads from, under a plain file name; a
  data file or link only under that lib dir or its ``../share`` dir (``<libdir>/../<data path>``
  must start with ``share/``), never anywhere else in the prefix;
* never in the state dir: no component named ``.rocmbuild``, nothing under the plan's state dir,
  checked on the names and again after resolving;
* every existing component of the destination's directory is resolved through the Observer (the
  destination itself is replaced by a rename, which does not follow it); the result must stay inside
  the resolved prefix unless ``--allow-outside-prefix``. The allowed roots are judged on the names,
  so a ``share`` that is a symlink elsewhere in the prefix is fine, and one leading out is not;
* a file the plan reads from the artifact must stay inside the artifact's tree.
"""

from __future__ import annotations

import os
import posixpath
from typing import overload
from dataclasses import dataclass
from pathlib import Path

from rocmbuild.errors import InputError, TargetError
from rocmbuild.home import STATE_DIRNAME
from rocmbuild.swap.pathstate import Observer, resolve

BAD_ARTIFACT = "the artifact (or its bundle) is corrupt or malicious: build or export it again"


def under(path: str, root: str, *, strictly: bool = False) -> bool:
    """``path`` is ``root`` or below it (both normalised, absolute)."""
    root = root.rstrip("/") or "/"
    if path == root:
        return not strictly
    return path.startswith(root if root.endswith("/") else root + "/")


def clean_relative(rel: str, what: str) -> str:
    """``rel`` as a clean relative POSIX path, or an InputError (absolute, ``..``, empty, the state dir)."""
    norm = posixpath.normpath(rel or "")
    if not rel or rel.startswith("/") or norm in (".", "..") or norm.startswith("../"):
        raise InputError(f"the artifact names an unsafe {what}: {rel!r} (absolute, empty or leaving its "
                         "root); nothing was changed",
                         BAD_ARTIFACT, details={"path": rel})
    if STATE_DIRNAME in norm.split("/"):
        raise InputError(f"the artifact names rocmbuild's own state as its {what}: {rel!r}; nothing was changed",
                         BAD_ARTIFACT,
                         details={"path": rel})
    return norm


def plain_name(name: str, what: str) -> str:
    """A file name without a directory: not empty, not ``.``/``..``, not the state dir."""
    if not name or "/" in name or name in (".", "..", STATE_DIRNAME):
        raise InputError(f"the artifact names an unsafe {what}: {name!r}; nothing was changed", BAD_ARTIFACT, details={"path": name})
    return name


@dataclass(frozen=True)
class Places:
    """The rules for one plan: the target's prefix, its state dir, and whether leaving is allowed."""

    prefix: str
    state_dir: str
    allow_outside: bool
    obs: Observer

    def source(self, tree: Path, rel: str, what: str) -> Path:
        """The artifact file ``rel`` (inside the tree, names only: the tree is rocmbuild's own)."""
        return Path(tree) / clean_relative(rel, what)

    def dest(self, dest: Path, roots: tuple[Path, ...], what: str) -> Path:
        """``dest`` if it may be written: strictly under one of ``roots`` by name, not in the state
        dir, and (resolved) inside the prefix unless allowed; else InputError/TargetError."""
        lex = os.path.normpath(str(dest))
        names = [os.path.normpath(str(r)) for r in roots]
        if not any(under(lex, r, strictly=True) for r in names):
            raise InputError(f"the artifact's {what} would land at {lex}: outside {' and '.join(names)}, the only "
                             "places a library's files may go; nothing was changed", BAD_ARTIFACT,
                             details={"path": lex, "allowed": names})
        rel_parts = Path(os.path.relpath(lex, self.prefix)).parts if under(lex, self.prefix) else ()
        if STATE_DIRNAME in rel_parts or under(lex, os.path.normpath(self.state_dir)):
            raise InputError(f"the artifact's {what} would land in rocmbuild's own state ({lex}); nothing was "
                             "changed", BAD_ARTIFACT, details={"path": lex})
        try:
            real = os.path.join(resolve(os.path.dirname(lex), self.obs), os.path.basename(lex))
            real_state, real_prefix = resolve(self.state_dir, self.obs), resolve(self.prefix, self.obs)
        except ValueError as exc:
            raise TargetError(f"cannot place {lex}: {exc}", "fix the symlink loop in the environment") from exc
        if under(real, real_state) or STATE_DIRNAME in Path(os.path.relpath(real, real_prefix)).parts:
            raise TargetError(f"{lex} leads through a symlink into rocmbuild's own state ({real}); nothing was "
                              "changed", "replace that symlink by a directory", details={"path": lex, "real": real})
        if not self.allow_outside and not under(real, real_prefix, strictly=True):
            raise TargetError(
                f"{lex} leads through a symlink out of the prefix {self.prefix} (to {real}); nothing was changed",
                "replace that symlink by a directory, or pass --allow-outside-prefix to write there anyway",
                details={"path": lex, "real": real, "prefix": self.prefix})
        return Path(lex)

    def link_text(self, dest: Path, text: str, roots: tuple[Path, ...], what: str) -> str:
        """A link's text is relative and names a place under ``roots`` (by name)."""
        target = os.path.normpath(os.path.join(os.path.dirname(str(dest)), text or ""))
        if not text or text.startswith("/") or not any(under(target, os.path.normpath(str(r))) for r in roots):
            raise InputError(f"the artifact's {what} {dest} -> {text!r} points outside "
                             + " and ".join(str(r) for r in roots) + "; nothing was changed", BAD_ARTIFACT, details={"path": str(dest)})
        return text


def missing_dirs(path: Path, obs: Observer) -> tuple[str, ...]:
    """The missing parents of ``path``, outermost first (a revert removes them again)."""
    out = []
    d = path.parent
    while True:
        s = obs.state(d)
        if s.kind == "absent":
            if d == d.parent:
                break
            out.append(str(d))
            d = d.parent
            continue
        if s.kind == "link":
            break  # a symlinked directory (e.g. lib64 -> lib): exists
        if s.kind != "other":
            raise TargetError(f"{d} is not a directory, but {path} needs to be placed inside it",
                              "move that file out of the way and run again")
        break
    return tuple(reversed(out))


# --------------------------------------------------------------------------------------------
# paths in state files: relative to the prefix, plus the prefix's identity


@dataclass(frozen=True)
class PrefixIdentity:
    """What a prefix was when a state file was written (:meth:`PrefixIdentity.of`): its path as
    named, its realpath, and its directory's device and inode (None: not recorded)."""

    path: str
    realpath: str | None = None
    dev: int | None = None
    ino: int | None = None

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in (("path", self.path), ("realpath", self.realpath), ("dev", self.dev),
                                  ("ino", self.ino)) if v is not None}

    @classmethod
    def of(cls, prefix: str | Path) -> "PrefixIdentity":
        """What ``prefix`` is now (:meth:`PrefixIdentity.of`)."""
        try:
            st = os.stat(prefix)
            dev, ino = st.st_dev, st.st_ino
        except OSError:
            dev = ino = 0
        return cls(str(prefix), os.path.realpath(prefix), dev, ino)


def origin(recorded: PrefixIdentity | None, prefix: str | Path) -> str | None:
    """Where a state file recorded under ``recorded`` (:meth:`PrefixIdentity.of` then) stands to
    ``prefix`` now: "here", "moved" (the same directory inode elsewhere) or "copied"; None: unknown."""
    if recorded is None or not recorded.realpath:
        return None
    now = PrefixIdentity.of(prefix)
    if recorded.realpath == now.realpath:
        return "here"
    if (recorded.dev, recorded.ino) == (now.dev, now.ino):
        return "moved"
    return "copied"


def relative_to(path: str | None, prefix: str | Path) -> str | None:
    """``path`` relative to ``prefix`` (named or resolved; ``.`` for the prefix itself), or as it
    is when it lies outside (an artifact in the cache, a library outside the prefix)."""
    if not path:
        return path
    p = os.path.normpath(str(path))
    for root in (os.path.normpath(str(prefix)), os.path.realpath(prefix)):
        if under(p, root):
            return os.path.relpath(p, root)
    return str(path)


@overload
def rebased(path: str, prefix: str | Path) -> str: ...
@overload
def rebased(path: str | None, prefix: str | Path) -> str | None: ...
def rebased(path: str | None, prefix: str | Path) -> str | None:
    """A state file's path made absolute under ``prefix`` (an absolute one is kept as it is)."""
    if not path or str(path).startswith("/"):
        return path
    return os.path.normpath(os.path.join(str(prefix), str(path)))
