"""Sources: fetch a recipe's git ref (or tarball) into the cache, cherry-pick, patch, read the version.

Git goes through GitPython's command wrapper (``git.Git(...).execute([...])``: argv lists, never a
shell string, never ``subprocess`` directly); every git command and its output is appended to the
build log when one is given.

Git sources
-----------
* One cache repository per remote, at ``home/src/<sha256(url)[:16]>/``, made with ``git init``;
  the URL is kept as remote ``origin`` (updated if it ever differs). Local paths become ``file://``
  URLs first (git ignores ``--depth``/``--filter`` for plain paths), so a path and the ``file://``
  URL of the same directory share one cache. A relative path is relative to the current directory.
* The ref is resolved with ``git ls-remote`` (tags win over branches, as in git's own DWIM; a
  40-hex sha is taken as is; a shorter hex string matches ref tips first). A short sha that is not
  a tip is looked up in a commits-only mirror (``home/src/<key>-commits.git``, fetched with
  ``--filter=tree:0``: commits, no trees, no blobs) and expanded to the full sha.
* The resolved commit is fetched by sha: ``git fetch --depth 1 --filter=blob:none origin <sha>``
  (shallow + partial). If the commit is already in the cache nothing is fetched at all. When
  ``subdir`` (or ``sparse``) is set the work tree is a cone sparse checkout of ``subdir`` + the
  ``sparse`` entries (plus top-level files, as cone mode always includes them); blobs outside the
  cone are never downloaded. Without them sparse checkout is disabled.
* Before every checkout: ``git reset --hard`` + ``git clean -ffdx``, so a previous run's
  patches and stray files never leak into the next one. Anything a caller writes into the tree
  (e.g. an in-tree build directory) is therefore removed by the next fetch.
* Cherry-picks (``source.cherry_pick``, in order): each commit is fetched with ``--depth 2`` (the
  commit and its parent, which is all a cherry-pick needs) and committed with a fixed rocmbuild
  committer identity, so HEAD reflects the picks and the patches are checked against it. A pick
  that upstream already contains becomes an empty commit (``--keep-redundant-commits``), not a
  failure. A conflict aborts the pick and raises :class:`FetchError` naming the commit and files.
* git never prompts: ``GIT_TERMINAL_PROMPT=0`` and, unless the user set their own,
  ``GIT_SSH_COMMAND="ssh -o BatchMode=yes"``; credential helpers still work. Needs git >= 2.29.
* Concurrency: the whole fetch holds ``fcntl.flock`` on ``home/src/<key>.lock`` (blocking), so two
  rocmbuild processes never interleave git commands in one cache repo. The work tree is shared
  per remote: a caller that must keep the tree stable while it builds (another process may fetch
  a different ref of the same remote afterwards) can hold :func:`source_lock` around its build.

Patches
-------
Paths in patch files are relative to ``source_dir`` (the ``subdir``; the tree root without one),
because upstream MIOpen patches are written against the MIOpen tree. They are applied at the tree
root with ``git apply --directory=<subdir>``. Order: checkout -> cherry-picks -> check *all*
patches -> apply. The patches (in order) are concatenated and checked with ``git apply --check``;
when that fails, growing prefixes are checked to name the first patch that does not apply, and
nothing is applied (the tree is unchanged). Then the concatenation is applied in one ``git apply``
(atomic). For tarballs ``git apply`` runs outside any repository (``GIT_CEILING_DIRECTORIES``
stops git from discovering an enclosing one, such as a dotfiles repo around ``~/.cache``).

Tarballs
--------
Downloading and safe extraction live in :mod:`rocmbuild.archive` (shared with artifact bundles).
``source.tarball`` may be an https/http URL (``requests``, streamed), a ``file://`` URL or a
plain path (copied, streamed). Either way the bytes go to ``home/downloads/<sha256>.part`` while
being hashed, then are renamed to ``home/downloads/<sha256>``; a mismatch deletes the download
(never the user's own local file) and raises :class:`FetchError`. A cached download is re-hashed
before reuse and deleted if it changed. Extraction refuses the whole archive, before writing
anything, if any member has an absolute name, a ``..`` component, is a device/FIFO, or is a
symlink/hardlink pointing outside the tree; on top of that ``filter="data"`` is used where Python
has it. The tree is extracted fresh on every fetch (into a temp dir, then renamed) to
``home/src/tarball-<sha256[:16]>/``; a single top-level directory becomes the root.

Version
-------
``source.version`` = { file, regex }: ``file`` relative to ``source_dir``; group 1 of the first
match (``re.MULTILINE``, so ``^`` anchors at line starts). A missing file or no match is a :class:`RecipeError` (exit 2) naming the recipe, the key
``source.version``, the file and the regex.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from rocmbuild import ui
from rocmbuild.build.archive import download, safe_extract, unsafe_member  # noqa: F401 (re-exported)
from rocmbuild.disk import FileLock, sha256_file
from rocmbuild.home import downloads_dir, src_dir
from rocmbuild.errors import FetchError, RecipeError, RequirementError
from rocmbuild.recipe.model import Recipe

FULL_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
SHORT_SHA_RE = re.compile(r"^[0-9a-f]{4,39}$")
#: identity used for cherry-pick commits (the original author is kept)
COMMITTER = {
    "GIT_COMMITTER_NAME": "rocmbuild",
    "GIT_COMMITTER_EMAIL": "rocmbuild@localhost",
}
#: never wait for a terminal in an unattended run (credential helpers still work)
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


def _git_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(_GIT_ENV)
    if "GIT_SSH_COMMAND" not in os.environ and "GIT_SSH" not in os.environ:
        env["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes"  # fail instead of asking for a passphrase
    env.update(extra or {})
    return env


def _gitpython():
    """GitPython, imported on first use: importing it fails when no ``git`` is installed, and a
    machine that only applies exported artifacts needs no git (nor a compiler)."""
    try:
        import git
    except ImportError as exc:
        raise RequirementError(f"git is needed to fetch sources, and it is not usable: {exc}".splitlines()[0],
                               "install git (e.g. apt-get install git), or apply an exported artifact "
                               "with --artifact, which needs no git") from exc
    return git


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


# --------------------------------------------------------------------------------------------
# pure helpers


def normalize_url(url: str, *, cwd: Path | None = None) -> str:
    """A URL git can fetch shallow/partial from: local paths (and ``~``) become ``file://`` URLs."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", url):
        return url
    if re.match(r"^[^/]+@[^/:]+:", url):  # scp-like ssh: git@github.com:ROCm/rocm-libraries.git
        return url
    p = Path(url).expanduser()
    if not p.is_absolute():
        p = (cwd or Path.cwd()) / p
    return Path(os.path.normpath(p)).as_uri()


