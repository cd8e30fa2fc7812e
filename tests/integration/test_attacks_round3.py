"""Round 3 of the confinement attacks (after issue 26): variations the class tests did not cover.

Each test is an attack that broke the fixes of issue 26; those not fixed yet are marked
``xfail(strict=True)`` with the reason. A fake server on 127.0.0.1 (tests/support/recorder.py)
records what it was sent.
"""

from __future__ import annotations

import json

import pytest

from tests.support import recorder
from tests.integration.test_first_contact import BASH_DRIVER
from tests.support.cli import rb

TOKEN = "s3cret-token-9f1c"


@pytest.fixture
def server():
    fake = recorder.start(answer=recorder.empty_registry)
    yield fake
    fake.stop()


# -- class 6: credentials in a URL -------------------------------------------------------------

@pytest.mark.parametrize("lead", [" ", "\x01", "o\t"], ids=["space", "control", "tab-in-scheme"])
def test_a_url_urllib_cleans_up_still_has_its_credentials_refused(server, lead):
    """urllib drops C0 controls and spaces in front and tabs anywhere before it parses a URL; a
    check that reads the raw text saw no ``scheme://user@`` and let the token through to the
    registry (as Basic auth) and into the JSON."""
    url = (lead + f"oci://fleet:{TOKEN}@{server.host}/rocmbuild/cache") if lead != "o\t" else \
        f"o\tci://fleet:{TOKEN}@{server.host}/rocmbuild/cache"
    r = rb("cache", "list", "--remote", url, "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert TOKEN not in r.stdout + r.stderr
    assert "holds credentials" in json.loads(r.stdout)["error"]["message"]
    assert server.sent() == []


def test_a_cache_url_with_a_leading_space_is_refused_not_used(server):
    r = rb("cache", "list", "--remote", f" http://{server.host}/rocmbuild/cache", "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "space or a control character" in json.loads(r.stdout)["error"]["message"]
    assert server.sent() == []


@pytest.mark.parametrize("extra", [[], ["--sha256", "a" * 64, "--dry-run"]], ids=["no-sha", "dry-run"])
def test_an_artifact_url_with_credentials_is_refused_and_never_shown(server, tmp_path, extra):
    """``apply --artifact http://user:token@host/b.tar.gz`` echoed the token in every message and
    in the JSON details, and sent it."""
    url = f"http://fleet:{TOKEN}@{server.host}/b.tar.gz"
    r = rb("apply", "--artifact", url, "--env", str(tmp_path / "env"), *extra, "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert TOKEN not in r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert "holds credentials" in d["error"]["message"] and ".netrc" in d["error"]["hint"]
    assert server.sent() == []


# -- class 8: another user's code as root -------------------------------------------------------

from tests.support.ownedenv import OWNER, SYSTEM_PYTHON  # noqa: E402


@pytest.fixture
def rootenv(fixture_libs):
    """(env, log): a conda-like env owned by root whose activate.d script and .pth file log the
    uid that ran them; nothing of it chowned yet (each attack gives one piece to uid 1000)."""
    import os

    from tests.support.ownedenv import logging_env

    with logging_env(fixture_libs, "rocmbuild-attack-") as (env, log, _base):
        os.chmod(log, 0o666)
        yield env, log


def _uids_that_ran(log) -> set[str]:
    lines = log.read_text().splitlines()
    log.write_text("")
    return {ln.split()[1] for ln in lines}


def _give(path, uid=OWNER) -> None:
    import os

    os.chown(path, uid, uid, follow_symlinks=False)


@pytest.mark.parametrize("piece", ["site-packages", "pth", "activate.d", "activate-script", "lib-python"])
def test_a_root_owned_env_holding_another_users_code_does_not_run_it_as_root(rootenv, piece):
    """The owner is judged from the prefix, bin/ and bin/python only: an env whose prefix and
    interpreter are root's but whose site-packages, a .pth file, activate.d or a script in it is
    uid 1000's ran that code as root (``status --env``)."""
    env, log = rootenv
    target = {"site-packages": env.site_packages, "pth": env.site_packages / "zz_owner.pth",
              "activate.d": env.prefix / "etc/conda/activate.d",
              "activate-script": env.prefix / "etc/conda/activate.d/owner.sh",
              "lib-python": env.site_packages.parent}[piece]  # a conda env's stdlib dir: site-packages is theirs to swap
    _give(target)
    r = rb("status", "--env", str(env.prefix), "--json")
    ran = _uids_that_ran(log)
    assert ran, (r.stdout, r.stderr)
    assert "0" not in ran, f"uid 1000's {piece} ran as root: {ran}"



def test_conda_runs_dump_imports_nothing_from_the_working_directory(rootenv, tmp_path):
    """``conda run -p PREFIX PYTHON -c DUMP``: ``-c`` puts the working directory first on
    sys.path, and DUMP imports ``json``: run as root (on root's own env) from a directory another
    user can write to (``/tmp``, their home), their ``json.py`` ran as root."""
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from tests.support.cli import REPO

    env, log = rootenv
    conda = tmp_path / "bin" / "conda"  # a stand-in for `conda run -p PREFIX CMD...` (no conda here)
    conda.parent.mkdir()
    conda.write_text('#!/bin/bash\n[ "$1" = run ] && [ "$2" = -p ] || exit 9\np=$3; shift 3\n'
                     'export CONDA_PREFIX="$p"\nexec "$@"\n')
    conda.chmod(0o755)
    cwd = Path(tempfile.mkdtemp(prefix="rocmbuild-cwd-", dir="/tmp"))
    try:
        _give(cwd)
        planted = cwd / "json.py"
        planted.write_text(f"import os; open({str(log)!r}, 'a').write('cwd %d\\n' % os.getuid())\n"
                           "import sys; del sys.modules['json']; sys.path.remove('')\nimport json\n")
        _give(planted)
        # -P: rocmbuild itself (the entry point script) takes nothing from the working directory
        e = {**os.environ, "PYTHONPATH": str(REPO), "CONDA_EXE": str(conda)}
        r = subprocess.run([sys.executable, "-P", "-m", "rocmbuild", "status", "--env", str(env.prefix), "--json"],
                           cwd=cwd, env=e, capture_output=True, text=True, timeout=300)
        lines = log.read_text().splitlines()
        assert any(ln.startswith("pth") for ln in lines), (r.stdout, r.stderr)
        assert not any(ln.startswith("cwd") for ln in lines), f"a json.py in the working directory ran: {lines}"
    finally:
        import shutil
        shutil.rmtree(cwd, ignore_errors=True)


# -- class 5: racing pushes ---------------------------------------------------------------------

def _mini_bundle(tmp_path):
    """(path, sha256) of a bundle holding just a manifest member (what a file:// push reads)."""
    import hashlib
    import io
    import tarfile

    from rocmbuild.remote import MANIFEST_MEMBER

    path = tmp_path / "b.tar.gz"
    data = b'{"key": "x"}\n'
    with tarfile.open(path, "w:gz") as tf:
        info = tarfile.TarInfo(MANIFEST_MEMBER)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def _push_as(uid: int, url: str, key: str, bundle, sha: str, force: bool) -> str:
    """``FileCache.push`` in a forked child running as ``uid``: its result, or its error's type and message."""
    import os

    from rocmbuild.config import CacheConfig
    from rocmbuild.remote.static import FileCache

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become uid, push, report on the pipe, never return into pytest
        out = "?"
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            out = repr(FileCache(CacheConfig(url)).push(key, bundle, sha, b"sig", force=force))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out = f"{type(exc).__name__}: {exc}"
        finally:
            os.write(w, out.encode())
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read().decode()
    os.waitpid(pid, 0)
    return got


@pytest.mark.parametrize("force", [False, True], ids=["again", "force"])
def test_a_second_user_can_push_to_a_shared_file_cache_another_user_pushed_to(tmp_path, force):
    """A file:// cache shared by a fleet's users (a directory they may all write): the push lock
    file is created by the first pusher with its umask (0644), and ``lockf`` needs it open for
    writing: every later push of that key by another user ended in exit 3 "Permission denied",
    ``push --force`` too (an entry stuck for good unless its first pusher fixes it)."""
    import os
    import tempfile
    from pathlib import Path

    if os.geteuid() != 0:
        pytest.fail("this test runs as root (it pushes as uid 1000 too)")
    base = Path(tempfile.mkdtemp(prefix="rocmbuild-shared-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        cache = base / "cache"
        cache.mkdir(mode=0o777)
        os.chmod(cache, 0o777)
        bundle, sha = _mini_bundle(base)
        os.chmod(bundle, 0o644)
        key = "ab" * 32
        url = f"file://{cache}"
        old = os.umask(0o022)
        try:
            assert _push_as(OWNER, url, key, bundle, sha, False) == "True"  # the first pusher: uid 1000
            assert _push_as(1001, url, key, bundle, sha, force) == repr(force)  # another member of the fleet
        finally:
            os.umask(old)
    finally:
        import shutil
        shutil.rmtree(base, ignore_errors=True)


# -- class 9: completion ------------------------------------------------------------------------

# test_first_contact's bash driver, its candidates NUL-separated (a name may hold a newline)
BASH_DRIVER0 = BASH_DRIVER.replace("printf '%s\\n'", "printf '%s\\0'")
assert BASH_DRIVER0 != BASH_DRIVER


@pytest.mark.parametrize("line", ["rocmbuild build ", "rocmbuild apply --artifact "], ids=["toml", "files"])
def test_bash_file_candidates_are_whole_names_and_no_option(tmp_path, line):
    """The bash driver adds the shell's own file candidates as ``COMPREPLY+=($(compgen -f ...))``:
    unquoted, so a file ``evil\\n--inject.toml`` (or ``a b.toml``) became two candidates, one an
    option, and a file named ``*`` expanded to every file; a file ``-rf.toml`` was offered as is."""
    import os
    import subprocess

    from tests.integration.test_first_contact import _script, rocmbuild_on_path

    work = tmp_path / "work"
    work.mkdir()
    for name in ("evil\n--inject.toml", "a b.toml", "-rf.toml", "*", "good.toml"):
        (work / name).write_text("")
    env = {"PATH": f"{rocmbuild_on_path(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
           "ROCMBUILD_RECIPES": str(tmp_path / "no-recipes")}
    script = _script(tmp_path, "bash", env)
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", BASH_DRIVER0, "bash", str(script), line],
                          capture_output=True, text=True, cwd=work, env={**os.environ, **env}, timeout=60)
    assert done.returncode == 0, done.stderr
    got = [w for w in done.stdout.split("\0") if w]
    assert "good.toml" in got and "a b.toml" in got, got  # a name with a space stays whole
    assert not [w for w in got if w.startswith("-")], got
    assert "evil" not in got and "a" not in got and got.count("*") <= 1, got
    assert not [w for w in got if "\n" in w], got


# -- class 4: strays ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_strays_name_cannot_forge_a_line_of_output(txn_home, target_env, kind):
    """A stray named ``libMIOpen.so.x<newline>error: ...`` (or with an escape sequence) is shown
    escaped in every message: it must not print a line of its own, nor act on the terminal."""
    env = target_env("3.5.0", layout="wheel", compile_version="3.5.1")
    stray = env.libfile.parent / "libMIOpen.so.x\nFORGED-LINE \x1b]0;PWN\x07"
    if kind == "file":
        stray.write_bytes(b"x")
    else:
        stray.mkdir()
    for args in (("apply", txn_home.recipe("mini"), "--env", env.prefix, "--move-strays", "--dry-run"),
                 ("status", "--env", env.prefix)):
        r = rb(*args)
        out = r.stdout + r.stderr
        assert "FORGED-LINE" in out, (args, out)  # it is named...
        assert not [ln for ln in out.splitlines() if ln.startswith("FORGED-LINE")], (args, out)  # ...not as a line
        assert "\x1b" not in out and "\x07" not in out, (args, out)


def test_a_root_owned_venv_on_another_users_interpreter_does_not_run_it_as_root(rootenv):
    """A root-owned venv made from uid 1000's Python (a pyenv build in their home): its
    ``bin/python`` is a root-owned link to uid 1000's interpreter; the link was not followed, so
    their binary ran as root."""
    import os
    import shutil

    env, log = rootenv
    pybin = env.prefix.parent / "pybin"
    pybin.mkdir()
    theirs = pybin / "python3.11"
    shutil.copy2(SYSTEM_PYTHON, theirs)
    for p in (pybin, theirs):
        _give(p)
    for name in ("python", "python3", "python3.11"):
        link = env.prefix / "bin" / name
        if os.path.lexists(link):
            link.unlink()
            link.symlink_to(theirs)
    cfg = env.prefix / "pyvenv.cfg"
    cfg.write_text("".join(f"home = {pybin}\n" if ln.startswith("home") else ln
                           for ln in cfg.read_text().splitlines(keepends=True)))
    r = rb("status", "--env", str(env.prefix), "--json")
    lines = log.read_text().splitlines()
    ran = {ln.split()[1] for ln in lines if ln.startswith("pth")}  # what the interpreter ran (activate.d is root's)
    assert ran, (r.stdout, r.stderr)
    assert "0" not in ran, f"uid 1000's interpreter ran as root: {lines}"


def test_an_owner_the_user_database_does_not_know_never_gets_the_root_group(tmp_path):
    """An env owned by ``5000:0`` (a uid with no passwd entry, group root: an image built for
    arbitrary uids): the owner's code ran with gid 0, root's group."""
    import os
    from pathlib import Path

    from rocmbuild.proc import runas

    prefix = tmp_path / "env"
    prefix.mkdir()
    os.chown(prefix, 5000, 0)
    who = runas.for_target(None, Path(prefix))
    assert who is not None and who.uid == 5000
    assert who.gid != 0 and 0 not in who.groups, who


def test_a_killed_pushs_partial_bundle_is_removed_by_the_next_push(tmp_path):
    """A push killed while copying the bundle leaves ``.<key>.tar.gz.<pid>.part`` (the size of the
    bundle: GiBs for MIOpen); the next push of the key, holding the lock, wrote its own and left
    that one for ever."""
    from rocmbuild.config import CacheConfig
    from rocmbuild.remote.static import FileCache

    cache = tmp_path / "cache"
    cache.mkdir()
    bundle, sha = _mini_bundle(tmp_path)
    key = "cd" * 32
    left = cache / f".{key}.tar.gz.99999.part"
    left.write_bytes(b"half a bundle")
    assert FileCache(CacheConfig(f"file://{cache}")).push(key, bundle, sha, b"sig") is True
    assert not left.exists()
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [f".{key}.push-lock", f"{key}.tar.gz", f"{key}.tar.gz.sha256", f"{key}.manifest.json", f"{key}.sig"])


@pytest.mark.parametrize("verb", [("status", "-n", "no-such-env"), ("status", "--env", "ENV")],
                         ids=["conda-info-envs", "conda-run"])
def test_another_users_conda_tool_is_not_run_as_root(rootenv, tmp_path, verb):
    """``sudo -E rocmbuild ...`` from uid 1000's shell keeps ``CONDA_EXE`` (their miniconda's
    ``conda``, their Python program): listing the envs (``-n NAME``) and ``conda run`` on a
    root-owned env ran it as root."""
    import os
    import tempfile
    from pathlib import Path

    env, log = rootenv
    base = Path(tempfile.mkdtemp(prefix="rocmbuild-conda-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        conda = base / "bin" / "conda"
        conda.parent.mkdir()
        conda.write_text(f'#!/bin/bash\necho "conda $(id -u)" >> "{log}"\n'
                         '[ "$1" = run ] && [ "$2" = -p ] || { echo "{}"; exit 0; }\np=$3; shift 3\nexec "$@"\n')
        conda.chmod(0o755)
        for p in (base, conda.parent, conda):
            _give(p)
        args = [str(env.prefix) if a == "ENV" else a for a in verb]
        r = rb(*args, "--json", env={"CONDA_EXE": str(conda)})
        lines = log.read_text().splitlines()
        ran = {ln.split()[1] for ln in lines if ln.startswith("conda")}
        assert ran, (r.stdout, r.stderr, lines)
        assert "0" not in ran, f"uid 1000's conda ran as root: {lines}"
    finally:
        import shutil
        shutil.rmtree(base, ignore_errors=True)


def test_a_world_writable_site_packages_in_a_root_env_does_not_run_a_users_pth_as_root(rootenv):
    """A root-owned env whose site-packages is mode 0777: any local user drops a ``.pth`` there
    (root-owned files, their content) and the next ``status`` as root ran it as root. There is no
    owner to run it as: refused (exit 2) naming the dir and its mode, unless ``--run-as root``."""
    import os

    env, log = rootenv
    os.chmod(env.site_packages, 0o777)
    r = rb("status", "--env", str(env.prefix), "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = json.loads(r.stdout)["error"]
    assert "may be written by other users" in err["message"] and "0777" in err["message"], err
    assert str(env.site_packages) in err["message"] and "chmod go-w" in err["hint"], err
    assert not _uids_that_ran(log), "refused before any of the target's code ran"
    r = rb("status", "--env", str(env.prefix), "--json", "--run-as", "root")
    assert r.returncode == 0 and "may be written by other users" in r.stderr, (r.stdout, r.stderr)
    assert _uids_that_ran(log) == {"0"}, "--run-as root: run as root, said once"


# -- hostile recipes dir ------------------------------------------------------------------------

def test_a_fifo_named_like_a_recipe_is_no_recipe(tmp_path):
    """A FIFO ``evil.toml`` in a recipes dir: listed as a recipe by name, refused as unknown by
    ``show evil``, whose hint then said "did you mean 'evil'?" and listed it (nothing hung)."""
    import os

    d = tmp_path / "rec"
    d.mkdir()
    os.mkfifo(d / "evil.toml")
    r = rb("show", "evil", env={"ROCMBUILD_RECIPES": str(d)}, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "did you mean 'evil'" not in r.stderr and "evil (" not in r.stderr, r.stderr
