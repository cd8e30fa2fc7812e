"""Safe extraction on real archives: every hostile member is refused with nothing written, at
every door (a ``[source] tarball`` at build time, ``apply --artifact``, ``apply --artifact
--dry-run``), and canaries outside every root stay byte-identical."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from rocmbuild.sources import extract
from rocmbuild.errors import EXIT_BUILD, FetchError
from tests.support.cli import rb
from tests.support.recipes import fixture_recipe
from tests.support.snapshots import snapshot
from tests.support.tars import bundle_entries, cve_2025_4517, entry, write_tar
from tests.support.snapshots import canaries


def assert_intact(expected: dict[Path, bytes]) -> None:
    for path, data in expected.items():
        assert path.read_bytes() == data, f"{path} was changed"
        assert not (path.parent / "newfile").exists(), f"a file was written beside {path}"


def extract_refused(tmp_path: Path, entries, reason: str) -> FetchError:
    tb = tmp_path / "evil.tar"
    write_tar(tb, entries)
    dest = tmp_path / "out" / "tree"
    guard = canaries(tmp_path, tmp_path / "out")
    with pytest.raises(FetchError) as ei:
        extract.safe_extract(tb, dest)
    assert ei.value.exit_code == EXIT_BUILD
    assert reason in ei.value.message and "nothing was extracted" in ei.value.message
    assert not dest.exists()  # the whole extraction dir is gone
    assert_intact(guard)
    return ei.value


# --------------------------------------------------------------------------------------------
# the PATH_MAX symlink chain (CVE-2025-4517), at every door


def test_cve_2025_4517_fools_realpath_but_not_us(tmp_path):
    """The chain really is the attack: lexically and by Python's realpath it stays inside."""
    dest = tmp_path / "x"
    chain = cve_2025_4517()
    escape = next(m for m, _ in chain if m.name == "escape")
    assert not any(extract.unsafe_member(m) for m, _ in chain)  # the lexical checks pass every member
    expanded = dest.joinpath(*["d" * 247] * 16, escape.linkname.split("/")[-2])  # each letter is a dir
    assert len(str(expanded)) > os.pathconf("/", "PC_PATH_MAX")  # past PATH_MAX once its links expand
    err = extract_refused(tmp_path, chain, "goes through the symlink a")
    assert err.details["reason"] and err.details["member"].startswith("a/b/c")


def test_cve_chain_as_a_source_tarball_is_refused_at_build(tmp_path):
    home = tmp_path / "home"
    tb = tmp_path / "evil.tar.gz"
    sha = write_tar(tb, [entry("MIOpen-3.5.1/CMakeLists.txt", data=b"project(x)\n")] + cve_2025_4517())
    guard = canaries(home / "src", tmp_path)
    recipe = tmp_path / "evil.toml"
    recipe.write_text(fixture_recipe(name="evil", tarball=str(tb), sha256=sha, ref=None, subdir=None, version=None,
                                     verify=None))
    r = rb("build", str(recipe), "--json", env={"ROCMBUILD_HOME": str(home)})
    assert r.returncode == EXIT_BUILD, r.stderr
    assert "goes through the symlink a" in r.stdout and "nothing was extracted" in r.stdout
    assert_intact(guard)
    assert not [p for p in (home / "src").iterdir() if p.name.startswith("tarball-") and not p.name.endswith(".lock")]
    assert not (home / "artifacts").exists() or not list((home / "artifacts").iterdir())


# each lexically inside the tree (so the manifest's own path checks pass), together leaving it:
# ``b/c`` resolves to ``x``, so ``a`` -> ``x/../../z``, above the tree
_CHAIN = [entry("a", "symlink", link="b/c/../../z"), entry("b", "dir"), entry("b/c", "symlink", link="../x")]
BUNDLES = {
    # the PATH_MAX chain with no manifest: refused by the first header, before any model is built
    "cve-no-manifest": (lambda: cve_2025_4517("rocmbuild-artifact/"), "a bundle's manifest is its first member"),
    # a manifest that lists a link chain: the headers' model of the tree refuses it
    "listed-chain": (lambda: bundle_entries(_CHAIN), "leaving the tree"),
}


@pytest.fixture(params=sorted(BUNDLES))
def evil_bundle(request, tmp_path) -> tuple[Path, str]:
    make, reason = BUNDLES[request.param]
    bundle = tmp_path / "evil-bundle.tar.gz"
    write_tar(bundle, make())
    return bundle, reason


def test_cve_chain_as_a_bundle_is_refused_at_apply(tmp_path, target_env, evil_bundle):
    evil_bundle, reason = evil_bundle
    env = target_env("3.5.0", compile_version="3.5.0")
    before = snapshot(env.prefix)
    home = tmp_path / "home"
    guard = canaries(home / "artifacts", tmp_path)
    r = rb("apply", "--artifact", str(evil_bundle), "--env", str(env.prefix), "--json",
           env={"ROCMBUILD_HOME": str(home)})
    assert r.returncode == EXIT_BUILD, r.stderr
    assert "evil-bundle.tar.gz" in r.stdout and "nothing was extracted" in r.stdout and reason in r.stdout
    assert_intact(guard)
    assert sorted(p.name for p in (home / "artifacts").iterdir()) == ["flag"]  # no .tmp-import left
    assert snapshot(env.prefix) == before and not (env.prefix / ".rocmbuild").exists()


