"""The pieces of progress that need no build: reading a step line, saying a duration, and the
attempt logs (real files, links and renames in tmp_path)."""

from __future__ import annotations

import os

from rocmbuild import progress
from rocmbuild.build import logs


def test_ninja_gives_a_count_make_only_a_percent():
    s = progress.parse_step("[12/300] Building CXX object src/CMakeFiles/MIOpen.dir/foo.cpp.o")
    assert (s.done, s.total, s.percent, s.target) == (12, 300, 4.0, "Building CXX object src/CMakeFiles/MIOpen.dir/foo.cpp.o")
    s = progress.parse_step("[ 44%] Building CXX object src/x.o")
    assert (s.done, s.total, s.percent, s.target) == (None, None, 44.0, "Building CXX object src/x.o")
    assert progress.parse_step("gmake[2]: *** [src/x.dir/build.make:12: src/k.cpp.o] Error 1") is None
    assert progress.parse_step("-- Configuring done") is None


def test_durations_read_like_a_clock():
    assert progress.duration(3.24) == "3.2s"
    assert progress.duration(125) == "2m05s"
    assert progress.duration(2 * 3600 + 13 * 60 + 59) == "2h13m"


def test_the_eta_is_linear_and_unknown_before_the_first_step(monkeypatch):
    p = progress.Phase("build", "building x")
    assert p.eta() is None
    p.start -= 100  # 100 s in
    p.step = progress.parse_step("[25/100] Linking")
    assert 299 <= p.eta() <= 301


def test_each_attempt_has_its_own_log_and_the_link_follows(tmp_path):
    home, key = tmp_path / "home", "k" * 64
    first = logs.start(home, key, "# one")
    second = logs.start(home, key, "# two")  # the same second: a suffix, never the same file
    assert first != second and first.read_text() == "# one\n" and second.read_text() == "# two\n"
    link = logs.link_path(home, key)
    assert link.is_symlink() and os.readlink(link) == second.name
    assert logs.attempts(home, key) == sorted([first, second])
    assert logs.newest(home, key) == second.resolve() and logs.newest(home, "b" * 64) is None


def test_a_log_from_before_attempts_is_kept(tmp_path):
    home, key = tmp_path / "home", "a" * 64
    link = logs.link_path(home, key)
    link.parent.mkdir(parents=True)
    link.write_text("the old log\n")
    new = logs.start(home, key, "# new")
    assert (link.parent / f"{key}-earlier.log").read_text() == "the old log\n"
    assert link.resolve() == new
