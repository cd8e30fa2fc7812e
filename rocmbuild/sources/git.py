"""Running git (hermetic, through the runner, every command logged) and reading a remote's refs.

Every git command is an argv list run by :mod:`rocmbuild.proc.runner`, under its supervisor like any
other child: a stop (Ctrl-C, SIGTERM, SIGHUP) or a SIGKILL of rocmbuild ends git and whatever git
started (``git-remote-https``, ``ssh``, ``git-upload-pack`` of a ``file://`` remote). GitPython was
dropped: it served only ``Git.execute``, which started git outside the supervisor.

Hermetic (the Confinement rule of the design): git reads no configuration but the repository's
own, and only repositories rocmbuild made itself:

* ``GIT_CONFIG_NOSYSTEM=1`` and ``GIT_CONFIG_GLOBAL=/dev/null`` (hence git >= 2.32, checked once
  per process): neither ``/etc/gitconfig`` nor ``~/.gitconfig`` nor ``$XDG_CONFIG_HOME/git/config``
  is read, so no ``url.*.insteadOf`` redirection, filter driver, ``core.fsmonitor`` or
  ``core.sshCommand`` of the machine steers a fetch; ``GIT_ATTR_NOSYSTEM=1`` and
  ``-c core.attributesFile=/dev/null -c core.excludesFile=/dev/null`` drop the global
  attributes and ignore files;
* ``-c core.hooksPath=/dev/null`` (no hook runs) and ``-c core.fsmonitor=false``; ``git diff`` is
  run with ``--no-ext-diff`` (``-c diff.external=`` would name an empty program);
* every ``GIT_*`` variable of the caller's environment is removed (``GIT_DIR``, ``GIT_WORK_TREE``,
  ``GIT_CONFIG_PARAMETERS``, ``GIT_EXTERNAL_DIFF``, ``GIT_EXEC_PATH``...: rocmbuild run from a git
  hook must not act on that repository) except the transport settings a user sets on purpose
  (:data:`KEEP_ENV`: ``GIT_SSH_COMMAND``, ``GIT_ASKPASS``, ``GIT_SSL_*``, ``GIT_HTTP_*``,
  ``GIT_TRACE*``...);
* ``GIT_ALLOW_PROTOCOL`` is the transports a recipe's git URL may use (:data:`PROTOCOLS`:
  file, git, http, https, ssh); ``ext::`` and ``fd::`` URLs are refused by git itself;
* git never prompts (``GIT_TERMINAL_PROMPT=0``; ``GIT_SSH_COMMAND="ssh -o BatchMode=yes"`` unless
  the user set ``GIT_SSH_COMMAND`` or ``GIT_SSH``); stdin is ``/dev/null`` (the runner);
* a tree that is not rocmbuild's own repository (an extracted tarball, which may hold a ``.git``
  of its own) is worked on with no repository at all: ``Git(root, repository=False)`` sets
  ``GIT_DIR=/dev/null``, a path that is not and can never become a repository, so git does not
  discover one (not the tree's, not an enclosing one) and treats the directory as a plain tree.

Decision on credentials: with no global config, credential helpers configured there
(``credential.helper``) are not used, and neither are proxies or CA files set only in git's
config. What still works: an ssh URL with the user's ssh agent and ``~/.ssh/config`` (BatchMode
uses the agent, never a passphrase prompt), ``GIT_ASKPASS`` (a program that prints a token),
the ``https_proxy``/``GIT_SSL_CAINFO`` environment variables. docs/sources.md says so.

A machine without git needs it only when it fetches a git source or patches a tarball: the
first :class:`Git` raises :class:`RequirementError` then, and never on import. The rules for
resolving a ref are in ``docs/sources.md``.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import Mapping

from rocmbuild import progress, ui
from rocmbuild.proc import runner
from rocmbuild.names import safe_text
from rocmbuild.errors import FetchError, RequirementError
from rocmbuild.recipe.paths import is_remote_url

FULL_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
SHORT_SHA_RE = re.compile(r"^[0-9a-f]{4,39}$")
MIN_VERSION = (2, 32)  # GIT_CONFIG_GLOBAL
#: the transports a recipe's git URL may use (GIT_ALLOW_PROTOCOL)
PROTOCOLS = ("file", "git", "http", "https", "ssh")
#: the caller's GIT_* variables git still sees: how to reach a remote, never what to read or run
KEEP_ENV = ("GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "GIT_ASKPASS", "GIT_PROXY_COMMAND",
            "GIT_REDACT_COOKIES")
KEEP_PREFIXES = ("GIT_SSL_", "GIT_HTTP_", "GIT_CURL_", "GIT_TRACE")
#: ``-c`` options before every command
HERMETIC_CONFIG = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "core.attributesFile=/dev/null",
                   "core.excludesFile=/dev/null")
#: GIT_DIR for a tree that is not rocmbuild's own repository: never a repository
NO_REPOSITORY = "/dev/null"
TIMED_OUT = 124  # the status of a git command stopped by its timeout (as timeout(1))

_versions: dict[str, tuple[int, int]] = {}  # git executable -> its (major, minor), checked once


def hermetic_env(extra: Mapping[str, str] | None = None, *, repository: bool = True) -> dict[str, str | None]:
    """The environment changes for one git command (None removes the caller's variable)."""
    env: dict[str, str | None] = {
        k: None for k in os.environ
        if k.startswith("GIT_") and k not in KEEP_ENV and not k.startswith(KEEP_PREFIXES)
    }
    env.update({
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
        "GIT_ALLOW_PROTOCOL": ":".join(PROTOCOLS), "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C",
    })
    if "GIT_SSH_COMMAND" not in os.environ and "GIT_SSH" not in os.environ:
        env["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes"  # fail instead of asking for a passphrase
    if not repository:
        env["GIT_DIR"] = NO_REPOSITORY
    env.update(extra or {})
    return env


def git_argv(*args: str) -> list[str]:
    """``git -c ... ARGS``: the hermetic options before the command."""
    argv = ["git"]
    for opt in HERMETIC_CONFIG:
        argv += ["-c", opt]
    return argv + list(args)


def require_git() -> None:
    """Check once per process that git is installed and new enough (:data:`MIN_VERSION`)."""
    install = ("install git >= 2.32 (e.g. apt-get install git), or apply an exported artifact with "
               "--artifact, which needs no git")
    exe = runner.which("git")
    if exe is None:
        raise RequirementError("git is needed to fetch sources and apply patches, and it is not on PATH",
                               install, details={"path": os.environ.get("PATH", "")})
    if exe in _versions:
        return
    done = runner.capture([exe, "--version"], env=hermetic_env(), timeout=60)
    m = re.search(r"(\d+)\.(\d+)", done.stdout)
    if done.returncode != 0 or m is None:
        raise RequirementError(f"{exe} does not work: `git --version` said {(done.stderr or done.stdout).strip()!r}",
                               install)
    version = (int(m.group(1)), int(m.group(2)))
    if version < MIN_VERSION:
        raise RequirementError(f"{exe} is {done.stdout.strip()}; rocmbuild needs git >= 2.32 (it runs git "
                               "with an empty global config: GIT_CONFIG_GLOBAL)", install,
                               details={"git": done.stdout.strip()})
    _versions[exe] = version


# --------------------------------------------------------------------------------------------
# pure helpers


def normalize_url(url: str, *, cwd: Path | None = None) -> str:
    """A URL git can fetch shallow/partial from: local paths (and ``~``) become ``file://`` URLs."""
    if is_remote_url(url):  # a scheme, or scp-like ssh: git@github.com:ROCm/rocm-libraries.git
        return url
    p = Path(url).expanduser()
    if not p.is_absolute():
        p = (cwd or Path.cwd()) / p
    return Path(os.path.normpath(p)).as_uri()



def remote_key(url: str) -> str:
    """The source cache's name for a (normalized) remote URL."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def is_full_sha(ref: str | None) -> bool:
    return ref is not None and FULL_SHA_RE.match(ref) is not None


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
    """Runs git hermetically in one directory, logging every command and its output.

    ``repository=False``: ``cwd`` is a plain tree (an extracted tarball), never a repository
    (see the module docstring)."""

    def __init__(self, cwd: Path, log: Path | None = None, *, repository: bool = True) -> None:
        require_git()
        self.cwd = cwd
        self.log = log
        self.repository = repository

    def run(
        self, *args: str, check: bool = True, env: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str]:
        argv = git_argv(*args)
        try:
            done = runner.capture(argv, cwd=self.cwd, env=hermetic_env(env, repository=self.repository),
                                  timeout=timeout)
            status, out, err = done.returncode, done.stdout.rstrip("\n"), done.stderr.rstrip("\n")
        except subprocess.TimeoutExpired:
            status, out, err = TIMED_OUT, "", f"fatal: git {args[0]} timed out after {timeout:g} s"
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log, "a", encoding="utf-8", errors="replace") as f:
                f.write(f"$ (cd {self.cwd}) {runner.display(argv)}\n")
                for text in (out, err):
                    if text:
                        f.write(text + "\n")
            if ui.streaming():  # -v: a build's fetch shows what git said, like its compile lines
                for line in f"{out}\n{err}".splitlines():
                    if line.strip():
                        progress.echo(line)
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


#: git's boilerplate after the line that says what went wrong (it names no cause)
GIT_NOISE = ("could not read from remote repository", "please make sure you have the correct access rights",
             "and the repository exists")


def last_line(text: str) -> str:
    """What git said went wrong: its ``fatal:``/``error:`` lines (without that prefix), joined with
    "; ", minus the boilerplate that names no cause (:data:`GIT_NOISE`) and ``hint:`` lines; when
    git said neither, its last non-empty line. A multi-line reason stays whole, never cut to the
    tail (``'/tmp/x' does not appear to be a git repository`` is the line that matters)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    meant = [line for line in lines
             if not line.lower().startswith("hint:") and not line.lower().rstrip(".").endswith(GIT_NOISE)]
    said = [re.sub(r"^(fatal|error):\s*", "", line, flags=re.I) for line in meant
            if re.match(r"^(fatal|error):", line, flags=re.I)]
    said = [x for i, x in enumerate(said) if x and x not in said[:i]][:4]
    if said:
        return "; ".join(said)
    return (meant or lines or [text.strip()])[-1]


def ls_remote(url: str, *, cwd: Path, timeout: float | None, log: Path | None = None) -> dict[str, str]:
    """{refname: sha} of the remote, without cloning; an unreachable remote is a FetchError (exit 3).

    Run with no repository: ``cwd`` may be wherever the user stands (``rocmbuild plan`` in an
    untrusted checkout), whose ``.git/config`` must not name an ssh command or a redirection."""
    status, out, err = Git(cwd, log, repository=False).run("ls-remote", "--", url, check=False, timeout=timeout)
    if status != 0:
        raise unreachable(url, status, err)
    return parse_ls_remote(out)


def unreachable(url: str, status: int, err: str) -> FetchError:
    """The error for a remote ``git ls-remote`` could not read, with the hint its cause calls for."""
    details = {"url": url, "git": err.strip()}
    if "dubious ownership" in err:
        return FetchError(
            f"git refuses the local remote {safe_text(url)}: it is owned by another user (git's 'dubious ownership')",
            "rocmbuild runs git without your git config, so a safe.directory there does not apply: "
            "serve that repository over ssh or https, or clone it to a path you own and name that",
            details={**details, "reason": "dubious_ownership"})
    if "not allowed" in err and "transport" in err:
        return FetchError(
            f"cannot fetch {safe_text(url)}: {last_line(err)}",
            f"a recipe's git URL may use these transports only: {', '.join(PROTOCOLS)} (or a local path)",
            details={**details, "reason": "transport_not_allowed"})
    return FetchError(
        f"cannot reach git remote {safe_text(url)}: {last_line(err) or f'git ls-remote exit code {status}'}",
        "check the URL (recipe source.git or --source), your network/proxy and credentials; "
        "a local directory must be a git repository",
        details=details,
    )


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