def test_cve_chain_bundle_dry_run_extracts_nothing(tmp_path, target_env, evil_bundle):
    evil_bundle, reason = evil_bundle
    env = target_env("3.5.0", compile_version="3.5.0")
    before = snapshot(env.prefix)
    home, tmpdir = tmp_path / "home", tmp_path / "tmpdir"
    tmpdir.mkdir()
    guard = canaries(tmp_path)
    r = rb("apply", "--artifact", str(evil_bundle), "--env", str(env.prefix), "--dry-run", "--json",
           env={"ROCMBUILD_HOME": str(home), "TMPDIR": str(tmpdir)})
    assert r.returncode == EXIT_BUILD, r.stderr
    assert reason in r.stdout and "nothing was extracted" in r.stdout
    assert_intact(guard)
    assert list(tmpdir.iterdir()) == []  # no temp dir at all, not even one removed afterwards
    assert not (home / "artifacts").exists() and not (home / "downloads").exists()
    assert snapshot(env.prefix) == before


# --------------------------------------------------------------------------------------------
# each hostile member, straight at the extractor


@pytest.mark.parametrize("entries, reason", [
    ([entry("../flag", data=b"x")], "'..'"),
    ([entry("ok/../../flag", data=b"x")], "'..'"),
    ([entry(f"{'/' * 2}tmp/rocmbuild-i9-abs", data=b"x")], "absolute"),
    ([entry("dev", "chr")], "device"),
    ([entry("fifo", "fifo")], "FIFO"),
    # a symlink chain: each link lexically inside, together they climb out
    ([entry("sub", "dir"), entry("sub/up", "symlink", link=".."), entry("out", "symlink", link="sub/up/..")],
     "leaving the tree"),
    ([entry("a", "symlink", link="b/c/../.."), entry("b", "dir"), entry("b/c", "symlink", link="../x")],
     "leaving the tree"),
    ([entry("a", "symlink", link="b"), entry("b", "symlink", link="a")], "loop"),
    # a member through a symlinked directory (even one that stays inside)
    ([entry("real", "dir"), entry("alias", "symlink", link="real"), entry("alias/f", data=b"x")],
     "goes through the symlink alias"),
    ([entry("up", "symlink", link="."), entry("up/flag", data=b"x")], "goes through the symlink up"),
    # hardlinks: only to a regular file extracted before
    ([entry("sub", "dir"), entry("sub/up", "symlink", link=".."), entry("esc", "symlink", link="sub/up/.."),
      entry("h", "hardlink", link="esc/flag")], "not a file extracted before"),
    ([entry("h", "hardlink", link="later"), entry("later", data=b"x")], "not a file extracted before"),
    ([entry("l", "symlink", link="f"), entry("f", data=b"x"), entry("h", "hardlink", link="l")],
     "not a file extracted before"),
    ([entry("h", "hardlink", link="sub/../f")], "not a file extracted before"),
    # duplicates that would replace something
    ([entry("f", data=b"one"), entry("f", data=b"two")], "duplicate"),
    ([entry("f", "symlink", link="g"), entry("f", data=b"x")], "duplicate"),
    ([entry("f", data=b"x"), entry("f", "dir")], "duplicate"),
    ([entry("f", data=b"x"), entry("f/g", data=b"x")], "goes through the file f"),
])
def test_hostile_members_are_refused(tmp_path, entries, reason):
    extract_refused(tmp_path, entries, reason)
    assert not Path("/tmp/rocmbuild-i9-abs").exists()


def test_a_symlink_pointing_outside_by_its_own_text(tmp_path):
    extract_refused(tmp_path, [entry("lnk", "symlink", link="../out/flag")], "outside")
    extract_refused(tmp_path, [entry("lnk", "symlink", link="/etc/passwd")], "absolute")


