"""``needed.Mapped``: the mapped libraries by SONAME, read lazily, give the answers of reading every
file's DT_SONAME up front; a needed name found by a file's name reads that file only; a file whose
name is not its SONAME is still found. Real ELF files of this machine (the system's libraries)."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import pytest

from rocmbuild.environment import needed, probe
from rocmbuild.environment.probe import LoadedLibrary, soname_from_name
from rocmbuild.store.artifact import read_soname


def _loaded(path: str) -> LoadedLibrary:
    st = os.stat(path)
    return LoadedLibrary(path=path, kind="", dev=st.st_dev, inode=st.st_ino)


def _system_libs(limit: int = 60) -> list[LoadedLibrary]:
    found = []
    for p in sorted(glob.glob("/usr/lib/x86_64-linux-gnu/lib*.so.*") + glob.glob("/usr/lib/aarch64-linux-gnu/lib*.so.*")):
        if os.path.isfile(p) and not os.path.islink(p) and read_soname(Path(p)):
            found.append(_loaded(p))
        if len(found) == limit:
            break
    if len(found) < 10:
        pytest.skip("too few shared libraries under /usr/lib here")
    return found


def _eager(libs: list[LoadedLibrary]) -> dict[str, LoadedLibrary]:
    out: dict[str, LoadedLibrary] = {}
    for lib in libs:
        out.setdefault(lib.soname, lib)
    return out


def test_the_lazy_index_answers_as_the_eager_one(tmp_path):
    libs = _system_libs()
    odd = tmp_path / "libodd-name.so.9"  # a file whose name is not its SONAME
    shutil.copyfile(libs[0].path, odd)
    libs.append(_loaded(str(odd)))
    eager = _eager(libs)
    names = set(eager) | {soname_from_name(os.path.basename(lib.path)) for lib in libs}
    names |= {f"{needed.stem(n)}.so.999" for n in list(eager)[:10]} | {"libnothere.so.1", "libodd-name.so.9"}
    for name in sorted(names):
        mapped = needed.Mapped(libs)
        assert mapped.has(name) == (name in eager), name
    eager_stems: dict[str, list[str]] = {}
    for name in eager:
        eager_stems.setdefault(needed.stem(name), []).append(name)
    assert needed.Mapped(libs).by_stem() == eager_stems
    assert needed.Mapped(libs).by_soname() == eager


def test_a_name_found_by_its_files_name_reads_only_that_file(mocker):
    libs = _system_libs()
    target = next(lib for lib in libs if soname_from_name(os.path.basename(lib.path)) == lib.soname)
    name = target.soname
    spy = mocker.spy(probe, "read_soname")
    assert needed.Mapped(libs).has(name)
    assert spy.call_count <= sum(soname_from_name(os.path.basename(lib.path)) == name for lib in libs)
    spy.reset_mock()
    assert not needed.Mapped(libs).has("libnothere.so.1")
    assert spy.call_count == len(libs)  # a name found nowhere: every file read, as before


def test_a_file_whose_name_is_not_its_soname_is_still_found(tmp_path):
    libs = _system_libs(20)
    real = libs[0]
    renamed = tmp_path / "libsomething-else.so.3"
    shutil.copyfile(real.path, renamed)
    only = [_loaded(str(renamed))]
    assert needed.Mapped(only).has(real.soname)  # its SONAME, not its name
    assert not needed.Mapped(only).has("libsomething-else.so.3")
