"""git is hermetic: nothing a source tree, the machine or the user's git setup says runs (real git).

Every planted command (filter drivers, an fsmonitor, hooks, an external diff, diff and merge
drivers, an upload-pack hook, a remote helper) touches a canary file in ``tmp_path/canaries``,
outside every tree. A control run of plain git with the very same plants shows each one is live;
then rocmbuild's fetch must leave the canary directory empty.
"""

from __future__ import annotations

import hashlib
import io
import os
import shlex
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from rocmbuild.sources import git as gitmod
from rocmbuild.sources import source
from rocmbuild.errors import FetchError, RequirementError
from tests.integration.test_source import git_recipe, marker, marker_patch, tar_recipe
from tests.support.project import MIOPEN_SRC
from tests.support.snapshots import snapshot

pytestmark = pytest.mark.slow

HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "post-merge",
         "post-rewrite", "reference-transaction", "pre-applypatch", "applypatch-msg", "post-applypatch",
         "pre-auto-gc", "post-index-change", "push-to-checkout", "fsmonitor-watchman")
ATTRIBUTES = "* filter=pwn diff=pwn merge=pwn\n"


class Plants:
    """Hostile commands, each touching ``canaries/<name>`` when it runs."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "hostile"
        self.canaries = tmp_path / "canaries"
        self.root.mkdir()
        self.canaries.mkdir()

    def touch(self, name: str) -> str:
        return f"touch {shlex.quote(str(self.canaries / name))}"

    def script(self, name: str, then: str = "exit 0") -> Path:
        p = self.root / name
        p.write_text(f"#!/bin/sh\n{self.touch(name)}\n{then}\n")
        p.chmod(0o755)
        return p

    def hooks(self, who: str) -> Path:
        d = self.root / f"{who}-hooks"
        d.mkdir(exist_ok=True)
        for h in HOOKS:
            p = d / h
            p.write_text(f"#!/bin/sh\n{self.touch(f'{who}-hook-{h}')}\nexit 0\n")
            p.chmod(0o755)
        return d

    def config(self, who: str) -> dict[str, str]:
        """The hostile settings (key -> value) of one config source."""
        attributes = self.root / f"{who}-attributes"
        attributes.write_text(ATTRIBUTES)
        return {
            "core.fsmonitor": str(self.script(f"{who}-fsmonitor")),
            "core.hooksPath": str(self.hooks(who)),
            "core.attributesFile": str(attributes),
            "filter.pwn.clean": str(self.script(f"{who}-clean", "exec cat")),
            "filter.pwn.smudge": str(self.script(f"{who}-smudge", "exec cat")),
            "diff.external": str(self.script(f"{who}-diff-external")),
            "diff.pwn.command": str(self.script(f"{who}-diff-driver")),
            "merge.pwn.driver": f"{self.script(f'{who}-merge-driver')} %O %A %B",
            "uploadpack.packObjectsHook": str(self.script(f"{who}-pack-objects", 'exec "$@"')),
        }

    def left(self) -> list[str]:
        return sorted(p.name for p in self.canaries.iterdir())

    def clear(self) -> None:
        for p in self.canaries.iterdir():
            p.unlink()


def config_text(settings: dict[str, str]) -> str:
    """``section.[sub.]key = value`` pairs as a git config file."""
    lines = []
    for key, value in settings.items():
        section, _, name = key.rpartition(".")
        head, _, sub = section.partition(".")
        lines += [f'[{head} "{sub}"]' if sub else f"[{head}]", f"\t{name} = {value}"]
    return "\n".join(lines) + "\n"


def plain_git(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """git as a user runs it (the control): their config, their environment."""
    return subprocess.run(["git", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)


# --------------------------------------------------------------------------------------------
# a tarball carrying its own .git


def _entry(name: str, data: bytes | None = None, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes | None]:
    m = tarfile.TarInfo(name)
    m.mtime = 1_700_000_000
    if data is None:
        m.type, m.mode = tarfile.DIRTYPE, 0o755
    else:
        m.size, m.mode = len(data), mode
    return m, data


def hostile_tarball(path: Path, plants: Plants) -> str:
    """The fixture sources as ``MIOpen-3.5.1/`` plus a ``.git`` (config, hooks, attributes) and a
    ``.gitattributes`` that hand every file to the planted filter; returns its sha256."""
    top = "MIOpen-3.5.1"
    config = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n" + config_text(plants.config("tarball"))
    members = [_entry(f"{top}/.git"), _entry(f"{top}/.git/objects"), _entry(f"{top}/.git/refs"),
               _entry(f"{top}/.git/refs/heads"), _entry(f"{top}/.git/hooks"), _entry(f"{top}/.git/info"),
               _entry(f"{top}/.git/HEAD", b"ref: refs/heads/main\n"),
               _entry(f"{top}/.git/config", config.encode()),
               _entry(f"{top}/.git/info/attributes", ATTRIBUTES.encode()),
               _entry(f"{top}/.gitattributes", ATTRIBUTES.encode())]
    members += [_entry(f"{top}/.git/hooks/{h}", f"#!/bin/sh\n{plants.touch(f'tarball-git-hook-{h}')}\n".encode(),
                       0o755) for h in HOOKS]
    with tarfile.open(path, "w:gz") as tf:
        tf.add(MIOPEN_SRC, arcname=top)
        for m, data in members:
            tf.addfile(m, io.BytesIO(data) if data is not None else None)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_tarballs_own_git_config_never_runs(tmp_path):
    plants = Plants(tmp_path)
    tb = tmp_path / "hostile.tar.gz"
    sha = hostile_tarball(tb, plants)
    patch = marker_patch("stock", "patched")
    r = tar_recipe(tmp_path, str(tb), sha, extra='patches = ["m.patch"]', patches={"m.patch": patch})

    # control: plain `git apply` in the extracted tree discovers the tarball's .git and runs its filter
    control = tmp_path / "control"
    with tarfile.open(tb) as tf:
        tf.extractall(control, filter="data")
    (tmp_path / "m.patch").write_text(patch)
    plain_git("apply", str(tmp_path / "m.patch"), cwd=control / "MIOpen-3.5.1", env=dict(os.environ))
    assert "tarball-clean" in plants.left(), "the planted filter is not live: the test proves nothing"
    plants.clear()

    co = source.fetch(r, home=tmp_path / "rocmbuild-home")
    assert marker(co) == "patched"
    assert plants.left() == []
    assert not (co.root / ".git" / "index").exists()  # git never used the tarball's .git as a repository


# --------------------------------------------------------------------------------------------
# the machine's and the user's git config, and the caller's GIT_* environment


def _tiny_repo(path: Path) -> str:
    """A one-commit repository made by plain git (no user config: an empty HOME)."""
    env = dict(os.environ, HOME=str(path.parent / "empty-home"), GIT_CONFIG_NOSYSTEM="1")
    path.mkdir(parents=True)
    (path / "f.txt").write_text("tiny\n")
    for args in (["init", "-q"], ["add", "f.txt"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "tiny"]):
        assert plain_git(*args, cwd=path, env=env).returncode == 0
    return path.as_uri()


def _user_config_sources(tmp_path: Path, plants: Plants, redirect: dict[str, str]) -> dict[str, dict[str, str]]:
    """Four places git reads config from, each with the hostile settings: who -> environment."""
    empty = tmp_path / "empty"
    empty.mkdir()
    home, xdg, system = tmp_path / "user-home", tmp_path / "user-xdg", tmp_path / "system-gitconfig"
    (xdg / "git").mkdir(parents=True)
    home.mkdir()
    (home / ".gitconfig").write_text(config_text({**plants.config("home"), **redirect}))
    (xdg / "git" / "config").write_text(config_text({**plants.config("xdg"), **redirect}))
    (xdg / "git" / "attributes").write_text(ATTRIBUTES)
    system.write_text(config_text({**plants.config("system"), **redirect}))
    pairs = list({**plants.config("env"), **redirect}.items())
    counted = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for i, (k, v) in enumerate(pairs):
        counted |= {f"GIT_CONFIG_KEY_{i}": k, f"GIT_CONFIG_VALUE_{i}": v}
    base = {"HOME": str(empty), "XDG_CONFIG_HOME": str(empty)}
    return {"home": {**base, "HOME": str(home)}, "xdg": {**base, "XDG_CONFIG_HOME": str(xdg)},
            "system": {**base, "GIT_CONFIG_SYSTEM": str(system)}, "env": {**base, **counted}}


def test_the_users_and_the_systems_git_config_never_run(tmp_path, monorepo, monkeypatch):
    plants = Plants(tmp_path)
    decoy = tmp_path / "decoy-remote"  # where url.insteadOf would send the fetch: nothing there
    redirect = {f"url.{decoy.as_uri()}.insteadOf": monorepo.url}
    sources = _user_config_sources(tmp_path, plants, redirect)
    tiny = _tiny_repo(tmp_path / "tiny")

    # controls: plain git with each source alone runs its hooks, filter and upload-pack hook,
    # and follows its redirection
    for who, env in sources.items():
        env = dict(os.environ, **env)
        done = plain_git("clone", "-q", "--no-local", tiny, str(tmp_path / f"control-{who}"), cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        live = {f"{who}-smudge", f"{who}-hook-post-checkout"}
        if who != "env":  # git hands no GIT_CONFIG_* to a local upload-pack
            live.add(f"{who}-pack-objects")
        assert live <= set(plants.left()), who
        assert plain_git("ls-remote", monorepo.url, cwd=tmp_path, env=env).returncode != 0, who
    plants.clear()

    # a decoy repository in GIT_DIR / GIT_WORK_TREE (rocmbuild started from a git hook)
    gitdir = tmp_path / "decoy-gitdir"
    assert plain_git("init", "-q", "--bare", str(gitdir), cwd=tmp_path, env=dict(os.environ)).returncode == 0
    (gitdir / "config").write_text("[core]\n\tbare = false\n" + config_text(plants.config("gitdir")))
    before = snapshot(gitdir)
    r = git_recipe(tmp_path, monorepo.url, "develop", extra=f'cherry_pick = ["{monorepo.c_fix}"]\n'
                   'patches = ["m.patch"]', patches={"m.patch": marker_patch("fixed", "patched")})
    with monkeypatch.context() as m:
        for env in sources.values():
            for k, v in env.items():
                m.setenv(k, v)
        m.setenv("HOME", sources["home"]["HOME"])
        m.setenv("XDG_CONFIG_HOME", sources["xdg"]["XDG_CONFIG_HOME"])
        m.setenv("GIT_DIR", str(gitdir))
        m.setenv("GIT_WORK_TREE", str(tmp_path / "decoy-worktree"))
        m.setenv("GIT_EXTERNAL_DIFF", str(plants.script("env-external-diff")))
        co = source.fetch(r, home=tmp_path / "rocmbuild-home")
    assert co.url == monorepo.url and co.commit == monorepo.c_develop and co.cherry_picks == (monorepo.c_fix,)
    assert marker(co) == "patched"
    assert plants.left() == []
    assert snapshot(gitdir) == before and not (tmp_path / "decoy-worktree").exists()


def test_the_repository_the_user_stands_in_is_never_read(tmp_path, monorepo, monkeypatch):
    """``rocmbuild plan`` resolves a ref with ``git ls-remote`` from the current directory: an
    untrusted checkout there must not redirect it or run anything."""
    plants = Plants(tmp_path)
    here = tmp_path / "untrusted-checkout"
    assert plain_git("init", "-q", str(here), cwd=tmp_path, env=dict(os.environ)).returncode == 0
    redirect = {f"url.{(tmp_path / 'decoy').as_uri()}.insteadOf": monorepo.url,
                "core.sshCommand": str(plants.script("cwd-ssh"))}
    with open(here / ".git" / "config", "a") as f:
        f.write(config_text({**plants.config("cwd"), **redirect}))
    assert plain_git("ls-remote", monorepo.url, cwd=here, env=dict(os.environ)).returncode != 0  # control
    plain_git("ls-remote", "ssh://127.0.0.1:1/x.git", cwd=here, env=dict(os.environ))
    assert "cwd-ssh" in plants.left()  # control: the checkout's ssh command runs for plain git
    plants.clear()
    monkeypatch.chdir(here)
    assert source.resolve_ref(git_recipe(tmp_path, monorepo.url, "develop")) == monorepo.c_develop
    with pytest.raises(FetchError):
        source.resolve_ref(git_recipe(tmp_path, "ssh://127.0.0.1:1/x.git", "develop", name="ssh"), timeout=20)
    assert plants.left() == []


def test_a_transport_a_recipe_may_not_name_is_refused(tmp_path, monkeypatch):
    plants = Plants(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    helper = bindir / "git-remote-pwn"
    helper.write_text(f"#!/bin/sh\n{plants.touch('remote-helper')}\nexit 1\n")
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    plain_git("ls-remote", "pwn://host/repo", cwd=tmp_path, env=dict(os.environ))
    assert plants.left() == ["remote-helper"]  # control: plain git runs the helper of any scheme
    plants.clear()
    with pytest.raises(FetchError) as ei:
        source.fetch(git_recipe(tmp_path, "pwn://host/repo", "develop"), home=tmp_path / "rocmbuild-home")
    assert ei.value.exit_code == 3 and "not allowed" in ei.value.message
    assert ei.value.details["reason"] == "transport_not_allowed" and "https" in ei.value.hint
    assert plants.left() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the remote to another user")
def test_a_local_remote_owned_by_another_user_says_so(tmp_path, monorepo):
    for d, _, files in os.walk(monorepo.path):
        for p in [d, *(os.path.join(d, f) for f in files)]:
            os.lchown(p, 65534, 65534)  # nobody
    with pytest.raises(FetchError) as ei:
        source.fetch(git_recipe(tmp_path, monorepo.url, "develop"), home=tmp_path / "rocmbuild-home")
    assert ei.value.exit_code == 3 and ei.value.details["reason"] == "dubious_ownership"
    assert "another user" in ei.value.message and "safe.directory" in ei.value.hint


# --------------------------------------------------------------------------------------------
# the environment, timeouts, no git


def test_hermetic_env_drops_the_callers_git_variables_but_the_transport_ones(monkeypatch):
    for k, v in {"GIT_DIR": "/x", "GIT_INDEX_FILE": "/x", "GIT_CONFIG_PARAMETERS": "'a.b'='c'",
                 "GIT_EXEC_PATH": "/x", "GIT_SSH_COMMAND": "ssh -i key", "GIT_SSL_CAINFO": "/ca",
                 "GIT_ASKPASS": "/askpass", "GIT_TRACE": "1"}.items():
        monkeypatch.setenv(k, v)
    env = gitmod.hermetic_env({"GIT_COMMITTER_NAME": "rocmbuild"})
    assert env["GIT_DIR"] is None and env["GIT_INDEX_FILE"] is None and env["GIT_EXEC_PATH"] is None
    assert env["GIT_CONFIG_PARAMETERS"] is None
    assert not {"GIT_SSH_COMMAND", "GIT_SSL_CAINFO", "GIT_ASKPASS", "GIT_TRACE"} & set(env)  # kept as they are
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert env["GIT_ALLOW_PROTOCOL"] == "file:git:http:https:ssh" and env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["GIT_COMMITTER_NAME"] == "rocmbuild"
    assert gitmod.hermetic_env(repository=False)["GIT_DIR"] == "/dev/null"


def test_a_remote_that_never_answers_times_out_as_a_fetch_error(tmp_path, monkeypatch):
    ssh = tmp_path / "silent-ssh"
    ssh.write_text("#!/bin/sh\nexec sleep 600\n")
    ssh.chmod(0o755)
    monkeypatch.setenv("GIT_SSH_COMMAND", str(ssh))
    t0 = time.monotonic()
    with pytest.raises(FetchError) as ei:
        gitmod.ls_remote("ssh://rocmbuild.invalid/x.git", cwd=tmp_path, timeout=1)
    assert time.monotonic() - t0 < 15
    assert "timed out after 1 s" in ei.value.message and ei.value.exit_code == 3


def test_no_git_is_a_requirement_only_when_git_is_needed(tmp_path, monorepo, monkeypatch):
    bindir = tmp_path / "bin-without-git"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    with pytest.raises(RequirementError) as ei:
        source.fetch(git_recipe(tmp_path, monorepo.url, "develop"), home=tmp_path / "rocmbuild-home")
    assert ei.value.exit_code == 2 and "git" in ei.value.message and "--artifact" in ei.value.hint
    tb = tmp_path / "plain.tar.gz"
    with tarfile.open(tb, "w:gz") as tf:
        tf.add(MIOPEN_SRC, arcname="MIOpen-3.5.1")
    sha = hashlib.sha256(tb.read_bytes()).hexdigest()
    co = source.fetch(tar_recipe(tmp_path, str(tb), sha, name="nopatch"), home=tmp_path / "rocmbuild-home")
    assert co.version == "3.5.1"  # a tarball without patches needs no git
    with pytest.raises(RequirementError):  # one with patches does
        source.fetch(tar_recipe(tmp_path, str(tb), sha, name="patched", extra='patches = ["m.patch"]',
                                patches={"m.patch": marker_patch("stock", "patched")}),
                     home=tmp_path / "rocmbuild-home")
