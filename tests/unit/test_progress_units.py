"""The pieces of progress that need no build: reading a step line, saying a duration, and the
attempt logs (real files, links and renames in tmp_path)."""

from __future__ import annotations

import os

from rocmbuild import progress
from rocmbuild.builder import logs


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


def test_the_eta_follows_the_recent_rate_not_a_fast_start(monkeypatch):
    """The real MIOpen build's shape on ROCm 7.2 (docs/miopen.md): 113 of 561 steps (generated
    sources) in the first minute, then one compile every 30 s. 36 minutes in, a rate from the
    start promised about 1h20m; 448 - 70 = 378 steps at 30 s are left: over 3 hours."""
    clock = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(progress, "mode", lambda: "quiet")
    p = progress.Phase("build", "building MIOpen")
    for done in range(1, 114):  # the fast first minute
        clock[0] += 60 / 113
        p.moved(progress.parse_step(f"[{done}/561] Inlining kernels batch #{done}"))
    for done in range(114, 184):  # then the compiles, 30 s each
        clock[0] += 30
        p.moved(progress.parse_step(f"[{done}/561] Building CXX object src/x{done}.cpp.o"))
    left = (561 - 183) * 30
    from_start = (clock[0] - p.start) * (100 - p.step.percent) / p.step.percent
    assert from_start < left / 2  # what the old ETA said
    assert 0.9 * left <= p.eta() <= 1.1 * left
    clock[0] += 600  # ten minutes with no step (a long link): the window has moved, the ETA grows
    assert p.eta() > left


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
