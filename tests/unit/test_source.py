"""Pure helpers of rocmbuild.sources.source, .git, .patches and .archive (no git, no network)."""

from __future__ import annotations

import dataclasses
import tarfile
from pathlib import Path

import pytest

from rocmbuild.sources import archive, git, patches, source
from rocmbuild.fs.disk import sha256_file
from rocmbuild.errors import RecipeError
from rocmbuild import recipe as recipe_mod

SHA_A = "a" * 40
SHA_B = "b" * 40
SHA_T = "c" * 40  # an annotated tag object
SHA_C = "ab" + "c" * 38


def test_normalize_url(tmp_path):
    assert git.normalize_url("https://github.com/ROCm/rocm-libraries.git") == "https://github.com/ROCm/rocm-libraries.git"
    assert git.normalize_url("file:///srv/git/x") == "file:///srv/git/x"
    assert git.normalize_url("ssh://git@host/x.git") == "ssh://git@host/x.git"
    assert git.normalize_url("git@github.com:ROCm/rocm-libraries.git") == "git@github.com:ROCm/rocm-libraries.git"
    assert git.normalize_url("/srv/git/rocm libraries") == "file:///srv/git/rocm%20libraries"
    assert git.normalize_url("repo/../mirror", cwd=tmp_path) == (tmp_path / "mirror").as_uri()
    assert git.normalize_url("~/x").startswith("file:///") and "~" not in git.normalize_url("~/x")


def test_cache_key_is_stable_and_distinct():
    a = git.remote_key("https://github.com/ROCm/rocm-libraries.git")
    assert a == git.remote_key("https://github.com/ROCm/rocm-libraries.git")
    assert len(a) == 16 and int(a, 16) >= 0
    assert a != git.remote_key("https://github.com/ROCm/MIOpen.git")


def test_is_full_sha():
    assert git.is_full_sha(SHA_A)
    assert not git.is_full_sha(SHA_A[:39])
    assert not git.is_full_sha("develop")
    assert not git.is_full_sha(None)
    assert not git.is_full_sha("A" * 40)  # callers lower-case first


LS_REMOTE = f"""{SHA_A}\tHEAD
{SHA_A}\trefs/heads/develop
{SHA_B}\trefs/heads/release/rocm-rel-7.0
{SHA_T}\trefs/tags/rocm-7.1.0
{SHA_C}\trefs/tags/rocm-7.1.0^{{}}
{SHA_B}\trefs/tags/develop
not a line
"""


def test_parse_ls_remote_peels_annotated_tags():
    refs = git.parse_ls_remote(LS_REMOTE)
    assert refs["HEAD"] == SHA_A
    assert refs["refs/heads/release/rocm-rel-7.0"] == SHA_B
    assert refs["refs/tags/rocm-7.1.0"] == SHA_C  # the commit, not the tag object
    assert "refs/tags/rocm-7.1.0^{}" not in refs
    assert len(refs) == 5


def test_match_ref():
    refs = git.parse_ls_remote(LS_REMOTE)
    assert git.match_ref(None, refs) == SHA_A
    assert git.match_ref("HEAD", refs) == SHA_A
    assert git.match_ref("release/rocm-rel-7.0", refs) == SHA_B
    assert git.match_ref("refs/heads/develop", refs) == SHA_A
    assert git.match_ref("develop", refs) == SHA_B  # tags win, as in git's DWIM
    assert git.match_ref("rocm-7.1.0", refs) == SHA_C
    assert git.match_ref("bbbbbbb", refs) == SHA_B  # short sha of a tip
    assert git.match_ref("abcc", refs) == SHA_C
    assert git.match_ref("aaaa", refs) == SHA_A
    assert git.match_ref("dddddddd", refs) is None  # not a tip: needs history
    assert git.match_ref("nope", refs) is None
    assert git.match_ref("e" * 40, refs) == "e" * 40


def test_match_ref_ambiguous_short_sha():
    refs = {"refs/heads/a": "abc1" + "0" * 36, "refs/heads/b": "abc2" + "0" * 36}
    assert git.match_ref("abc", refs) is None  # too short anyway
    assert git.match_ref("abc1", refs) == "abc1" + "0" * 36
    refs["refs/heads/c"] = "abc1" + "1" * 36
    assert git.match_ref("abc1", refs) is None


