"""The .deb reader (rocmbuild/sources/debarchive.py) against small packages the tests write byte by
byte: every compression dpkg uses, the same walls as tarballs (a member outside subdir, a link
out, a device), and hostile containers (a huge or truncated member, a bad header or size field,
no data.tar or two, wrong-typed fields, a control file that is not Debian's grammar). Every
refusal leaves nothing extracted and a canary outside untouched."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from rocmbuild.sources import debarchive, extract
from rocmbuild.errors import EXIT_BUILD, BuildFilesystemError, CorruptArchiveError, FetchError
from tests.support.debs import CONTROL, ar_member, good_members, tar_bytes, write_deb

CANARY = b"canary: must never change\n"
LIB = b"\x7fELF fixture bytes\n" * 100
TREE = [("./", "dir", None), ("./usr/", "dir", None), ("./usr/lib/", "dir", None),
        ("./usr/lib/x86_64-linux-gnu/", "dir", None),
        ("./usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0", "file", LIB),
        ("./usr/lib/x86_64-linux-gnu/libMIOpen.so.1", "symlink", "libMIOpen.so.1.0"),
        ("./usr/share/doc/libmiopen1/copyright", "file", b"fixture\n")]


@pytest.fixture
def fenced(tmp_path):
    """(where to extract, a check that nothing was extracted and the canaries are whole)."""
    (tmp_path / "flag").write_bytes(CANARY)
    dest = tmp_path / "out" / "tree"

    def untouched() -> None:
        assert not dest.exists()
        assert (tmp_path / "flag").read_bytes() == CANARY
        assert not (tmp_path / "out" / "flag").exists()
    return dest, untouched


@pytest.mark.parametrize("compression", ["xz", "zst", "gz", "bz2", None])
def test_every_data_compression_gives_the_tree_below_usr_and_the_control_fields(tmp_path, compression):
    deb = tmp_path / "libmiopen1_7.2.4+dfsg-1_amd64.deb"
    write_deb(deb, TREE, compression=compression)
    pkg = extract.safe_extract(deb, tmp_path / "t", subdir="usr")
    assert pkg == debarchive.Package("libmiopen1", "7.2.4+dfsg-1", "amd64")
    assert pkg.describe() == "Debian package libmiopen1 7.2.4+dfsg-1 (amd64)"
    lib = tmp_path / "t" / "lib" / "x86_64-linux-gnu"
    assert (lib / "libMIOpen.so.1.0").read_bytes() == LIB
    assert os.readlink(lib / "libMIOpen.so.1") == "libMIOpen.so.1.0"
    assert sorted(os.listdir(tmp_path / "t")) == ["lib", "share"]  # 'usr' is the subdir, not a top dir dropped


def test_the_format_is_told_by_the_bytes_and_subdir_empty_is_the_whole_root(tmp_path):
    deb = tmp_path / "package.tar.gz"  # a misleading name
    write_deb(deb, TREE)
    extract.safe_extract(deb, tmp_path / "t", subdir="")
    assert sorted(os.listdir(tmp_path / "t")) == ["usr"]  # a .deb is rooted at /: no top directory dropped


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")
@pytest.mark.parametrize("z", ["zstd", "xz", "gzip", "none"])
def test_a_package_dpkg_deb_builds_is_read(tmp_path, z):
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text("Package: libfixture1\nVersion: 1:2.3~rc1-0ubuntu1\n"
                                            "Architecture: arm64\nMaintainer: t <t@example.org>\nDescription: d\n")
    lib = root / "usr" / "lib" / "aarch64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libfixture.so.1.0").write_bytes(LIB)
    (lib / "libfixture.so.1").symlink_to("libfixture.so.1.0")
    deb = tmp_path / "x.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", f"-Z{z}", "--build", str(root), str(deb)],
                   check=True, capture_output=True)
    pkg = extract.safe_extract(deb, tmp_path / "t", subdir="usr")
    assert (pkg.name, pkg.version, pkg.architecture) == ("libfixture1", "1:2.3~rc1-0ubuntu1", "arm64")
    assert (tmp_path / "t" / "lib" / "aarch64-linux-gnu" / "libfixture.so.1.0").read_bytes() == LIB
    assert debarchive.read_package(deb) == pkg


# --------------------------------------------------------------------------------------------
# the walls of every archive, in a .deb's data tar

WALLS = [
    ([("./usr/lib/up", "symlink", "../../../../flag")], "subdir-or-whole", "outside the tree"),
    ([("./usr/lib/abs", "symlink", "/etc/passwd")], "subdir-or-whole", "absolute"),
    ([("./usr/../../flag", "file", b"x")], "subdir-or-whole", "'..'"),
    ([("./usr/dev", "chr", None)], "subdir-or-whole", "device or FIFO"),
    ([("./usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0", "file", b"again")], "subdir-or-whole", "duplicate"),
    ([("./usr/l", "symlink", ".."), ("./usr/l/flag", "file", b"x")], "subdir-or-whole", "goes through the symlink"),
    ([("./etc/secret", "file", b"s"), ("./usr/lib/x", "symlink", "../../etc/secret")], "subdir", "outside the tree"),
    ([("./etc/secret", "file", b"s"), ("./usr/lib/h", "hardlink", "./etc/secret")], "subdir", "hardlink"),
]


@pytest.mark.parametrize("extra,when,reason", WALLS, ids=[f"{r}-{i}" for i, (_, _, r) in enumerate(WALLS)])
def test_hostile_data_members_are_refused_as_in_a_tarball(tmp_path, fenced, extra, when, reason):
    deb = tmp_path / "evil.deb"
    write_deb(deb, TREE + extra)
    dest, untouched = fenced
    for subdir in ([None, "usr"] if when == "subdir-or-whole" else ["usr"]):
        with pytest.raises(FetchError) as ei:
            extract.safe_extract(deb, dest, subdir=subdir)
        assert reason in ei.value.message and "nothing was extracted" in ei.value.message, ei.value.message
        assert ei.value.exit_code == EXIT_BUILD
        untouched()


def test_a_link_leaving_the_subdir_is_fine_for_the_whole_package(tmp_path):
    deb = tmp_path / "w.deb"
    write_deb(deb, TREE + [("./etc/secret", "file", b"s"), ("./usr/lib/x", "symlink", "../../etc/secret")])
    extract.safe_extract(deb, tmp_path / "whole")
    assert (tmp_path / "whole" / "usr" / "lib" / "x").read_bytes() == b"s"


def test_a_subdir_the_package_lacks_is_named(tmp_path, fenced):
    deb = tmp_path / "p.deb"
    write_deb(deb, TREE)
    dest, untouched = fenced
    with pytest.raises(FetchError, match="nothing below 'opt/rocm'"):
        extract.safe_extract(deb, dest, subdir="opt/rocm")
    untouched()


def test_a_huge_data_member_that_does_not_fit_is_refused_before_a_byte_is_written(tmp_path, fenced, monkeypatch):
    """A 32 MiB file of zeros is a few KB of xz: a bomb in small. Refused against the free space
    of the extraction's filesystem (made small here: a full disk cannot be arranged in a test)."""
    deb = tmp_path / "bomb.deb"
    write_deb(deb, TREE + [("./usr/lib/zeros", "file", bytes(32 << 20))])
    assert deb.stat().st_size < 1 << 20
    real = os.fstatvfs

    class Small:
        f_bavail, f_frsize = 16, 1 << 20  # 16 MiB free

    monkeypatch.setattr(extract.os, "fstatvfs", lambda fd: Small if os.path.isdir(f"/proc/self/fd/{fd}") else real(fd))
    dest, untouched = fenced
    with pytest.raises(BuildFilesystemError) as ei:
        extract.safe_extract(deb, dest, subdir="usr")
    assert "no space" in ei.value.message and str((32 << 20) + len(LIB) + len(b"fixture\n")) in ei.value.message
    assert ei.value.exit_code == EXIT_BUILD
    untouched()