def cache_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def is_full_sha(ref: str | None) -> bool:
    return bool(ref) and FULL_SHA_RE.match(ref) is not None


def parse_ls_remote(text: str) -> dict[str, str]:
    """``git ls-remote`` output -> {refname: commit sha}; annotated tags are peeled."""
    refs: dict[str, str] = {}
    peeled: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split("\t")
        if len(parts) != 2 or not FULL_SHA_RE.match(parts[0]):
            continue
        sha, name = parts
        if name.endswith("^{}"):
            peeled[name[:-3]] = sha
        else:
            refs[name] = sha
    refs.update(peeled)
    return refs


def match_ref(ref: str | None, refs: Mapping[str, str]) -> str | None:
    """The commit ``ref`` names among the remote's refs (git's DWIM order), or None."""
    if ref is None or ref == "HEAD":
        return refs.get("HEAD")
    for name in (ref, f"refs/tags/{ref}", f"refs/heads/{ref}"):
        if name in refs and name.startswith(("refs/", "HEAD")):
            return refs[name]
    if is_full_sha(ref):
        return ref
    if SHORT_SHA_RE.match(ref):
        hits = {sha for sha in refs.values() if sha.startswith(ref)}
        if len(hits) == 1:
            return hits.pop()
    return None


def describe_refs(refs: Mapping[str, str], limit: int = 8) -> str:
    """A short list of branches and tags for hints."""
    branches = sorted(n[len("refs/heads/"):] for n in refs if n.startswith("refs/heads/"))
    tags = sorted(n[len("refs/tags/"):] for n in refs if n.startswith("refs/tags/"))
    parts = []
    if branches:
        more = f" (+{len(branches) - limit} more)" if len(branches) > limit else ""
        parts.append("branches: " + ", ".join(branches[:limit]) + more)
    if tags:
        more = f" (+{len(tags) - limit} more)" if len(tags) > limit else ""
        parts.append("tags: " + ", ".join(tags[-limit:]) + more)
    return "; ".join(parts) or "the remote has no branches or tags"


# --------------------------------------------------------------------------------------------
# git plumbing


