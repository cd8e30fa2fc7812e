"""A name matching the library's glob that is no file and no link (a directory, a FIFO, a socket)
cannot be moved into a transaction's backups (a backup is a hardlink): ``--move-strays`` refuses
it while planning, exit 2, naming the path, what it is and what to do, the target unchanged --
never an ``IsADirectoryError`` at swap time reported as "verification failed" (issue 26, class 4).

Real venvs, the session's real artifacts, real ``python -m rocmbuild`` processes; a canary file
outside every root stays byte-identical with one link.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.support.cli import rb
from tests.support.snapshots import inodes, listing, snapshot

pytestmark = pytest.mark.slow

CANARY = b"outside every root\n"
FMT = {"directory": stat.S_IFDIR, "FIFO": stat.S_IFIFO, "socket": stat.S_IFSOCK}


def _special(path: Path, kind: str) -> str:
    """Make ``path`` a directory, a FIFO or a socket inode; the word the refusal uses for it."""
    if kind == "directory":
        path.mkdir()
        (path / "inside").write_bytes(b"x")
    elif kind == "FIFO":
        os.mkfifo(path)
    else:  # a socket inode, without the 108-byte limit of bind()
        os.mknod(path, 0o644 | stat.S_IFSOCK)
    return kind


def _canary(tmp_path: Path) -> Path:
    c = tmp_path / "canary"
    c.write_bytes(CANARY)
    return c


def _canary_intact(c: Path) -> None:
    assert c.read_bytes() == CANARY and os.lstat(c).st_nlink == 1


@pytest.mark.parametrize("kind", ["directory", "FIFO", "socket"])
def test_move_strays_refuses_a_stray_that_is_no_file_at_plan_time(txn_home, target_env, tmp_path, kind):
    env = target_env("3.5.0", layout="wheel", compile_version="3.5.1")
    stray = env.libfile.parent / "libMIOpen.so.dir"  # matches libMIOpen.so* beside torch/lib/libMIOpen.so
    word = _special(stray, kind)
    canary = _canary(tmp_path)
    before, ids, whole = snapshot(env.prefix), inodes(env.prefix), listing(env.prefix)
    for extra in (("--dry-run",), ()):
        r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--move-strays", *extra)
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert str(stray) in r.stderr and f"is a {word}" in r.stderr, r.stderr
        assert "verification failed" not in r.stderr and "internal error" not in r.stderr
        assert "move it out of the library's directory" in r.stderr  # what to do
        assert snapshot(env.prefix) == before and inodes(env.prefix) == ids
        assert listing(env.prefix) == whole  # no state dir, no backup, no temp
    _canary_intact(canary)
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix)  # without the flag: only a note
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert f"stray {stray}: libMIOpen.so.dir ({word})" in out, out
    assert os.path.lexists(stray) and stat.S_IFMT(os.lstat(stray).st_mode) == FMT[kind]
    _canary_intact(canary)


def test_a_therock_dir_holding_a_stray_directory_is_refused_with_a_hint_that_works(txn_home, therock_env, tmp_path):
    """In TheRock's lib dir a stray is refused anyway; for a directory the hint must not send the
    user to ``--move-strays`` (which cannot move it)."""
    env = therock_env("3.5.0", compile_version="3.5.1")
    stray = env.libfile.parent / "libMIOpen.so.1.d"
    _special(stray, "directory")
    canary = _canary(tmp_path)
    before, whole = snapshot(env.prefix), listing(env.prefix)
    for extra in ((), ("--move-strays",)):
        r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, *extra)
        assert r.returncode == 2, r.stderr
        assert str(stray) in r.stderr and "is a directory" in r.stderr
        assert "move it out of the library's directory" in r.stderr
        assert snapshot(env.prefix) == before and listing(env.prefix) == whole
    _canary_intact(canary)