def test_a_sparse_member_is_refused(tmp_path, fenced):
    import io
    import lzma
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        ti = tarfile.TarInfo("./usr/lib/sparse")
        ti.size = 0
        tf.addfile(ti)
    raw = bytearray(buf.getvalue())
    raw[156:157] = tarfile.GNUTYPE_SPARSE  # an old-GNU sparse member, its checksum fixed below
    raw[148:156] = b" " * 8
    raw[148:156] = b"%06o\0 " % sum(raw[:512])
    members = good_members([])[:2] + [("data.tar.xz", lzma.compress(bytes(raw)))]
    deb = tmp_path / "s.deb"
    write_deb(deb, members=members)
    dest, untouched = fenced
    with pytest.raises(FetchError, match="sparse"):
        extract.safe_extract(deb, dest)
    untouched()


# --------------------------------------------------------------------------------------------
# hostile containers

def _members():
    return good_members(TREE)


def _raw(members) -> bytes:
    return b"!<arch>\n" + b"".join(ar_member(n, d) for n, d in members)


HOSTILE = {
    "huge size field, tiny file": (lambda: b"!<arch>\n" + ar_member("debian-binary", b"2.0\n", size="9999999999"),
                                   CorruptArchiveError, "declares 9999999999 bytes"),
    "truncated ar": (lambda: _raw(_members())[:-500], CorruptArchiveError, "only"),
    "a header cut short": (lambda: _raw(_members()[:1]) + b"control.tar.xz  12", CorruptArchiveError, "cut short"),
    "bad header trailer": (lambda: b"!<arch>\n" + ar_member("debian-binary", b"2.0\n", trailer=b"XX"),
                           FetchError, "bad header"),
    "size not a number": (lambda: b"!<arch>\n" + ar_member("debian-binary", b"2.0\n", size="4x"),
                          FetchError, "size field is not a decimal number"),
    "negative size": (lambda: b"!<arch>\n" + ar_member("debian-binary", b"2.0\n", size="-4"),
                      FetchError, "size field"),
    "mode not octal": (lambda: b"!<arch>\n" + ar_member("debian-binary", b"2.0\n", mode="100698"),
                       FetchError, "mode field is not a octal number"),
    "mtime not a number": (lambda: b"!<arch>\n" + ar_member("debian-binary", b"2.0\n", mtime="yesterday"),
                           FetchError, "mtime field"),
    "no data.tar": (lambda: _raw(_members()[:2]), FetchError, "no data.tar members"),
    "two data.tar": (lambda: _raw(_members() + [("data.tar.gz", tar_bytes(TREE, compression="gz"))]),
                     FetchError, "2 data.tar members"),
    "no debian-binary first": (lambda: _raw(_members()[1:]), FetchError, "first member is not debian-binary"),
    "an unknown member": (lambda: _raw(_members()[:2] + [("evil", b"x")] + _members()[2:]), FetchError,
                          "unexpected members"),
    "a path as a member name": (lambda: _raw([("../debian-bin", b"2.0\n")]), FetchError, "not a plain name"),
    "unknown data compression": (lambda: _raw(_members()[:2] + [("data.tar.lzma", b"x")]), FetchError,
                                 "unknown data member compression"),
    "data.tar not what its name says": (lambda: _raw(_members()[:2] + [("data.tar.xz", b"not xz at all")]),
                                        CorruptArchiveError, "cannot be read"),
    "control without Version": (lambda: _raw([("debian-binary", b"2.0\n"), ("control.tar.xz", tar_bytes(
        [("./control", "file", b"Package: x1\nArchitecture: amd64\n")])), _members()[2]]),
        FetchError, "no Version field"),
    "control with a path as Package": (lambda: _raw([("debian-binary", b"2.0\n"), ("control.tar.xz", tar_bytes(
        [("./control", "file", CONTROL.replace(b"libmiopen1", b"../../x"))])), _members()[2]]),
        FetchError, "Package field is not a Debian package"),
    "control.tar bomb": (lambda: _raw([("debian-binary", b"2.0\n"), ("control.tar.xz", tar_bytes(
        [("./pad", "file", bytes(debarchive.MAX_CONTROL + 1024)), ("./control", "file", CONTROL)])),
        _members()[2]]), FetchError, "larger than"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_containers_are_refused_with_nothing_extracted(tmp_path, fenced, name):
    make, error, words = HOSTILE[name]
    deb = tmp_path / "x.deb"
    deb.write_bytes(make())
    dest, untouched = fenced
    with pytest.raises(error) as ei:
        extract.safe_extract(deb, dest, subdir="usr")
    assert words in ei.value.message, ei.value.message
    assert ei.value.exit_code == EXIT_BUILD and "nothing was extracted" in ei.value.message
    assert ei.value.hint
    untouched()


def test_a_huge_size_field_is_judged_before_reading(tmp_path):
    """The header's claim is compared with the file's size: nothing of it is read or allocated."""
    deb = tmp_path / "h.deb"
    deb.write_bytes(b"!<arch>\n" + ar_member("data.tar", b"", size="9999999999"))
    with open(deb, "rb") as f, pytest.raises(debarchive.DebFormatError) as ei:
        debarchive.read_members(f, deb.stat().st_size)
    assert ei.value.truncated


def test_an_rpm_is_refused_naming_the_way_round(tmp_path, fenced):
    rpm = tmp_path / "miopen-hip-3.5.1.x86_64.rpm"
    rpm.write_bytes(debarchive.RPM_MAGIC + b"\x03\x00" + bytes(200))
    dest, untouched = fenced
    with pytest.raises(FetchError) as ei:
        extract.safe_extract(rpm, dest)
    assert "RPM" in ei.value.message and "rpm2cpio" in ei.value.hint and "file://" in ei.value.hint
    untouched()


# --------------------------------------------------------------------------------------------
# grammar

@pytest.mark.parametrize("spec,want", [("libmiopen1=7.2.4+dfsg-1", ("libmiopen1", "7.2.4+dfsg-1")),
                                       ("libmiopen1:amd64=6.4.3+dfsg-1+b1", ("libmiopen1:amd64", "6.4.3+dfsg-1+b1")),
                                       ("miopen-hip=1:3.5.1~rc1", ("miopen-hip", "1:3.5.1~rc1"))])
def test_apt_specs(spec, want):
    assert debarchive.apt_spec(spec) == want


@pytest.mark.parametrize("spec", ["libmiopen1", "libmiopen1=", "LibMIOpen=1", "../x=1", "x1=1 2", "x1=$(id)",
                                  "x1:Amd64=1", "-x=1"])
def test_bad_apt_specs(spec):
    with pytest.raises(ValueError):
        debarchive.apt_spec(spec)


def test_control_fields_take_the_first_of_each_and_ignore_the_rest():
    pkg = debarchive.parse_control(CONTROL + b"Version: 9.9\nDepends: libamdhip64-7 (>= 7.2)\n")
    assert pkg.to_json() == {"format": "deb", "name": "libmiopen1", "version": "7.2.4+dfsg-1",
                             "architecture": "amd64"}


def test_a_zstd_package_without_a_zstd_module_says_what_to_install(tmp_path, fenced, monkeypatch):
    deb = tmp_path / "z.deb"
    write_deb(deb, TREE, compression="zst")

    def missing():
        raise ImportError("No module named 'backports'")

    monkeypatch.setattr(debarchive, "_zstd", missing)
    dest, untouched = fenced
    with pytest.raises(FetchError) as ei:
        extract.safe_extract(deb, dest, subdir="usr")
    assert "no zstd module" in ei.value.message and "backports.zstd" in ei.value.hint
    untouched()


def test_a_hardlink_inside_the_subdir_is_kept_with_dpkgs_dot_slash_names(tmp_path):
    deb = tmp_path / "h.deb"
    write_deb(deb, TREE + [("./usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0.copy", "hardlink",
                            "./usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0")])
    extract.safe_extract(deb, tmp_path / "t", subdir="usr")
    lib = tmp_path / "t" / "lib" / "x86_64-linux-gnu"
    assert (lib / "libMIOpen.so.1.0.copy").read_bytes() == LIB
    assert os.stat(lib / "libMIOpen.so.1.0.copy").st_ino == os.stat(lib / "libMIOpen.so.1.0").st_ino