class _Git:
    """Runs git (through GitPython) in one directory, logging every command and its output."""

    def __init__(self, cwd: Path, log: Path | None = None) -> None:
        self.cwd = cwd
        self.log = log
        self.g = _gitpython().Git(str(cwd))

    def run(
        self, *args: str, check: bool = True, env: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        argv = ["git", *args]
        status, out, err = self.g.execute(
            argv,
            with_extended_output=True,
            with_exceptions=False,
            env=_git_env(env),
            kill_after_timeout=timeout,
            strip_newline_in_stdout=True,
        )
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log, "a", encoding="utf-8", errors="replace") as f:
                f.write(f"$ (cd {self.cwd}) {' '.join(argv)}\n")
                for text in (out, err):
                    if text:
                        f.write(text.rstrip("\n") + "\n")
        if check and status != 0:
            raise _GitFailed(argv, status, err or out)
        return status, out, err


class _GitFailed(Exception):
    def __init__(self, argv: list[str], status: int, output: str) -> None:
        super().__init__(f"{' '.join(argv)} failed ({status}): {output}")
        self.argv = argv
        self.status = status
        self.output = output


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text.strip()


def _ls_remote(url: str, *, cwd: Path, timeout: float | None, log: Path | None = None) -> dict[str, str]:
    status, out, err = _Git(cwd, log).run("ls-remote", "--", url, check=False, timeout=timeout)
    if status != 0:
        raise FetchError(
            f"cannot reach git remote {url}: {_last_line(err) or f'git ls-remote exit code {status}'}",
            "check the URL (recipe source.git or --source), your network/proxy and credentials; "
            "a local directory must be a git repository",
            details={"url": url, "git": err.strip()},
        )
    return parse_ls_remote(out)


def _unknown_ref(ref: str | None, url: str, refs: Mapping[str, str]) -> FetchError:
    return FetchError(
        f"ref '{ref}' not found on {url}",
        f"use a branch, tag or commit sha that exists there ({describe_refs(refs)}); "
        "set source.ref in the recipe or pass --ref",
        details={"url": url, "ref": ref},
    )


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
    if is_full_sha(ref.lower() if ref else None):
        return ref.lower()  # type: ignore[union-attr]
    url = normalize_url(src.git)
    refs = _ls_remote(url, cwd=Path.cwd(), timeout=timeout)
    sha = match_ref(ref, refs)
    if sha is None:
        raise _unknown_ref(ref, url, refs)
    return sha


def _lock_path(recipe: Recipe, home: Path) -> Path:
    src = recipe.source
    if src.git:
        return src_dir(home) / f"{cache_key(normalize_url(src.git))}.lock"
    return src_dir(home) / f"tarball-{(src.sha256 or '')[:16]}.lock"


def checkout_path(recipe: Recipe, home: Path) -> Path:
    """Where :func:`fetch` puts this recipe's work tree (for ``plan``; nothing is created)."""
    src = recipe.source
    if src.git:
        return src_dir(home) / cache_key(normalize_url(src.git))
    return src_dir(home) / f"tarball-{(src.sha256 or '')[:16]}"


@contextlib.contextmanager
def source_lock(recipe: Recipe, *, home: Path) -> Iterator[None]:
    """Hold the lock :func:`fetch` takes for this recipe's source (blocking).

    :func:`fetch` takes it itself; a caller may hold it around fetch + build to keep the shared
    work tree from being re-checked-out by another process meanwhile (flock is per open file, so
    calling :func:`fetch` inside would deadlock: use ``fetch(..., locked=True)`` there).
    """
    with FileLock(_lock_path(recipe, home)):
        yield


# --------------------------------------------------------------------------------------------
# fetch


def fetch(recipe: Recipe, *, home: Path, log: Path | None = None, locked: bool = False) -> Checkout:
    """Fetch ``recipe.source`` into the cache under ``home/"src"``, apply cherry-picks and
    patches, read the version. ``locked=True`` means the caller already holds :func:`source_lock`."""
    lock = contextlib.nullcontext() if locked else source_lock(recipe, home=home)
    with lock:
        if recipe.source.git:
            return _fetch_git(recipe, home, log)
        if recipe.source.tarball:
            return _fetch_tarball(recipe, home, log)
    raise RecipeError(f"{recipe.path}: [source] needs 'git' or 'tarball'", "add git = URL or tarball = URL")


def _init_cache(root: Path, url: str, log: Path | None) -> _Git:
    if root.exists() and not (root / ".git").is_dir():
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    g = _Git(root, log)
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


def _has_commit(g: _Git, rev: str) -> bool:
    """Whether ``rev`` names a commit already in the cache (its tree comes with it in blob:none
    fetches). ``rev-list --missing=allow-any`` never lazily fetches from the promisor remote, as
    ``cat-file``/``rev-parse`` would (and then download the commit's whole history)."""
    status, out, _ = g.run("rev-list", "-n1", "--missing=allow-any", rev, "--", check=False)
    return status == 0 and FULL_SHA_RE.match(out.strip()) is not None


