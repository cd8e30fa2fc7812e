"""Before each configure the tree's CMakeCache.txt is made to agree with this configure's command
line (rocmbuild.builder.retry.reconcile): a kept cache must not carry a setting this run does not ask for."""

from __future__ import annotations

import json

from rocmbuild.builder import retry

CACHE = """# This is the CMakeCache file.

//Flags used by the linker during the creation of shared libraries
// during all build types.
CMAKE_SHARED_LINKER_FLAGS:STRING=-Wl,--no-such-flag

//No help, variable specified on the command line.
MIOPEN_FIXTURE_EXTRA_SOURCES:STRING=12

//ADVANCED property for variable: CMAKE_SHARED_LINKER_FLAGS
CMAKE_SHARED_LINKER_FLAGS-ADVANCED:INTERNAL=1
"""
BEFORE = ["cmake", "-S", "s", "-B", "b", "-DCMAKE_SHARED_LINKER_FLAGS:STRING=-Wl,--no-such-flag",
          "-DMIOPEN_FIXTURE_EXTRA_SOURCES:STRING=12"]


def _tree(tmp_path, env: dict[str, str]):
    (tmp_path / "CMakeCache.txt").write_text(CACHE)
    (tmp_path / retry.CONFIGURED).write_text(json.dumps(
        {"defines": ["CMAKE_SHARED_LINKER_FLAGS", "MIOPEN_FIXTURE_EXTRA_SOURCES"], "env": env}))
    return tmp_path


def test_a_define_no_longer_given_loses_its_entry_and_its_help_lines(tmp_path):
    tree = _tree(tmp_path, {})
    retry.reconcile(tree, ["cmake", "-DMIOPEN_FIXTURE_EXTRA_SOURCES:STRING=12"], {})
    text = (tree / "CMakeCache.txt").read_text()
    assert "CMAKE_SHARED_LINKER_FLAGS" not in text and "Flags used by the linker" not in text
    assert "MIOPEN_FIXTURE_EXTRA_SOURCES:STRING=12" in text and "//No help, variable specified" in text
    assert json.loads((tree / retry.CONFIGURED).read_text()) == {"defines": ["MIOPEN_FIXTURE_EXTRA_SOURCES"], "env": {}}


def test_the_same_command_line_keeps_the_cache_as_it_is(tmp_path):
    tree = _tree(tmp_path, {"CC": "gcc"})
    retry.reconcile(tree, BEFORE, {"CC": "gcc"})
    assert (tree / "CMakeCache.txt").read_text() == CACHE


def test_a_changed_environment_or_no_record_drops_the_cache(tmp_path):
    (tmp_path / "a").mkdir()
    tree = _tree(tmp_path / "a", {"CC": "gcc"})
    retry.reconcile(tree, BEFORE, {"CC": "clang"})  # an existing cache would ignore the new CC
    assert not (tree / "CMakeCache.txt").exists()
    other = tmp_path / "b"
    other.mkdir()
    (other / "CMakeCache.txt").write_text(CACHE)  # made by an older rocmbuild: how, unknown
    retry.reconcile(other, BEFORE, {})
    assert not (other / "CMakeCache.txt").exists() and (other / retry.CONFIGURED).is_file()
