"""``[source] contains``: check, right after the fetch and before anything is configured, that the
checked-out source has every fix the recipe names; a source without one is refused (RecipeError,
exit 2, naming each missing fix and, for a commit, the first tags that do contain it).

Decisions:

* ``grep``: a fixed string (bytes of its UTF-8), searched in Python in the regular files under
  ``path`` of the source directory (below ``subdir``); no symlink is followed (neither on the way
  down to ``path`` nor inside it), and the search is bounded (:data:`MAX_FILES` files,
  :data:`MAX_BYTES` bytes read, each file in chunks: a larger tree is refused with "narrow path").
  A path outside a sparse checkout does not exist, and is said so.
* ``commit``: contained when it is one of the recipe's cherry-picks, or an ancestor of the
  checked-out commit (``git merge-base --is-ancestor``). The work tree is a shallow clone (depth
  1), so the ancestry is asked of the remote's commits-only mirror (``src/<remote>-commits.git``:
  every branch and tag, no trees, no blobs; the same one short shas are expanded in), into which
  the checked-out commit is fetched when no branch or tag has it. When the commit is missing, the
  tags that contain it (``git tag --contains``) are named, sorted by the version in their name
  (``packaging``; the earliest first: the nearest release that has it), the first :data:`TAGS`.
  A mirror that cannot be fetched leaves the question open: FetchError (exit 3), nothing built.
* ``[source] contains`` is not part of the cache key (it changes no byte of the build, like
  ``[verify]``); a cache hit whose manifest does not list every declared fix is checked against
  a fetched source first (``flows.build``). The names checked go into the manifest (``fixes``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path

from packaging.version import InvalidVersion, Version

from rocmbuild.build import source
from rocmbuild.build.git import Git
from rocmbuild.build.source import Checkout
from rocmbuild.errors import FetchError, RecipeError
from rocmbuild.recipe.model import Fix, Recipe

MAX_FILES = 200_000
MAX_BYTES = 4 << 30
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


def check(recipe: Recipe, checkout: Checkout, *, home: Path, log: Path | None = None) -> Checkout:
    """``checkout`` with the names of the fixes it carries; RecipeError when one is missing."""
    declared = recipe.source.contains
    if not declared:
        return checkout
    missing = [m for m in (_missing(fix, checkout, home, log) for fix in declared) if m is not None]
    if missing:
        raise refusal(recipe, checkout, missing)
    return dataclasses.replace(checkout, fixes=tuple(f.name for f in declared))


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


def _missing(fix: Fix, checkout: Checkout, home: Path, log: Path | None) -> Missing | None:
    if fix.commit is not None:
        return _commit_missing(fix, checkout, home, log)
    why = grep_missing(checkout.source_dir, fix.path, fix.grep or "")
    return Missing(fix, why) if why else None


# --------------------------------------------------------------------------------------------
# grep


def grep_missing(source_dir: Path, rel: str, needle: str) -> str | None:
    """None when a regular file under ``source_dir/rel`` holds ``needle``; else why not."""
    where = rel or "the source directory"
    start = source_dir
    for part in rel.split("/") if rel else ():
        start = start / part
        try:
            st = os.lstat(start)
        except FileNotFoundError:
            return f"{where} does not exist in the source (outside subdir or sparse?)"
        if stat.S_ISLNK(st.st_mode):
            return f"{where} is a symbolic link (not followed)"
    data = needle.encode("utf-8")
    budget = [MAX_FILES, MAX_BYTES]
    if os.path.isfile(start):
        return None if _file_has(start, data, budget) else f"'{needle}' not found in {where}"
    for top, dirs, files in os.walk(start, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            if _file_has(Path(top) / name, data, budget):
                return None
    return f"'{needle}' not found in any file under {where}"


def _file_has(path: Path, needle: bytes, budget: list[int]) -> bool:
    """Whether the regular file ``path`` (opened without following a link) holds ``needle``."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _too_large(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # a symlink (ELOOP), a socket, unreadable: not a file of the source
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        tail = b""
        while chunk := f.read(CHUNK):
            budget[1] -= len(chunk)
            if budget[1] < 0:
                raise _too_large(path)
            if needle in tail + chunk:
                return True
            tail = chunk[-(len(needle) - 1):] if len(needle) > 1 else b""
    return False


def _too_large(path: Path) -> RecipeError:
    return RecipeError(f"[source] contains: too much to search (more than {MAX_FILES} files or {MAX_BYTES >> 30} GiB; "
                       f"reached {path})", "narrow the fix's path to the directory that holds the change")


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