def _fetch_commit(g: _Git, url: str, sha: str, depth: int) -> None:
    status, _, err = g.run(
        "fetch", "--no-tags", "--no-write-fetch-head", f"--depth={depth}", "--filter=blob:none", "origin", sha,
        check=False,
    )
    if status != 0:
        raise FetchError(
            f"cannot fetch commit {sha} from {url}: {_last_line(err)}",
            "check the sha exists on the remote; servers that do not allow fetching by sha "
            "(uploadpack.allowAnySHA1InWant) need a branch or tag name instead",
            details={"url": url, "commit": sha, "git": err.strip()},
        )


def _expand_short_sha(home: Path, url: str, short: str, log: Path | None) -> str | None:
    """Expand a short sha that is not a ref tip, via a commits-only mirror (no trees, no blobs)."""
    scan = src_dir(home) / f"{cache_key(url)}-commits.git"
    scan.mkdir(parents=True, exist_ok=True)
    g = _Git(scan, log)
    if not (scan / "HEAD").is_file():
        g.run("init", "-q", "--bare")
    g.run("config", "--unset-all", "remote.origin.url", check=False)
    g.run("config", "remote.origin.url", url)
    status, _, err = g.run(
        "fetch", "--prune", "--filter=tree:0", "origin", "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*",
        check=False,
    )
    if status != 0:
        return None
    status, out, _ = g.run("rev-parse", "--verify", "--quiet", f"{short}^{{commit}}", check=False)
    return out.strip() if status == 0 and FULL_SHA_RE.match(out.strip()) else None


def _resolve_for_fetch(home: Path, g: _Git, url: str, ref: str | None, log: Path | None) -> str:
    """Full sha for ``ref``: ls-remote first; short shas that are not tips via the cache / mirror."""
    if ref and is_full_sha(ref.lower()):
        return ref.lower()
    refs = _ls_remote(url, cwd=g.cwd, timeout=120, log=log)
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
    raise _unknown_ref(ref, url, refs)


def _clean_tree(g: _Git) -> None:
    status, _, _ = g.run("rev-parse", "--verify", "--quiet", "HEAD", check=False)
    if status == 0:
        if (g.cwd / ".git" / "CHERRY_PICK_HEAD").exists():  # a run killed mid-pick
            g.run("cherry-pick", "--abort", check=False)
        g.run("reset", "-q", "--hard")
    g.run("clean", "-q", "-ffdx")


def _fetch_git(recipe: Recipe, home: Path, log: Path | None) -> Checkout:
    src = recipe.source
    assert src.git
    url = normalize_url(src.git)
    root = src_dir(home) / cache_key(url)
    ui.info(f"fetching {url} ({src.ref or 'HEAD'}) into {root}")
    g = _init_cache(root, url, log)
    commit = _resolve_for_fetch(home, g, url, src.ref, log)
    if _has_commit(g, commit):
        ui.info(f"commit {commit[:12]} already in the source cache")
    else:
        _fetch_commit(g, url, commit, depth=1)

    _clean_tree(g)
    cone = [p for p in ([src.subdir] if src.subdir else []) + list(src.sparse)]
    if cone:
        g.run("sparse-checkout", "set", "--cone", "--", *cone)
    elif (root / ".git" / "info" / "sparse-checkout").exists():
        g.run("sparse-checkout", "disable")
    try:
        g.run("checkout", "-q", "--force", "--detach", commit)
    except _GitFailed as exc:
        raise FetchError(f"cannot check out {commit} from {url}: {_last_line(exc.output)}",
                         f"the cache repo may be damaged: delete {root} and try again") from exc
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


def _cherry_pick(home: Path, g: _Git, url: str, ref: str, log: Path | None) -> str:
    sha = _resolve_for_fetch(home, g, url, ref, log)
    if not (_has_commit(g, sha) and _has_commit(g, f"{sha}^1")):
        _fetch_commit(g, url, sha, depth=2)
    ui.info(f"cherry-picking {sha[:12]}")
    # --keep-redundant-commits: a fix that upstream already contains is a no-op, not a failure
    status, out, err = g.run("cherry-pick", "--keep-redundant-commits", sha, check=False, env=COMMITTER)
    if status != 0:
        _, conflicted, _ = g.run("diff", "--name-only", "--diff-filter=U", check=False)
        if (g.cwd / ".git" / "CHERRY_PICK_HEAD").exists():
            g.run("cherry-pick", "--abort", check=False)
        _clean_tree(g)
        files = f" (conflicts in: {', '.join(conflicted.split())})" if conflicted.split() else ""
        raise FetchError(
            f"cherry-pick of {sha} does not apply cleanly on {url}{files}: {_last_line(err or out)}",
            "the commit conflicts with the checked-out ref: remove it from source.cherry_pick, pick a "
            "different ref, or replace it with a patch that fits",
            details={"commit": sha, "conflicts": conflicted.split(), "git": (err or out).strip()},
        )
    return sha