def test_describe_refs():
    refs = git.parse_ls_remote(LS_REMOTE)
    text = git.describe_refs(refs)
    assert "branches: develop, release/rocm-rel-7.0" in text
    assert "tags:" in text and "rocm-7.1.0" in text
    many = {f"refs/heads/b{i:02d}": SHA_A for i in range(20)}
    assert "(+12 more)" in git.describe_refs(many)
    assert git.describe_refs({}) == "the remote has no branches or tags"


def _m(name, type_=tarfile.REGTYPE, linkname=""):
    m = tarfile.TarInfo(name)
    m.type = type_
    m.linkname = linkname
    return m


@pytest.mark.parametrize(
    "member, expected",
    [
        (_m("MIOpen/src/a.c"), None),
        (_m("MIOpen", tarfile.DIRTYPE), None),
        (_m("./MIOpen/x"), None),
        (_m("MIOpen/lnk", tarfile.SYMTYPE, "src/a.c"), None),
        (_m("MIOpen/sub/lnk", tarfile.SYMTYPE, "../src/a.c"), None),
        (_m("MIOpen/hard", tarfile.LNKTYPE, "MIOpen/src/a.c"), None),
        (_m("../evil"), "'..'"),
        (_m("a/../../evil"), "'..'"),
        (_m("/etc/passwd"), "absolute"),
        (_m("lnk", tarfile.SYMTYPE, "../outside"), "outside"),
        (_m("a/b/lnk", tarfile.SYMTYPE, "../../../x"), "outside"),
        (_m("lnk", tarfile.SYMTYPE, "/etc/passwd"), "absolute"),
        (_m("hard", tarfile.LNKTYPE, "../x"), "outside"),
        (_m("hard", tarfile.LNKTYPE, "/etc/passwd"), "outside"),
        (_m("dev", tarfile.CHRTYPE), "device"),
        (_m("blk", tarfile.BLKTYPE), "device"),
        (_m("fifo", tarfile.FIFOTYPE), "FIFO"),
    ],
)
def test_unsafe_member(member, expected):
    why = archive.unsafe_member(member)
    if expected is None:
        assert why is None
    else:
        assert why is not None and expected in why


def test_failing_file_from_git_apply_output():
    err = "error: patch failed: projects/miopen/src/miopen.c:22\nerror: projects/miopen/src/miopen.c: patch does not apply"
    assert patches.failing_file(err) == "projects/miopen/src/miopen.c"
    assert patches.failing_file("error: src/gone.c: No such file or directory") == "src/gone.c"
    assert patches.failing_file("something else") is None


def test_file_sha256(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"abc")
    assert sha256_file(f) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def _recipe(tmp_path, version_line: str | None):
    text = '[source]\ngit = "https://example.invalid/x.git"\n' + (version_line or "") + "\n"
    path = tmp_path / "r.toml"
    path.write_text(text)
    return recipe_mod.parse(text, path)


def test_read_version(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text("x\nrocm_setup_version(VERSION 3.6.0)\nproject(MIOpen)\n")
    r = _recipe(tmp_path, "version = { file = \"CMakeLists.txt\", regex = '^rocm_setup_version\\(VERSION ([0-9.]+)' }")
    assert source.read_version(r, tmp_path) == "3.6.0"  # multiline: ^ matches at line starts
    assert source.read_version(_recipe(tmp_path, None), tmp_path) is None


def test_read_version_errors(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text("project(MIOpen)\n")
    r = _recipe(tmp_path, "version = { file = \"CMakeLists.txt\", regex = 'VERSION ([0-9.]+)' }")
    with pytest.raises(RecipeError) as ei:
        source.read_version(r, tmp_path)
    assert ei.value.exit_code == 2
    assert str(r.path) in ei.value.message and "source.version" in ei.value.message
    assert "VERSION ([0-9.]+)" in ei.value.message and "CMakeLists.txt" in ei.value.message
    r = _recipe(tmp_path, "version = { file = \"nope/VERSION\", regex = '([0-9.]+)' }")
    with pytest.raises(RecipeError) as ei:
        source.read_version(r, tmp_path)
    assert "nope/VERSION" in ei.value.message and ei.value.details["key"] == "source.version"


def test_checkout_is_frozen(tmp_path):
    co = source.Checkout(Path("/r"), Path("/r"), "u", None, None, None, (), ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        co.commit = "x"  # type: ignore[misc]
    assert co.tarball_sha256 is None