def test_honest_archive_extracts_with_safe_modes(tmp_path):
    big = os.urandom(3 << 20)  # streamed in chunks
    entries = [
        entry("./", "dir"),
        entry("top", "dir", mode=0o2775),
        entry("top/bin/tool", data=b"#!/bin/sh\n", mode=0o4755),  # setuid dropped, exec kept
        entry("top/data", data=big, mode=0o666),
        entry("top/same", "hardlink", link="top/data"),
        entry("top/lib", "dir"),
        entry("top/lib/libx.so.1.0", data=b"ELF", mode=0o755),
        entry("top/lib/libx.so.1", "symlink", link="libx.so.1.0"),
        entry("top/lib/libx.so", "symlink", link="libx.so.1"),  # a chain inside the tree
        entry("top/alias", "symlink", link="lib/../bin"),
        entry("top/dangling", "symlink", link="not/there"),
        entry("top/lib", "dir"),  # a directory twice is fine
    ]
    tb = tmp_path / "ok.tar.gz"
    write_tar(tb, entries)
    dest = tmp_path / "tree"
    extract.safe_extract(tb, dest)
    top = dest / "top"
    assert (top / "data").read_bytes() == big and os.path.samefile(top / "data", top / "same")
    assert stat.S_IMODE((top / "bin" / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((top / "data").stat().st_mode) == 0o644  # no group/other write
    assert stat.S_IMODE(top.stat().st_mode) == 0o755  # no setgid
    assert (top / "lib" / "libx.so").resolve() == (top / "lib" / "libx.so.1.0").resolve()
    assert (top / "alias" / "tool").read_bytes() == b"#!/bin/sh\n"
    assert (top / "bin").stat().st_mode & 0o700 == 0o700  # an implicit parent, created
    assert (top / "data").stat().st_mtime == 1_700_000_000


def test_a_truncated_archive_is_a_fetch_error(tmp_path):
    tb = tmp_path / "ok.tar.gz"
    write_tar(tb, [entry("f", data=os.urandom(1 << 20))])
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(tb.read_bytes()[:-2000])
    with pytest.raises(FetchError) as ei:
        extract.safe_extract(cut, tmp_path / "tree")
    assert ei.value.exit_code == EXIT_BUILD and "corrupt" in ei.value.message
    assert not (tmp_path / "tree").exists()


# --------------------------------------------------------------------------------------------
# the walls behind the model: with the header checks switched off (a fault injected), the
# fd-relative writes and the check over the extracted tree still refuse, and remove everything


@pytest.fixture
def no_model(mocker):
    mocker.patch.object(extract, "check_members", lambda members: [(m, extract.parts_of(m.name)) for m in members])


def test_without_the_model_the_fd_walk_refuses_the_chain(tmp_path, no_model):
    extract_refused(tmp_path, cve_2025_4517(), "not a directory")


def test_without_the_model_the_tree_check_refuses_links_out(tmp_path, no_model):
    """The chain's links made without writing through any (the deep one at its real path): every
    write is fine, and only resolving ``escape`` over the extracted tree shows it leaves."""
    chain = cve_2025_4517()
    dirs_and_letters = chain[:32]
    deep = entry("/".join(["d" * 247] * 16 + ["l" * 254]), "symlink", link="/".join([".."] * 16))
    escape = next(e for e in chain if e[0].name == "escape")
    extract_refused(tmp_path, [*dirs_and_letters, deep, escape], "leaving the tree")


def test_without_the_model_the_data_filter_still_stands(tmp_path, no_model):
    if not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python has no tarfile.data_filter")
    extract_refused(tmp_path, [entry("lnk", "symlink", link="../../flag")], "data filter")


# --------------------------------------------------------------------------------------------
# an honest bundle's dry run: read where it lies, the same checks as the import


def _tampered(src: Path, dst: Path, rel: str) -> None:
    """``src`` with the bytes of member ``rel`` flipped (same size) and no .sha256 beside it."""
    with tarfile.open(src) as tin, tarfile.open(dst, "w:gz") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read() if m.isfile() else None
            if m.name == rel:
                data = bytes(b ^ 0xFF for b in data)
            tout.addfile(m, io.BytesIO(data) if data is not None else None)


def test_bundle_dry_run_reads_the_bundle_in_place(txn_world, target_env, tmp_path):
    env = target_env("3.5.0", compile_version="3.5.0")
    before = snapshot(env.prefix)
    bundle = tmp_path / "mini.tar.gz"
    assert rb("export", txn_world.recipe("mini"), "-o", str(bundle),
              env={"ROCMBUILD_HOME": str(txn_world.home)}).returncode == 0
    home, tmpdir = tmp_path / "fresh-home", tmp_path / "tmpdir"
    tmpdir.mkdir()
    e = {"ROCMBUILD_HOME": str(home), "TMPDIR": str(tmpdir)}
    r = rb("apply", "--artifact", str(bundle), "--env", str(env.prefix), "--dry-run", "--json", env=e)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["artifact"]["key"] == txn_world.artifacts["mini"].key
    lib = next(a for a in d["target_plan"]["plan"]["actions"] if a["path"].endswith("lib/libMIOpen.so.1.0"))
    assert lib["source"] == f"{bundle}/rocmbuild-artifact/tree/lib/libMIOpen.so.1.0"  # inside the bundle
    assert list(tmpdir.iterdir()) == [] and not home.exists()
    assert snapshot(env.prefix) == before

    evil = tmp_path / "tampered.tar.gz"
    _tampered(bundle, evil, "rocmbuild-artifact/tree/lib/libMIOpen.so.1.0")
    dry = rb("apply", "--artifact", str(evil), "--env", str(env.prefix), "--dry-run", "--json", env=e)
    real = rb("apply", "--artifact", str(evil), "--env", str(env.prefix), "--json", env=e)
    assert dry.returncode == real.returncode == EXIT_BUILD, dry.stderr
    assert json.loads(dry.stdout)["error"]["message"] == json.loads(real.stdout)["error"]["message"]
    assert "lib/libMIOpen.so.1.0 does not match its manifest" in json.loads(dry.stdout)["error"]["message"]
    assert list(tmpdir.iterdir()) == [] and snapshot(env.prefix) == before
