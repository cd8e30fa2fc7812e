"""Expected conditions of the system get their own message and exit code, never "internal error".

Real conditions wherever this machine allows them: a real tmpfs filled to the last byte (ENOSPC),
a real read-only bind mount (EROFS), real 300-byte names (ENAMETOOLONG), a real 200 kB define that
cmake cannot be started with (E2BIG), real truncated .tar.gz files, a real directory where the lock
belongs, and a real pipe whose reader leaves. Mounting needs root: without it those tests skip. Two
tests inject ENOSPC with pytest-mock at a write no real filesystem can be made to refuse on cue
(a journal write after the swap; the manifest write of a build) and say so.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support.cli import REPO, rb
from tests.support.envs import make_env
from tests.support.project import MIOPEN_SRC
from tests.support.recipes import fixture_recipe, write_fixture_recipe
from tests.support.snapshots import full_listing, snapshot

pytestmark = pytest.mark.slow

LONG = "x" * 300  # one path component over NAME_MAX (255)


def untouched(prefix: Path) -> dict[str, tuple]:
    """Every path under the prefix, ``.rocmbuild`` included: files and links by (inode, mtime_ns,
    size), directories and the lock file (each run writes its pid there) by inode (a refused run may
    have tested a directory for writability)."""
    return {k: (v[0] if k == ".rocmbuild/lock" or (os.path.isdir(prefix / k) and not os.path.islink(prefix / k))
                else v) for k, v in full_listing(prefix).items()}


def _json(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def _refused(proc, code: int, type_: str, *words: str) -> dict:
    """``proc`` ran with --json and failed with ``code`` and an error of ``type_`` whose message
    and hint together contain every one of ``words``; never an internal error."""
    assert proc.returncode == code, proc.stderr
    assert "internal error" not in proc.stderr and "this is a bug" not in proc.stderr, proc.stderr
    err = _json(proc)["error"]
    assert err["type"] == type_, err
    text = (err["message"] + " " + err["hint"]).lower()
    for w in words:
        assert w.lower() in text, (w, err)
    assert err["hint"], err
    return err


@pytest.fixture
def env350(target_env):
    def make(layout="conda", **kw):
        return target_env("3.5.0", layout=layout, compile_version="3.5.1", **kw)

    return make


def _mount(*argv: str) -> bool:
    if not shutil.which("mount"):
        return False
    return subprocess.run(["mount", *argv], capture_output=True).returncode == 0


@pytest.fixture
def mounts():
    """``mounts(*mount_argv)`` mounts (skips the test when this user may not); unmounted at teardown
    unless the test did it."""
    done: list[str] = []

    def mount(*argv: str) -> str:
        Path(argv[-1]).mkdir(parents=True, exist_ok=True)
        if not _mount(*argv):
            pytest.skip("cannot mount here (not root?)")
        done.append(argv[-1])
        return argv[-1]

    yield mount
    for point in reversed(done):
        if any(line.split()[1] == point for line in Path("/proc/self/mounts").read_text().splitlines()):
            subprocess.run(["umount", point], check=True)


def _fill(directory: Path) -> Path:
    """Write a filler file in ``directory`` until its filesystem has no byte left."""
    filler = directory / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


# --------------------------------------------------------------------------------------------
# a committed outcome is reported as committed, whoever reads the output


def test_apply_piped_into_head_exits_0_after_the_commit(txn_home, env350):
    """`rocmbuild apply ... 2>&1 | head -2`: a real pipe whose reader leaves after two lines."""
    env = env350("conda")
    e = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "rocmbuild", "apply", txn_home.recipe("mini"), "--env",
                             str(env.prefix)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e,
                            cwd=str(REPO), start_new_session=True)
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        proc.stdout.close()  # `head -2` exits
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert all(lines), lines
    assert code == 0
    h = _json(rb("history", "--env", env.prefix, "--json"))
    assert [r["outcome"] for r in h["transactions"]] == ["committed"], h
    assert _json(rb("status", "--env", env.prefix, "--json"))["torch"]["runtime_version"] == "3.5.1"


def test_json_into_a_closed_pipe_keeps_the_exit_code(txn_home, env350):
    """stdout closed before the one JSON object is written: the apply still committed, exit 0."""
    env = env350("conda")
    r, w = os.pipe()
    os.close(r)  # no reader at all
    try:
        proc = subprocess.run([sys.executable, "-m", "rocmbuild", "apply", txn_home.recipe("mini"), "--env",
                               str(env.prefix), "--json"], stdout=w, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=str(REPO), timeout=120)
    finally:
        os.close(w)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    h = _json(rb("history", "--env", env.prefix, "--json"))
    assert [r["outcome"] for r in h["transactions"]] == ["committed"]


# --------------------------------------------------------------------------------------------
# read-only and full filesystems


def test_rollback_on_a_read_only_prefix_exit_2_nothing_changed(txn_home, env350, mounts):
    env = env350("conda")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    before, listing = snapshot(env.prefix), untouched(env.prefix)
    mounts("--bind", "-o", "ro", str(env.prefix), str(env.prefix))
    err = _refused(rb("rollback", "--env", env.prefix, "--json"), 2, "TargetFilesystemError",
                   "read-only", "nothing was changed", "remount")
    assert err["details"]["errno"] == "EROFS"
    assert snapshot(env.prefix) == before and untouched(env.prefix) == listing
    subprocess.run(["umount", str(env.prefix)], check=True)
    assert rb("rollback", "--env", env.prefix).returncode == 0  # writable again: it works


def test_apply_on_a_read_only_prefix_exit_2(txn_home, env350, mounts):
    env = env350("conda")
    before, listing = snapshot(env.prefix), untouched(env.prefix)
    mounts("--bind", "-o", "ro", str(env.prefix), str(env.prefix))
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 2 and "internal error" not in r.stderr, r.stderr
    assert "read-only" in _json(r)["error"]["message"] or "not writable" in _json(r)["error"]["message"]
    assert snapshot(env.prefix) == before and untouched(env.prefix) == listing


def test_no_space_on_the_target_exit_2_nothing_changed(txn_home, fixture_libs, tmp_path, mounts):
    """The env lives on a real 16 MiB tmpfs; applied, then the filesystem is filled to the last
    byte: rollback cannot even write its lock's pid. Exit 2, nothing changed; with room again it
    works."""
    disk = Path(mounts("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(tmp_path / "small")))
    env = make_env(disk / "env", lib_dir=fixture_libs("3.5.0"), compile_version="3.5.1")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    before, listing = snapshot(env.prefix), untouched(env.prefix)
    filler = _fill(disk)
    err = _refused(rb("rollback", "--env", env.prefix, "--json"), 2, "TargetFilesystemError",
                   "no space left", "nothing was changed", "free some space")
    assert err["details"]["errno"] == "ENOSPC" and err["details"]["path"].startswith(str(env.prefix))
    filler.unlink()
    assert snapshot(env.prefix) == before
    assert untouched(env.prefix) == listing
    assert rb("rollback", "--env", env.prefix).returncode == 0


def test_no_space_while_staging_exit_2_nothing_changed(txn_home, env350, tmp_path, mounts, mocker, capsys):
    """The env's ``lib`` is a real 16 MiB tmpfs (its state dir stays on the big disk). The free-space
    preflight sees room, then the lib dir fills up (another process wrote there): a real ENOSPC when
    the new library is copied in. Exit 2, nothing changed, no staged temp left."""
    from rocmbuild.cli import app as cli
    from rocmbuild.flows import guards

    env = env350("conda")
    lib = env.prefix / "lib"
    shutil.copytree(lib, tmp_path / "lib-copy", symlinks=True)
    mounts("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(lib))
    shutil.copytree(tmp_path / "lib-copy", lib, symlinks=True, dirs_exist_ok=True)
    before = snapshot(env.prefix)
    real = guards.preflight

    def then_fill(*a, **k):
        out = real(*a, **k)
        _fill(lib)
        return out

    mocker.patch.object(guards, "preflight", side_effect=then_fill)
    code = cli.main(["apply", txn_home.recipe("mini"), "--env", str(env.prefix), "--json"])
    err = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and err["type"] == "TargetFilesystemError", err
    assert "no space left" in err["message"] and "nothing was changed" in err["message"]
    assert err["details"]["path"].startswith(str(lib)), err
    (lib / "filler").unlink()
    assert snapshot(env.prefix) == before
    assert sorted(p.name for p in lib.iterdir()) == sorted(p.name for p in (tmp_path / "lib-copy").iterdir())


def test_no_space_after_the_swap_rolls_back_exit_2(txn_home, env350, mocker, capsys):
    """Injected (pytest-mock): the journal write that records the verified state fails with ENOSPC,
    the one write no real filesystem can be made to refuse on cue. Every change is rolled back."""
    from rocmbuild.cli import app as cli
    from rocmbuild.swap import journal

    env = env350("conda")
    before = snapshot(env.prefix)
    real = journal.write_state_file  # every journal write goes through the state dir's root

    def full(state_dir, rel, data):
        if json.loads(data).get("state") == "verified":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(state_dir, rel, data)

    mocker.patch.object(journal, "write_state_file", side_effect=full)
    code = cli.main(["apply", txn_home.recipe("mini"), "--env", str(env.prefix), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and out["error"]["type"] == "RolledBackFilesystemError", out
    assert "No space left on device" in out["error"]["message"]
    assert "every change was rolled back" in out["error"]["message"] and "free some space" in out["error"]["hint"]
    assert out["error"]["details"]["restored"]["ok"] is True
    assert snapshot(env.prefix) == before


def test_no_space_while_building_exit_3_target_untouched(monorepo, env350, tmp_path, mocker, capsys):
    """Injected (pytest-mock) at the manifest write of a fresh build: a write whose OSError names no
    file. The build side's error: exit 3, the target untouched."""
    from rocmbuild.cli import app as cli

    env = env350("conda")
    before, listing = snapshot(env.prefix), untouched(env.prefix)
    recipe = write_fixture_recipe(tmp_path / "recipes", "nospace", url=monorepo.url, ref="rocm-7.1.0", jobs=2)
    mocker.patch("rocmbuild.builder.pipeline.atomic_write_json",
                 side_effect=OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    code = cli.main(["apply", str(recipe), "--env", str(env.prefix), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 3 and out["error"]["type"] == "BuildFilesystemError", out
    assert "the target was not touched" in out["error"]["hint"]
    assert snapshot(env.prefix) == before and untouched(env.prefix) == listing


def test_no_space_in_the_cache_exit_3(monorepo, tmp_path, mounts):
    """$ROCMBUILD_HOME on a real tmpfs filled to the last byte: the fetch cannot write. Exit 3 (the
    build side), never exit 1."""
    disk = Path(mounts("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(tmp_path / "tiny")))
    home = disk / "home"
    home.mkdir()
    _fill(disk)
    recipe = write_fixture_recipe(tmp_path / "recipes", "tiny", url=monorepo.url, ref="rocm-7.1.0", jobs=2)
    r = rb("build", recipe, "--json", env={"ROCMBUILD_HOME": str(home)})
    assert r.returncode == 3, r.stderr
    assert "internal error" not in r.stderr
    assert "no space left" in json.dumps(_json(r)["error"]).lower(), r.stderr


# --------------------------------------------------------------------------------------------
# names and argument lists too long


@pytest.mark.parametrize("where", ["env", "recipe"])
def test_name_too_long_exit_2(txn_home, env350, tmp_path, where):
    env = env350("conda")
    before, listing = snapshot(env.prefix), untouched(env.prefix)
    if where == "env":
        args = ["apply", txn_home.recipe("mini"), "--env", str(tmp_path / LONG)]
    else:
        args = ["apply", str(tmp_path / f"{LONG}.toml"), "--env", str(env.prefix)]
    err = _refused(rb(*args, "--json"), 2, "SystemLimitError", "too long", "shorter",
                   "longest component has 300 bytes" if where == "env" else "longest component has 305 bytes")
    assert err["details"]["errno"] == "ENAMETOOLONG"
    assert snapshot(env.prefix) == before and untouched(env.prefix) == listing


def test_status_with_a_name_too_long_exit_2(tmp_path):
    _refused(rb("status", "--env", tmp_path / LONG / "env", "--json"), 2, "SystemLimitError", "too long")


def test_argument_list_too_long_exit_2(monorepo, env350, tmp_path):
    """A recipe define of 200 kB: cmake cannot be started (one argument may have 128 KiB)."""
    env = env350("conda")
    before, listing = snapshot(env.prefix), untouched(env.prefix)
    recipe = write_fixture_recipe(tmp_path / "recipes", "big", url=monorepo.url, ref="rocm-7.1.0",
                                  defines={"HUGE": "a" * 200_000})
    err = _refused(rb("apply", recipe, "--env", env.prefix, "--json"), 2, "SystemLimitError",
                   "cannot start cmake", "argument list is too long", "131072", "[build.defines]")
    assert err["details"]["errno"] == "E2BIG" and err["details"]["longest"] > 200_000
    assert snapshot(env.prefix) == before and untouched(env.prefix) == listing


# --------------------------------------------------------------------------------------------
# truncated archives


def _truncate(src: Path, dst: Path) -> str:
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])
    return hashlib.sha256(dst.read_bytes()).hexdigest()


def test_truncated_tarball_source_exit_3(tmp_path):
    full = tmp_path / "full.tar.gz"
    with tarfile.open(full, "w:gz") as tf:
        tf.add(MIOPEN_SRC, arcname="MIOpen-3.5.1")
        tf.add(Path(sys.executable).resolve(), arcname="MIOpen-3.5.1/ballast")  # enough bytes to cut
    cut = tmp_path / "cut.tar.gz"
    sha = _truncate(full, cut)  # the recipe's sha256 matches: the file was cut before it was hashed
    (tmp_path / "recipes").mkdir()
    recipe = tmp_path / "recipes" / "cut.toml"
    recipe.write_text(fixture_recipe(name="cut", tarball=str(cut), sha256=sha, ref=None, subdir=None))
    err = _refused(rb("build", recipe, "--json"), 3, "CorruptArchiveError", "truncated", "nothing was extracted",
                   "again")
    home = Path(os.environ["ROCMBUILD_HOME"])
    assert err["details"]["archive"] == str(home / "downloads" / sha)  # the checked copy, not a re-read
    src = home / "src"
    assert not src.exists() or not any(src.glob("tarball-*/*")), list(src.rglob("*"))[:5]


def test_truncated_bundle_exit_3_target_untouched(txn_home, env350, tmp_path):
    env = env350("conda")
    before, listing = snapshot(env.prefix), untouched(env.prefix)
    bundle = tmp_path / "mini.tar.gz"
    assert rb("export", txn_home.recipe("mini"), "-o", bundle).returncode == 0
    cut = tmp_path / "cut.tar.gz"
    _truncate(bundle, cut)
    _refused(rb("apply", "--artifact", cut, "--env", env.prefix, "--json"), 3, "CorruptArchiveError",
             "bundle", "truncated", "nothing was extracted")
    assert snapshot(env.prefix) == before and untouched(env.prefix) == listing
    assert not list((txn_home.home / "artifacts").glob(".tmp-import-*"))


# --------------------------------------------------------------------------------------------
# an unusable state path


@pytest.mark.parametrize("verb", ["apply", "rollback", "recover"])
def test_lock_that_is_a_directory_exit_2(txn_home, env350, verb):
    """apply; rollback of a committed apply; recover of an apply killed after its swap (which
    stays unrecovered, and says so, until the lock is usable again)."""
    env = env350("conda")
    if verb == "rollback":
        assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    if verb == "recover":
        r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, env={"ROCMBUILD_FAILPOINTS": "after-swap"})
        assert r.returncode == 137, r.stderr
    lock = env.prefix / ".rocmbuild" / "lock"
    lock.unlink(missing_ok=True)
    lock.mkdir(parents=True)
    (lock / "keep").write_text("something of the user's\n")
    before, listing = snapshot(env.prefix), untouched(env.prefix)
    args = {"apply": ["apply", txn_home.recipe("mini")], "rollback": ["rollback"], "recover": ["recover"]}[verb]
    err = _refused(rb(*args, "--env", env.prefix, "--json"), 2, "StatePathError",
                   str(lock), "is a directory", "nothing was changed", "mv ")
    assert err["details"]["path"] == str(lock)
    assert snapshot(env.prefix) == before and untouched(env.prefix) == listing
    assert (lock / "keep").read_text() == "something of the user's\n"
    shutil.rmtree(lock)  # moved out of the way: the same command works
    assert rb(*args, "--env", env.prefix).returncode == 0


def test_state_dir_that_is_a_file_exit_2(txn_home, env350):
    env = env350("conda")
    (env.prefix / ".rocmbuild").write_text("not a directory\n")
    before = snapshot(env.prefix)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 2 and "internal error" not in r.stderr, r.stderr
    err = _json(r)["error"]
    assert err["type"] in ("TargetError", "StatePathError") and ".rocmbuild is not a directory" in err["message"]
    assert snapshot(env.prefix) == before
    assert (env.prefix / ".rocmbuild").read_text() == "not a directory\n"
