"""Sources: fetch a recipe's git ref (or tarball) into the source cache as a :class:`Checkout`.

One cache repository per remote (``home/src/<remote_key>/``), the ref resolved with
``ls-remote``, the commit fetched shallow and partial by sha, a cone sparse checkout of
``subdir`` + ``sparse``, a hard reset and clean before every checkout, then cherry-picks,
patches and the version. Decisions and their reasons (why fetch by sha, why a commits-only mirror
for short shas, why one lock per remote) are in ``docs/sources.md``.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from rocmbuild import names, ui
from rocmbuild.sources import tarball
from rocmbuild.sources.git import (
    FULL_SHA_RE, SHORT_SHA_RE, Git, GitFailed, fetch_refused, is_full_sha, last_line, ls_remote, match_ref,
    missing_objects, normalize_url, remote_key, unknown_ref,
)
from rocmbuild.sources.patches import apply_patches
from rocmbuild.fs.disk import FileLock
from rocmbuild.fs.locks import LockWait
from rocmbuild.errors import FetchError, RecipeError
from rocmbuild.home import src_dir
from rocmbuild.recipe.model import Recipe

if TYPE_CHECKING:
    from rocmbuild.store.manifest import FoundFix

#: identity used for cherry-pick commits (the original author is kept)
COMMITTER = {
    "GIT_COMMITTER_NAME": "rocmbuild",
    "GIT_COMMITTER_EMAIL": "rocmbuild@localhost",
}


@dataclass(frozen=True)
class Checkout:
    root: Path
    source_dir: Path
    url: str
    ref: str | None
    commit: str | None
    version: str | None
    patches: tuple[str, ...]
    cherry_picks: tuple[str, ...]
    tarball_sha256: str | None = None
    fixes: tuple["FoundFix", ...] = ()  # the [source] contains it was checked to have, where (sources/fixes.py)


def resolve_ref(recipe: Recipe, *, timeout: float = 30) -> str:
    """Full sha of ``recipe.source.ref`` on the remote without cloning (``git ls-remote``).

    A 40-hex sha is returned as is. Raises :class:`FetchError` (exit 3) when the remote is
    unreachable or the ref is unknown there (a short sha that is not a branch/tag tip cannot be
    resolved without fetching).
    """
    src = recipe.source
    if not src.git:
        raise FetchError(f"recipe '{recipe.name}' has no git source", "tarball sources have no ref to resolve")
    ref = src.ref
    if ref is not None and is_full_sha(ref.lower()):
        return ref.lower()
    url = normalize_url(src.git)
    refs = ls_remote(url, cwd=Path.cwd(), timeout=timeout)
    sha = match_ref(ref, refs)
    if sha is None:
        raise unknown_ref(ref, url, refs)
    return sha


def checkout_path(recipe: Recipe, home: Path) -> Path:
    """Where :func:`fetch` puts this recipe's work tree (for ``plan``; nothing is created)."""
    src = recipe.source
    if src.git:
        return src_dir(home) / remote_key(normalize_url(src.git))
    if recipe.build.prebuilt:
        return tarball.download_path(src.sha256 or "", home)
    return tarball.tree_path(src.sha256 or "", home)


@contextlib.contextmanager
def source_lock(recipe: Recipe, *, home: Path, wait: bool | LockWait = True) -> Iterator[None]:
    """Hold the lock :func:`fetch` takes for this recipe's source (``wait``: the lock policy;
    the commands pass theirs, fail-at-once by default; a library caller waits).

    :func:`fetch` takes it itself; a caller may hold it around fetch + build to keep the shared
    work tree from being re-checked-out by another process meanwhile (flock is per open file, so
    calling :func:`fetch` inside would deadlock: use ``fetch(..., locked=True)`` there).
    """
    tree = checkout_path(recipe, home)
    with FileLock(tree.with_name(tree.name + ".lock"), wait=wait, what=f"the source cache {tree}"):
        yield


# --------------------------------------------------------------------------------------------
# fetch


