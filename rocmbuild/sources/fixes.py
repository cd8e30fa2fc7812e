"""``[source] contains``: check that the source (right after the fetch, before anything is
configured) and the artifact (after the build or extraction) have every fix the recipe names; a
source, or a prebuilt artifact, without one is refused (RecipeError, exit 2, naming each missing
fix and, for a commit, the first tags that do contain it).

Decisions:

* ``grep``: a fixed string (bytes of its UTF-8), searched in Python in the regular files under
  ``path``; no symlink is followed (neither on the way down to ``path`` nor inside it), and the
  search is bounded (:class:`Budget`: :data:`MAX_FILES` files, :data:`MAX_BYTES` bytes read,
  :data:`MAX_SECONDS` seconds, each file streamed in chunks of :data:`CHUNK` with the needle's
  length minus one byte carried over, so a match across two chunks is found): past a bound the
  check is refused with "narrow path", never answered by a guess.
  A path outside a sparse checkout does not exist, and is said so.
* Where: a source recipe's ``path`` is relative to the source directory (below ``subdir``); a
  prebuilt recipe's (``[build] system = "prebuilt"``: the archive's subtree is the install tree)
  to the artifact's tree, and only the artifact is searched (:func:`search_artifact`; a commit
  is refused by the recipe parser: an archive has no history). After a source build the
  artifact's libraries (``[install] libraries``, their real files: MIOpen embeds its kernel
  sources in ``libMIOpen.so``) are searched for each ``grep`` too; ``path`` does not apply there.
  The manifest records where each fix was found (``fixes_found``: ``source`` with the source
  file, ``artifact`` with the artifact file). A fix found in the source but not in the built
  libraries (a change in a ``.cpp`` leaves no string in the ``.so``) is recorded as ``source``
  only, never refused: the source check is the one a source recipe promises.
* ``commit``: contained when it is one of the recipe's cherry-picks, or an ancestor of the
  checked-out commit (``git merge-base --is-ancestor``). The work tree is a shallow clone (depth
  1), so the ancestry is asked of the remote's commits-only mirror (``src/<remote>-commits.git``:
  every branch and tag, no trees, no blobs; the same one short shas are expanded in), into which
  the checked-out commit is fetched when no branch or tag has it. When the commit is missing, the
  tags that contain it (``git tag --contains``) are named, sorted by the version in their name
  (``packaging``; the earliest first: the nearest release that has it), the first :data:`TAGS`.
  A mirror that cannot be fetched leaves the question open: FetchError (exit 3), nothing built.
* ``[source] contains`` is not part of the cache key (it changes no byte of the build, like
  ``[verify]``); a cache hit whose manifest does not list every declared fix is searched for it
  in its own bytes first, then (a source recipe) checked against a fetched source
  (``flows.build``); a prebuilt one without it is refused.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import time
from pathlib import Path
from typing import Iterable

from packaging.version import InvalidVersion, Version

from rocmbuild.sources import source
from rocmbuild.sources.git import Git
from rocmbuild.store.manifest import FoundFix
from rocmbuild.sources.source import Checkout
from rocmbuild.errors import FetchError, RecipeError
from rocmbuild.recipe.model import Fix, Recipe

MAX_FILES = 200_000
MAX_BYTES = 4 << 30
MAX_SECONDS = 600.0
CHUNK = 1 << 20
TAGS = 3
_VERSION_RE = re.compile(r"\d+(?:\.\d+)+")


@dataclasses.dataclass(frozen=True)
class Missing:
    fix: Fix
    why: str
    tags: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"name": self.fix.name, "why": self.why, "tags": list(self.tags)}


class Budget:
    """What one check may still read: files, bytes and seconds (the module's bounds unless given)."""

    def __init__(self, *, files: int | None = None, nbytes: int | None = None, seconds: float | None = None) -> None:
        self.limits = (MAX_FILES if files is None else files, MAX_BYTES if nbytes is None else nbytes,
                       MAX_SECONDS if seconds is None else seconds)
        self.files, self.bytes = self.limits[0], self.limits[1]
        self.deadline = time.monotonic() + self.limits[2]

    def spend(self, path: Path, *, files: int = 0, nbytes: int = 0) -> None:
        self.files -= files
        self.bytes -= nbytes
        if self.files < 0 or self.bytes < 0 or time.monotonic() > self.deadline:
            files, size, seconds = self.limits
            raise RecipeError(
                f"[source] contains: too much to search (the bound is {files} files, {_size(size)} read or "
                f"{seconds:g} s; reached {path})",
                "narrow the fix's path to the directory (or the file) that holds the change, e.g. "
                "path = \"lib\" for a library's bytes", details={"reached": str(path)})


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def check(recipe: Recipe, checkout: Checkout, *, home: Path, log: Path | None = None) -> Checkout:
    """``checkout`` with the fixes it carries (where found); RecipeError when one is missing.
    A prebuilt recipe's fixes are searched in its artifact instead (:func:`search_artifact`)."""
    declared = recipe.source.contains
    if not declared or recipe.build.prebuilt:
        return checkout
    budget = Budget()
    found: list[FoundFix] = []
    missing: list[Missing] = []
    for fix in declared:
        if fix.commit is not None:
            m = _commit_missing(fix, checkout, home, log)
            found += [FoundFix(fix.name, "source")] if m is None else []
            missing += [m] if m is not None else []
            continue
        file, why = grep_found(checkout.source_dir, fix.path, fix.grep or "", budget=budget)
        found += [FoundFix(fix.name, "source", file)] if file else []
        missing += [Missing(fix, why)] if why else []
    if missing:
        raise refusal(recipe, checkout, missing)
    return dataclasses.replace(checkout, fixes=tuple(found))


def refusal(recipe: Recipe, checkout: Checkout, missing: list[Missing]) -> RecipeError:
    at = checkout.commit[:12] if checkout.commit else checkout.url
    lines = "\n".join(f"  - {m.fix.name}: {m.why}" for m in missing)
    tags = [f"{m.fix.name}: {', '.join(m.tags)}" for m in missing if m.tags]
    hint = ("set [source] ref to a tag or branch that has it (tags that contain it: " + "; ".join(tags) + ")"
            if tags else "set [source] ref to a commit that has it")
    return RecipeError(
        f"recipe '{recipe.name}': the source at {at} lacks what [source] contains declares:\n{lines}",
        hint + ", cherry-pick it ([source] cherry_pick), or remove it from [source] contains",
        details={"missing": [m.to_json() for m in missing], "commit": checkout.commit},
    )


def search_artifact(recipe: Recipe, tree: Path, library_files: Iterable[str],
                    names: Iterable[str] | None = None) -> tuple[list[FoundFix], list[Missing]]:
    """The declared ``grep`` fixes (those in ``names``; None: all) searched in an artifact's
    ``tree``: under each fix's ``path`` for a prebuilt recipe, in ``library_files`` (relative to
    ``tree``) for a source recipe. (found in the artifact, not found there); a commit is skipped."""
    budget = Budget()
    found: list[FoundFix] = []
    missing: list[Missing] = []
    libs = tuple(library_files)
    for fix in recipe.source.contains:
        if fix.grep is None or (names is not None and fix.name not in names):
            continue
        if recipe.build.prebuilt:
            file, why = grep_found(tree, fix.path, fix.grep, budget=budget, what="the artifact")
        else:
            file, why = _grep_files(tree, libs, fix.grep, budget)
        found += [FoundFix(fix.name, "artifact", file)] if file else []
        missing += [Missing(fix, why or "not found")] if not file else []
    return found, missing


def merged(recipe: Recipe, in_source: Iterable[FoundFix], in_artifact: Iterable[FoundFix]) -> tuple[FoundFix, ...]:
    """One entry per declared fix found: the artifact's (naming the source file too) before the source's."""
    src = {f.name: f for f in in_source}
    art = {f.name: f for f in in_artifact}
    out = []
    for fix in recipe.source.contains:
        if fix.name in art:
            s = src.get(fix.name)
            out.append(dataclasses.replace(art[fix.name], source_file=s.file if s else None))
        elif fix.name in src:
            out.append(src[fix.name])
    return tuple(out)


def artifact_refusal(recipe: Recipe, missing: list[Missing]) -> RecipeError:
    """A prebuilt artifact without a declared fix (exit 2; nothing published, the target untouched)."""
    lines = "\n".join(f"  - {m.fix.name}: {m.why}" for m in missing)
    return RecipeError(
        f"recipe '{recipe.name}': the prebuilt artifact from {recipe.source.url} lacks what [source] contains "
        f"declares:\n{lines}",
        "use an archive that has the fix (e.g. a newer package version), correct the fix's grep or path (relative "
        "to the artifact's tree, after subdir), or remove it from [source] contains",
        details={"missing": [m.to_json() for m in missing], "archive": recipe.source.url},
    )


# --------------------------------------------------------------------------------------------
# grep


def grep_missing(source_dir: Path, rel: str, needle: str) -> str | None:
    """None when a regular file under ``source_dir/rel`` holds ``needle``; else why not."""
    return grep_found(source_dir, rel, needle)[1]


def grep_found(root: Path, rel: str, needle: str, *, budget: Budget | None = None,
               what: str = "the source") -> tuple[str | None, str | None]:
    """(the file under ``root/rel`` that holds ``needle``, relative to ``root``; None) or (None, why not)."""
    where = rel or ("the source directory" if what == "the source" else what)
    start = root
    for part in rel.split("/") if rel else ():
        start = start / part
        try:
            st = os.lstat(start)
        except FileNotFoundError:
            return None, (f"{where} does not exist in the source (outside subdir or sparse?)" if what == "the source"
                          else f"{where} does not exist in {what} (its tree, below subdir)")
        except NotADirectoryError:
            return None, f"{where} does not exist in {what} (a file is on its way)"
        if stat.S_ISLNK(st.st_mode):
            return None, f"{where} is a symbolic link (not followed)"
    data = needle.encode("utf-8")
    budget = budget or Budget()
    if os.path.isfile(start) and not os.path.islink(start):
        return (rel, None) if _file_has(start, data, budget) else (None, f"'{needle}' not found in {where}")
    for top, dirs, files in os.walk(start, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(top) / name
            if _file_has(path, data, budget):
                return path.relative_to(root).as_posix(), None
    return None, f"'{needle}' not found in any file under {where}"


def _grep_files(tree: Path, files: tuple[str, ...], needle: str, budget: Budget) -> tuple[str | None, str | None]:
    """The first of ``files`` (relative to ``tree``, no link followed on the way) holding ``needle``."""
    data = needle.encode("utf-8")
    for rel in files:
        parts = rel.split("/")
        if any(os.path.islink(tree.joinpath(*parts[:i])) for i in range(1, len(parts))):
            continue  # a directory on the way is a link: not followed (the file itself: O_NOFOLLOW)
        if _file_has(tree / rel, data, budget):
            return rel, None
    return None, f"'{needle}' not found in the artifact's libraries ({', '.join(files) or 'none'})"


def _file_has(path: Path, needle: bytes, budget: Budget) -> bool:
    """Whether the regular file ``path`` (opened without following a link) holds ``needle``."""
    budget.spend(path, files=1)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # a symlink (ELOOP), a socket, unreadable: not a file of the tree
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        keep = len(needle) - 1
        tail = b""
        while chunk := f.read(CHUNK):
            budget.spend(path, nbytes=len(chunk))
            buf = tail + chunk if tail else chunk
            if needle in buf:
                return True
            tail = buf[-keep:] if keep else b""
    return False


# --------------------------------------------------------------------------------------------
# commit


def _commit_missing(fix: Fix, checkout: Checkout, home: Path, log: Path | None) -> Missing | None:
    sha = fix.commit or ""
    if sha in checkout.cherry_picks:
        return None
    if checkout.commit is None:
        return Missing(fix, "an archive source has no history to find a commit in")
    g = source.commits_mirror(home, checkout.url, log)
    if g is None:
        raise FetchError(f"cannot check fix {fix.name!r}: fetching the commits of {checkout.url} failed",
                         "check the network and the remote, then try again (or remove the fix from [source] "
                         "contains)", details={"commit": sha, "url": checkout.url})
    head = checkout.commit
    if g.run("rev-list", "-n1", "--missing=allow-any", head, "--", check=False)[0] != 0:
        g.run("fetch", "--no-write-fetch-head", "--filter=tree:0", "origin", head, check=False)
    status, _, _ = g.run("merge-base", "--is-ancestor", sha, head, check=False)
    if status == 0:
        return None
    tags = tags_containing(g, sha)
    if g.run("rev-list", "-n1", "--missing=allow-any", sha, "--", check=False)[0] != 0:
        return Missing(fix, f"commit {sha} is on no branch or tag of {checkout.url}")
    return Missing(fix, f"commit {sha[:12]} is not an ancestor of the checked-out {head[:12]}", tags)


def tags_containing(g: Git, sha: str, limit: int = TAGS) -> tuple[str, ...]:
    """The first ``limit`` tags that contain ``sha``, by the version in their names (earliest first)."""
    status, out, _ = g.run("tag", "--contains", sha, check=False)
    if status != 0:
        return ()
    return tuple(sorted(out.split(), key=_tag_order)[:limit])


def _tag_order(tag: str) -> tuple[int, Version, str]:
    m = _VERSION_RE.search(tag)
    if m:
        try:
            return (0, Version(m.group(0)), tag)
        except InvalidVersion:
            pass
    return (1, Version("0"), tag)


def where_searched(r: Recipe) -> tuple[str, ...]:
    """Where ``build`` looks for each fix of ``[source] contains``, in words (``show``)."""
    out = []
    for f in r.source.contains:
        if f.commit:
            out.append(f"{f.name}: commit {f.commit[:12]}, an ancestor of the checked-out commit")
        elif r.build.prebuilt:
            out.append(f"{f.name}: '{f.grep}' in the artifact's files under {f.path or 'its whole tree'}")
        else:
            out.append(f"{f.name}: '{f.grep}' in the source under {f.path or 'its whole tree'}, then in the "
                       "built libraries")
    return tuple(out)
