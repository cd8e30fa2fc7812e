"""Running git (through GitPython, argv lists, every command logged) and reading a remote's refs.

Decisions: git never prompts (``GIT_TERMINAL_PROMPT=0`` and, unless the user set their own,
``GIT_SSH_COMMAND="ssh -o BatchMode=yes"``; credential helpers still work); GitPython is imported
on first use, so a machine that only applies exported artifacts needs no git. The rules for
resolving a ref are in ``docs/sources.md``.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Mapping

from rocmbuild import ui
from rocmbuild.names import safe_text
from rocmbuild.errors import FetchError, RequirementError

FULL_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
SHORT_SHA_RE = re.compile(r"^[0-9a-f]{4,39}$")
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



def remote_key(url: str) -> str:
    """The source cache's name for a (normalized) remote URL."""
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
# running git


class Git:
    """Runs git (through GitPython) in one directory, logging every command and its output."""

    def __init__(self, cwd: Path, log: Path | None = None) -> None:
        self.cwd = cwd
        self.log = log
        self.g = _gitpython().Git(str(cwd))

    def run(
        self, *args: str, check: bool = True, env: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        argv = ["git", *args]
        ui.detail(f"running: {' '.join(argv)} (in {self.cwd})")
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
            raise GitFailed(argv, status, err or out)
        return status, out, err


class GitFailed(Exception):
    """A git command that was run with ``check=True`` exited non-zero."""

    def __init__(self, argv: list[str], status: int, output: str) -> None:
        super().__init__(f"{' '.join(argv)} failed ({status}): {output}")
        self.argv = argv
        self.status = status
        self.output = output


def last_line(text: str) -> str:
    """The last non-empty line of git's output (the one that says what went wrong)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text.strip()


def ls_remote(url: str, *, cwd: Path, timeout: float | None, log: Path | None = None) -> dict[str, str]:
    """{refname: sha} of the remote, without cloning; an unreachable remote is a FetchError (exit 3)."""
    status, out, err = Git(cwd, log).run("ls-remote", "--", url, check=False, timeout=timeout)
    if status != 0:
        raise FetchError(
            f"cannot reach git remote {safe_text(url)}: {last_line(err) or f'git ls-remote exit code {status}'}",
            "check the URL (recipe source.git or --source), your network/proxy and credentials; "
            "a local directory must be a git repository",
            details={"url": url, "git": err.strip()},
        )
    return parse_ls_remote(out)


# what git says when the remote cannot send a commit's objects (it lacks or cannot read them)
MISSING_OBJECTS = ("possible repository corruption", "unable to read", "bad object", "bad tree object",
                   "did not send all necessary objects", "from promisor remote", "missing blob", "missing tree")


def missing_objects(output: str) -> bool:
    return any(s in output for s in MISSING_OBJECTS)


def fetch_refused(url: str, sha: str, ref: str | None, output: str) -> FetchError:
    """The error for a fetch of ``sha`` (named ``ref`` in the recipe) the remote did not serve.

    Decision: ``not our ref`` from a remote that advertised the commit (``ref`` is a branch or tag
    name) means its objects are missing there, not that it refuses shas; the
    ``uploadpack.allowAnySHA1InWant`` hint is only for a sha the remote was asked for directly."""
    named = bool(ref) and not sha.startswith(str(ref).lower())
    lines = [x.strip() for x in output.strip().splitlines() if x.strip()]
    first = next((x for x in lines if "fatal" in x or "error" in x), last_line(output))
    details = {"url": url, "commit": sha, "git": output.strip()}
    if missing_objects(output) or (named and "not our ref" in output):
        return FetchError(
            f"cannot fetch commit {sha} from {safe_text(url)}: the remote is missing objects of it ({first})",
            "the remote repository is damaged or incomplete (a shallow or partial mirror?): repair it "
            "(`git fsck` there) or use a complete remote with --source URL",
            details={**details, "reason": "missing_objects"})
    if "not our ref" in output:
        return FetchError(
            f"cannot fetch commit {sha} from {safe_text(url)}: the remote does not serve it ({first})",
            "either the commit is not on that remote, or the server does not serve commits by sha "
            "(plain git servers need uploadpack.allowAnySHA1InWant; GitHub does): use a branch or tag "
            "name that contains it as the ref",
            details={**details, "reason": "not_served_by_sha"})
    return FetchError(f"cannot fetch commit {sha} from {safe_text(url)}: {last_line(output)}",
                      "check the remote is reachable and has the commit (`git ls-remote URL`)", details=details)


def unknown_ref(ref: str | None, url: str, refs: Mapping[str, str]) -> FetchError:
    return FetchError(
        f"ref '{safe_text(ref)}' not found on {safe_text(url)}",
        f"use a branch, tag or commit sha that exists there ({describe_refs(refs)}); "
        "set source.ref in the recipe or pass --ref",
        details={"url": url, "ref": ref},
    )