def fetch(recipe: Recipe, *, home: Path, log: Path | None = None, locked: bool = False,
          wait: bool | LockWait = True) -> Checkout:
    """Fetch ``recipe.source`` into the cache under ``home/"src"``, apply cherry-picks and
    patches, read the version. ``locked=True`` means the caller already holds :func:`source_lock`."""
    lock = contextlib.nullcontext() if locked else source_lock(recipe, home=home, wait=wait)
    with lock:
        if recipe.source.git:
            return _fetch_git(recipe, home, log)
        if recipe.source.archive and recipe.build.prebuilt:
            return _fetch_prebuilt(recipe, home)
        if recipe.source.archive:
            return _fetch_tarball(recipe, home, log)
    raise RecipeError(f"{recipe.path}: [source] needs 'git' or 'archive'", "add git = URL or archive = URL")


# --------------------------------------------------------------------------------------------
# git


def _init_cache(root: Path, url: str, log: Path | None) -> Git:
    if root.exists() and not (root / ".git").is_dir():
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    g = Git(root, log)
    if not (root / ".git").is_dir():
        g.run("init", "-q")
    status, current, _ = g.run("config", "--get", "remote.origin.url", check=False)
    if status != 0:
        g.run("remote", "add", "origin", url)
    elif current.strip() != url:
        g.run("remote", "set-url", "origin", url)
    # keep the cache tidy and quiet; objects are never garbage we need
    g.run("config", "advice.detachedHead", "false")
    g.run("config", "gc.auto", "0")
    return g


@contextlib.contextmanager
def _new_cache_removed_on_failure(root: Path) -> Iterator[None]:
    """A cache repository this fetch creates is removed when the fetch fails: an empty ``.git``
    (no commit) is no cache, and would only hide the failure from the next run. One that existed
    before keeps its objects. The caller holds the source lock (beside ``root``, not inside)."""
    fresh = not (root / ".git").is_dir()
    try:
        yield
    except BaseException:
        if fresh:
            shutil.rmtree(root, ignore_errors=True)
        raise


def _has_commit(g: Git, rev: str) -> bool:
    """Whether ``rev`` names a commit already in the cache (its tree comes with it in blob:none
    fetches). ``rev-list --missing=allow-any`` never lazily fetches from the promisor remote, as
    ``cat-file``/``rev-parse`` would (and then download the commit's whole history)."""
    status, out, _ = g.run("rev-list", "-n1", "--missing=allow-any", rev, "--", check=False)
    return status == 0 and FULL_SHA_RE.match(out.strip()) is not None


def _fetch_commit(g: Git, url: str, sha: str, depth: int, ref: str | None) -> None:
    status, _, err = g.run(
        "fetch", "--no-tags", "--no-write-fetch-head", f"--depth={depth}", "--filter=blob:none", "origin", sha,
        check=False,
    )
    if status != 0:
        raise fetch_refused(url, sha, ref, err)


def commits_mirror(home: Path, url: str, log: Path | None) -> Git | None:
    """The remote's commits-only mirror (every branch and tag, no trees, no blobs), fetched now;
    None when the fetch fails. Short shas and the ancestry of a fix (sources/fixes.py) are read there."""
    scan = src_dir(home) / f"{remote_key(url)}-commits.git"
    scan.mkdir(parents=True, exist_ok=True)
    g = Git(scan, log)
    if not (scan / "HEAD").is_file():
        g.run("init", "-q", "--bare")
    g.run("config", "--unset-all", "remote.origin.url", check=False)
    g.run("config", "remote.origin.url", url)
    status, _, err = g.run(
        "fetch", "--prune", "--filter=tree:0", "origin", "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*",
        check=False,
    )
    return g if status == 0 else None


def _expand_short_sha(home: Path, url: str, short: str, log: Path | None) -> str | None:
    """Expand a short sha that is not a ref tip, via the commits-only mirror."""
    g = commits_mirror(home, url, log)
    if g is None:
        return None
    status, out, _ = g.run("rev-parse", "--verify", "--quiet", f"{short}^{{commit}}", check=False)
    return out.strip() if status == 0 and FULL_SHA_RE.match(out.strip()) else None


