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


def test_each_attempt_has_its_own_log_named_by_recipe_and_the_link_follows(tmp_path):
    home, key = tmp_path / "home", "c" * 64
    first = logs.start(home, key, "# one", "mini")
    second = logs.start(home, key, "# two", "mini")  # the same second: a suffix, never the same file
    assert first != second and first.parent == home / "logs" / "mini" and first.name.endswith(f"-{'c' * 16}.log")
    assert first.read_text() == f"# one\n# rocmbuild pid {os.getpid()}\n" and logs.writer(second) == os.getpid()
    link = logs.link_path(home, "mini")
    assert link.is_symlink() and os.readlink(link) == second.name
    assert logs.attempts(home, key) == [first, second] == logs.of_recipe(home, "mini")
    assert logs.newest(home, key) == second and logs.newest(home, "b" * 64) is None


def test_logs_of_an_older_release_are_still_read(tmp_path):
    home, key = tmp_path / "home", "a" * 64
    (home / "logs").mkdir(parents=True)
    old = home / "logs" / f"{key}-20240101T000000Z.log"
    old.write_text("# rocmbuild: fetch and build of mini (file:///x develop)\n$ cmake ...\n")
    (home / "logs" / f"{key}.log").symlink_to(old.name)
    assert logs.newest(home, key) == old and logs.of_recipe(home, "mini") == [old] and logs.of_recipe(home, "other") == []
    new = logs.start(home, key, "# rocmbuild build of mini at abc", "mini")
    assert logs.of_recipe(home, "mini") == [old, new] and logs.newest(home, key) == new
