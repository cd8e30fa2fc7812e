"""builder/reproducible.py and builder/rebuild.py without a compiler: flags, SOURCE_DATE_EPOCH, the key,
the comparison."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmbuild.builder import cmake, reproducible
from rocmbuild.store.cache import Tools
from rocmbuild.builder.rebuild import compare
from rocmbuild.store.manifest import FileEntry
from rocmbuild.errors import RecipeError
from rocmbuild.recipe.parsing import parse
from tests.support.recipes import fixture_recipe

TOOLS = Tools(cmake="cmake version 3.25.1", cc="cc: cc (Debian 12.2.0-14) 12.2.0",
              cxx="c++: c++ (Debian 12.2.0-14) 12.2.0")
DIRS = (Path("/h/src/k"), Path("/h/src/k/projects/miopen"), Path("/h/build/" + "f" * 64))


def recipe(tmp_path: Path, **kw):
    p = tmp_path / "mini.toml"
    p.write_text(fixture_recipe(**kw))
    return parse(p.read_text(), p)


@pytest.mark.parametrize("line, option", [
    ("cc: cc (Debian 12.2.0-14) 12.2.0", "-ffile-prefix-map"),
    ("g++: g++ (GCC) 7.5.0", "-fdebug-prefix-map"),
    ("gcc: gcc (Ubuntu 8.4.0-3ubuntu2) 8.4.0", "-ffile-prefix-map"),
    ("/opt/rocm/llvm/bin/clang++: AMD clang version 19.0.0git (https://github.com/RadeonOpenCompute/llvm-project)",
     "-ffile-prefix-map"),
    ("clang: Ubuntu clang version 9.0.1-12", "-fdebug-prefix-map"),
    ("icx: something else entirely", "-ffile-prefix-map"),
])
def test_the_map_option_follows_the_compiler_version(line, option):
    assert reproducible.map_option(line) == option


def test_maps_the_dirs_shortest_first_and_appends_to_the_recipes_flags(tmp_path):
    r = recipe(tmp_path, defines={"CMAKE_C_FLAGS": "-O1 -Wall", "ZZZ": "x"})
    s = reproducible.planned(r.build, DIRS, TOOLS)
    c = dict(s.flags)["CMAKE_C_FLAGS"].split()
    assert c == [f"-ffile-prefix-map={d}=." for d in DIRS]  # the longest (most specific) map last: it wins
    values = reproducible.flag_values(r.build, s, {"CFLAGS": "-ignored", "CXXFLAGS": "-g3"})
    assert values["CMAKE_C_FLAGS"].startswith("-O1 -Wall -ffile-prefix-map=")  # the recipe's own value kept
    assert values["CMAKE_CXX_FLAGS"].startswith("-g3 -ffile-prefix-map=")  # $CXXFLAGS, which cmake would read
    argv = cmake.configure_argv(r.build, DIRS[1], DIRS[2], None, flags=values)
    defines = [a for a in argv if a.startswith("-D")]
    assert defines.count(f"-DCMAKE_C_FLAGS:STRING={values['CMAKE_C_FLAGS']}") == 1
    assert not any(a == "-DCMAKE_C_FLAGS:STRING=-O1 -Wall" for a in argv)  # replaced in place, not twice
    assert f"-DCMAKE_CXX_FLAGS:STRING={values['CMAKE_CXX_FLAGS']}" in defines and "-DZZZ:STRING=x" in defines


def test_a_dir_a_shell_would_split_is_left_out():
    dirs = (Path("/h/src/k"), Path("/my home/build/x"), Path('/h/"q"'))
    assert reproducible.prefix_maps("-ffile-prefix-map", dirs) == "-ffile-prefix-map=/h/src/k=."


def test_reproducible_false_adds_nothing_and_changes_the_key(tmp_path):
    on, off = recipe(tmp_path), recipe(tmp_path, reproducible=False)
    assert reproducible.planned(off.build, DIRS, TOOLS) is None
    assert reproducible.flag_values(off.build, None, {"CFLAGS": "-O2"}) == {}
    assert cmake.configure_argv(off.build, DIRS[1], DIRS[2]) == cmake.configure_argv(on.build, DIRS[1], DIRS[2])
    assert "reproducible" not in on.canonical()["build"]  # the default: every earlier key stays
    assert on.canonical() != off.canonical()
    with pytest.raises(RecipeError, match="reproducible"):
        p = tmp_path / "bad.toml"
        p.write_text(fixture_recipe().replace("[source]", '[build]\nreproducible = "no"\n[source]', 1))
        parse(p.read_text(), p)


def test_source_date_epoch_from_the_archive_or_the_fallback_or_the_recipe(tmp_path, monkeypatch):
    archive = tmp_path / "src.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        for name, mtime in (("p/a.c", 1_000_000_000), ("p/b.c", 1_200_000_000), ("p/c.c", 1_100_000_000)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = 1, mtime
            tf.addfile(info, io.BytesIO(b"x"))
    monkeypatch.setattr(reproducible, "download_path", lambda sha, home: archive)
    co = SimpleNamespace(root=tmp_path, source_dir=tmp_path, commit=None, tarball_sha256="a" * 64)
    assert reproducible.source_date_epoch(co, tmp_path)[0] == 1_200_000_000
    co = SimpleNamespace(root=tmp_path, source_dir=tmp_path, commit=None, tarball_sha256=None)
    assert reproducible.source_date_epoch(co, tmp_path)[0] == reproducible.FALLBACK_EPOCH
    r = recipe(tmp_path, env={"SOURCE_DATE_EPOCH": "42"})
    s = reproducible.settings(r.build, co, home=tmp_path, build_dir=DIRS[2], tools=TOOLS)
    assert s.epoch is None and s.env() == {}  # the recipe's own value is what the build sees


def test_compare_names_every_differing_path():
    def f(path, sha, size=3):
        return FileEntry(path, "file", size, sha)
    cached = (f("a", "1"), f("b", "2"), FileEntry("l", "link", target="a"), f("gone", "9"))
    rebuilt = (f("a", "1"), f("b", "3"), FileEntry("l", "link", target="b"), f("new", "8"))
    diffs = compare(cached, rebuilt)
    assert [d.path for d in diffs] == ["b", "gone", "l", "new"]
    b = diffs[0].to_json()
    assert b == {"path": "b", "cached": {"type": "file", "target": None, "sha256": "2", "size": 3},
                 "rebuilt": {"type": "file", "target": None, "sha256": "3", "size": 3}}
    assert diffs[1].rebuilt is None and diffs[3].cached is None
    assert compare(cached, cached) == ()