def _resolve_for_fetch(home: Path, g: Git, url: str, ref: str | None, log: Path | None) -> str:
    """Full sha for ``ref``: ls-remote first; short shas that are not tips via the cache / mirror."""
    if ref and is_full_sha(ref.lower()):
        return ref.lower()
    refs = ls_remote(url, cwd=g.cwd, timeout=120, log=log)
    sha = match_ref(ref, refs)
    if sha is not None:
        return sha
    if ref and SHORT_SHA_RE.match(ref.lower()):
        status, out, _ = g.run("rev-parse", "--verify", "--quiet", f"{ref.lower()}^{{commit}}", check=False)
        if status == 0 and FULL_SHA_RE.match(out.strip()):
            return out.strip()
        full = _expand_short_sha(home, url, ref.lower(), log)
        if full:
            return full
    raise unknown_ref(ref, url, refs)


def _clean_tree(g: Git) -> None:
    status, _, _ = g.run("rev-parse", "--verify", "--quiet", "HEAD", check=False)
    if status == 0:
        if (g.cwd / ".git" / "CHERRY_PICK_HEAD").exists():  # a run killed mid-pick
            g.run("cherry-pick", "--abort", check=False)
        g.run("reset", "-q", "--hard")
    g.run("clean", "-q", "-ffdx")


def _check_out(g: Git, root: Path, url: str, commit: str, src) -> None:
    """A clean, sparse (``subdir`` + ``sparse``) checkout of ``commit``."""
    _clean_tree(g)
    cone = [p for p in ([src.subdir] if src.subdir else []) + list(src.sparse)]
    if cone:
        g.run("sparse-checkout", "set", "--cone", "--", *cone)
    elif (root / ".git" / "info" / "sparse-checkout").exists():
        g.run("sparse-checkout", "disable")
    try:
        g.run("checkout", "-q", "--force", "--detach", commit)
    except GitFailed as exc:
        if missing_objects(exc.output):  # the lazy fetch of the commit's files failed: the remote lacks them
            raise fetch_refused(url, commit, src.ref, exc.output) from exc
        raise FetchError(f"cannot check out {commit} from {url}: {last_line(exc.output)}",
                         f"the cache repo may be damaged: delete {root} and try again") from exc


def _fetch_git(recipe: Recipe, home: Path, log: Path | None) -> Checkout:
    src = recipe.source
    assert src.git
    url = normalize_url(src.git)
    root = src_dir(home) / remote_key(url)
    ui.info(f"fetching {url} ({src.ref or 'HEAD'}) into {root}")
    with _new_cache_removed_on_failure(root):
        g = _init_cache(root, url, log)
        commit = _resolve_for_fetch(home, g, url, src.ref, log)
        if _has_commit(g, commit):
            ui.info(f"commit {commit[:12]} already in the source cache")
        else:
            _fetch_commit(g, url, commit, depth=1, ref=src.ref)
        _check_out(g, root, url, commit, src)
    _clean_tree(g)

    picks = tuple(_cherry_pick(home, g, url, c, log) for c in src.cherry_pick)
    source_dir = root / src.subdir if src.subdir else root
    if not source_dir.is_dir():
        raise FetchError(
            f"subdir '{src.subdir}' does not exist in {url} at {commit[:12]}",
            f"check source.subdir in {recipe.path} against the repository layout at that ref",
            details={"url": url, "commit": commit, "subdir": src.subdir},
        )
    patches = apply_patches(root, src.subdir, recipe.patch_files, log=log, in_repo=True)
    version = read_version(recipe, source_dir)
    ui.info(f"checked out {commit[:12]}" + (f" (version {version})" if version else ""))
    return Checkout(root, source_dir, url, src.ref, commit, version, patches, picks)