# --------------------------------------------------------------------------------------------
# patches


def apply_patches(
    root: Path, subdir: str | None, patch_files: Sequence[Path], *, log: Path | None = None, in_repo: bool = True
) -> tuple[str, ...]:
    """Check all patches, then apply them at ``root`` with paths relative to ``root/subdir``.

    Returns the sha256 of each patch file, in order. Raises :class:`FetchError` naming the first
    patch that does not apply (and the file git complained about); the tree is then unchanged.
    """
    if not patch_files:
        return ()
    g = _Git(root, log)
    # outside a repository (tarballs) git apply must not discover an enclosing one
    env = None if in_repo else {"GIT_CEILING_DIRECTORIES": str(root.parent)}
    opts = [f"--directory={subdir}"] if subdir else []
    contents = []
    for p in patch_files:
        try:
            data = Path(p).read_bytes()
        except OSError as exc:
            raise FetchError(f"cannot read patch {p}: {exc}", "check the file exists and is readable") from exc
        contents.append(data if data.endswith(b"\n") else data + b"\n")
    with tempfile.TemporaryDirectory(prefix="rocmbuild-patches-") as tmp:
        def combined(n: int) -> Path:
            f = Path(tmp) / f"first-{n}.patch"
            f.write_bytes(b"".join(contents[:n]))
            return f

        everything = combined(len(contents))
        status, _, err = g.run("apply", "--check", *opts, str(everything), check=False, env=env)
        if status != 0:
            for i, p in enumerate(patch_files):
                status, _, err = g.run("apply", "--check", *opts, str(combined(i + 1)), check=False, env=env)
                if status != 0:
                    failing = _failing_file(err)
                    raise FetchError(
                        f"patch {p} does not apply"
                        + (f" to {failing}" if failing else "")
                        + f" (in {root / subdir if subdir else root}): {_last_line(err)}",
                        "update the patch for this ref (paths in patches are relative to the recipe's "
                        "subdir), or drop it from source.patches; nothing was applied",
                        details={"patch": str(p), "file": failing, "git": err.strip()},
                    )
            raise FetchError(f"patches do not apply: {_last_line(err)}", "check the patches in source.patches")
        g.run("apply", *opts, str(everything), env=env)
    for p in patch_files:
        ui.info(f"applied patch {Path(p).name}")
    return tuple(hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in patch_files)


def _failing_file(err: str) -> str | None:
    for pattern in (r"error: ([^\s:]+): patch does not apply", r"error: patch failed: ([^\s:]+):\d+",
                    r"error: ([^\s:]+): No such file or directory", r"error: ([^\s:]+): does not exist in index",
                    r"error: ([^\s:]+): already exists in working directory"):
        m = re.search(pattern, err)
        if m:
            return m.group(1)
    return None


# --------------------------------------------------------------------------------------------
# version


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
    return m.group(1).strip()


# --------------------------------------------------------------------------------------------
# tarballs


def _fetch_tarball(recipe: Recipe, home: Path, log: Path | None) -> Checkout:
    src = recipe.source
    assert src.tarball and src.sha256
    sha = src.sha256.lower()
    downloads = downloads_dir(home)
    archive = downloads / sha
    if archive.is_file():
        if sha256_file(archive) == sha:
            ui.info(f"using cached download {archive}")
        else:
            ui.warn(f"cached download {archive} changed on disk; downloading again")
            archive.unlink()
    if not archive.is_file():
        ui.info(f"downloading {src.tarball}")
        download(src.tarball, archive, sha)

    final = src_dir(home) / f"tarball-{sha[:16]}"
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        safe_extract(archive, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    entries = list(final.iterdir())
    root = entries[0] if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink() else final
    source_dir = root / src.subdir if src.subdir else root
    if not source_dir.is_dir():
        raise FetchError(f"subdir '{src.subdir}' does not exist in {src.tarball}",
                         f"check source.subdir in {recipe.path}", details={"subdir": src.subdir})
    patches = apply_patches(root, src.subdir, recipe.patch_files, log=log, in_repo=False)
    version = read_version(recipe, source_dir)
    ui.info(f"extracted {src.tarball} (sha256 {sha[:12]})" + (f", version {version}" if version else ""))
    return Checkout(root, source_dir, src.tarball, None, None, version, patches, (), sha)