def _cherry_pick(home: Path, g: Git, url: str, ref: str, log: Path | None) -> str:
    sha = _resolve_for_fetch(home, g, url, ref, log)
    if not (_has_commit(g, sha) and _has_commit(g, f"{sha}^1")):
        _fetch_commit(g, url, sha, depth=2, ref=ref)
    ui.info(f"cherry-picking {sha[:12]}")
    # --keep-redundant-commits: a fix that upstream already contains is a no-op, not a failure
    status, out, err = g.run("cherry-pick", "--keep-redundant-commits", sha, check=False, env=COMMITTER)
    if status != 0:
        _, conflicted, _ = g.run("diff", "--no-ext-diff", "--name-only", "--diff-filter=U", check=False)
        if (g.cwd / ".git" / "CHERRY_PICK_HEAD").exists():
            g.run("cherry-pick", "--abort", check=False)
        _clean_tree(g)
        files = f" (conflicts in: {', '.join(conflicted.split())})" if conflicted.split() else ""
        raise FetchError(
            f"cherry-pick of {sha} does not apply cleanly on {url}{files}: {last_line(err or out)}",
            "the commit conflicts with the checked-out ref: remove it from source.cherry_pick, pick a "
            "different ref, or replace it with a patch that fits",
            details={"commit": sha, "conflicts": conflicted.split(), "git": (err or out).strip()},
        )
    return sha


def read_version(recipe: Recipe, source_dir: Path) -> str | None:
    """Group 1 of ``source.version.regex`` in ``source_dir/source.version.file``; None if unset."""
    spec = recipe.source.version
    if spec is None:
        return None
    f = Path(source_dir) / spec.file
    details = {"file": str(recipe.path), "key": "source.version", "version_file": str(f), "regex": spec.regex}
    try:
        text = f.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise RecipeError(
            f"{recipe.path}: source.version: cannot read version file '{spec.file}' ({f}): {exc.strerror or exc}",
            "fix source.version.file: it is relative to the source directory (the subdir)",
            details=details,
        ) from exc
    m = re.search(spec.regex, text, re.MULTILINE)
    if not m or m.group(1) is None:
        raise RecipeError(
            f"{recipe.path}: source.version: regex {spec.regex!r} does not match in {f}",
            "fix source.version.regex so that group 1 captures the version (e.g. 'VERSION ([0-9.]+)')",
            details=details,
        )
    version = m.group(1).strip()
    why = names.bad_name_reason("version", version)
    if why is not None:  # it names files and directories later, and is shown: never stored as it is
        raise RecipeError(
            f"{recipe.path}: source.version: regex {names.safe_text(spec.regex)} matched in {f}, but what it "
            f"captured is not a version: {why}",
            "make source.version.regex capture only the version (e.g. 'VERSION ([0-9.]+)')",
            details={**details, "captured": version},
        )
    return version


def _fetch_tarball(recipe: Recipe, home: Path, log: Path | None) -> Checkout:
    src = recipe.source
    assert src.tarball and src.sha256
    sha = src.sha256.lower()
    root = tarball.unpack(src.tarball, sha, home)
    source_dir = root / src.subdir if src.subdir else root
    if not source_dir.is_dir():
        raise FetchError(f"subdir '{src.subdir}' does not exist in {src.tarball}",
                         f"check source.subdir in {recipe.path}", details={"subdir": src.subdir})
    patches = apply_patches(root, src.subdir, recipe.patch_files, log=log, in_repo=False)
    version = read_version(recipe, source_dir)
    ui.info(f"extracted {src.tarball} (sha256 {sha[:12]})" + (f", version {version}" if version else ""))
    return Checkout(root, source_dir, src.tarball, None, None, version, patches, (), sha)


def _fetch_prebuilt(recipe: Recipe, home: Path) -> Checkout:
    """The checked download only: a prebuilt tree is extracted by the builder straight into the
    artifact, never into ``src/`` (``root`` and ``source_dir`` are the archive file)."""
    src = recipe.source
    assert src.archive and src.sha256
    archive = tarball.fetch(src.archive, src.sha256, home)
    ui.info(f"archive {src.archive} (sha256 {src.sha256[:12]}) at {archive}")
    return Checkout(archive, archive, src.archive, None, None, None, (), (), src.sha256.lower())
