"""rocmbuild.sources.source against real git repositories and real tarballs (nothing mocked)."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import http.server
import io
import tarfile
import threading
import time
from pathlib import Path

import git
import pytest

from rocmbuild.fs.disk import sha256_file
from rocmbuild.sources import source
from rocmbuild.sources.git import remote_key
from rocmbuild.errors import FetchError, RecipeError
from rocmbuild import recipe as recipe_mod
from tests.support.project import MIOPEN_SRC, set_marker, set_version
from tests.support.recipes import fixture_recipe

MARKER_LINE = 'const char* miopenFixtureMarker(void) { return "%s"; }'


def write_recipe(tmp_path: Path, body: str, *, name: str = "t", patches: dict[str, str] | None = None):
    d = tmp_path / "recipes"
    d.mkdir(exist_ok=True)
    for fname, text in (patches or {}).items():
        pd = d / "patches" / name
        pd.mkdir(parents=True, exist_ok=True)
        (pd / fname).write_text(text)
    path = d / f"{name}.toml"
    text = f'name = "{name}"\n' + body
    path.write_text(text)
    return recipe_mod.parse(text, path)


def git_recipe(tmp_path, url, ref=None, *, subdir="projects/miopen", extra="", name="t", patches=None):
    body = fixture_recipe(name=None, url=url, ref=ref, subdir=subdir or None, source_extra=extra,
                          libraries=None, verify=None)
    return write_recipe(tmp_path, body, name=name, patches=patches)


def marker(checkout: source.Checkout) -> str:
    text = (checkout.source_dir / "src" / "miopen.c").read_text()
    return text.split('return "')[-1].split('"')[0]


def status(root: Path) -> str:
    return git.Repo(root).git.status("--porcelain", "--untracked-files=all")


def upstream_commit(monorepo, *, branch="develop", version=None, marker_text=None, start=None, message="upstream change"):
    repo = git.Repo(monorepo.path)
    if start is not None:
        repo.git.checkout("-q", "-b", branch, start)
    else:
        repo.git.checkout("-q", branch)
    proj = monorepo.path / "projects" / "miopen"
    if version:
        set_version(proj, version)
    if marker_text:
        set_marker(proj, marker_text)
    repo.git.add("-A")
    repo.git.commit("-q", "-m", message)
    sha = repo.head.commit.hexsha
    repo.git.checkout("-q", "develop")
    return sha


def marker_patch(old: str, new: str) -> str:
    return (
        "--- a/src/miopen.c\n+++ b/src/miopen.c\n@@ -22 +22 @@\n"
        f"-{MARKER_LINE % old}\n+{MARKER_LINE % new}\n"
    )


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "rocmbuild-home"


# ------------------------------------------------------------------------------------------
# refs


@pytest.mark.parametrize(
    "ref, attr, version",
    [
        ("develop", "c_develop", "3.6.0"),
        ("release/rocm-rel-7.0", "c_release", "3.5.0"),
        ("rocm-7.1.0", "c1", "3.5.1"),
        (None, "c_develop", "3.6.0"),  # remote HEAD
    ],
)
def test_fetch_branch_tag_head(tmp_path, home, monorepo, ref, attr, version):
    r = git_recipe(tmp_path, monorepo.url, ref)
    co = source.fetch(r, home=home)
    assert co.commit == getattr(monorepo, attr)
    assert co.version == version
    assert co.ref == ref
    assert co.url == monorepo.url
    assert co.root == home / "src" / remote_key(monorepo.url)
    assert co.source_dir == co.root / "projects" / "miopen"
    assert git.Repo(co.root).head.commit.hexsha == co.commit
    assert co.patches == () and co.cherry_picks == () and co.tarball_sha256 is None


def test_fetch_full_and_short_sha(tmp_path, home, monorepo):
    co = source.fetch(git_recipe(tmp_path, monorepo.url, monorepo.c_fix), home=home)
    assert co.commit == monorepo.c_fix
    assert marker(co) == "fixed"
    assert co.version == "3.5.1"
    # short sha of a branch tip (found through ls-remote)
    co = source.fetch(git_recipe(tmp_path, monorepo.url, monorepo.c_release[:10]), home=home)
    assert co.commit == monorepo.c_release
    assert co.ref == monorepo.c_release[:10]
    assert co.version == "3.5.0"


def test_fetch_short_sha_that_is_not_a_tip(tmp_path, home, monorepo):
    # after a new commit on develop, c_develop is no ref's tip: only history knows it
    upstream_commit(monorepo, version="3.7.0")
    co = source.fetch(git_recipe(tmp_path, monorepo.url, monorepo.c_develop[:9]), home=home)
    assert co.commit == monorepo.c_develop
    assert co.version == "3.6.0"


def test_sparse_partial_shallow(tmp_path, home, monorepo):
    r = git_recipe(tmp_path, monorepo.url, "develop", extra='sparse = ["shared/ctest"]')
    co = source.fetch(r, home=home)
    assert (co.root / "projects" / "miopen" / "CMakeLists.txt").is_file()
    assert (co.root / "shared" / "ctest" / "README").is_file()
    assert not (co.root / "projects" / "rocblas").exists()
    assert not (co.root / "projects" / "hipblaslt").exists()
    repo = git.Repo(co.root)
    # shallow: exactly one commit of history
    assert (co.root / ".git" / "shallow").read_text().split() == [co.commit]
    assert repo.git.rev_list("--count", "HEAD") == "1"
    # partial: the 2 MiB blobs are not in the object store at all (listed as missing)
    blob = git.Repo(monorepo.path).git.rev_parse(f"{monorepo.c_develop}:projects/rocblas/blob.bin")
    missing = repo.git.rev_list("--objects", "--missing=print", "HEAD").split()
    assert f"?{blob}" in missing
    size = sum(f.stat().st_size for f in (co.root / ".git").rglob("*") if f.is_file())
    assert size < 1024 * 1024, size


def test_no_subdir_is_a_full_tree(tmp_path, home, monorepo):
    # first a sparse fetch, then the same remote without subdir: sparse checkout is turned off
    source.fetch(git_recipe(tmp_path, monorepo.url, "develop"), home=home)
    r = write_recipe(tmp_path, fixture_recipe(name=None, url=monorepo.url, subdir=None, version=None, libraries=None,
                                               verify=None), name="full")
    co = source.fetch(r, home=home)
    assert co.source_dir == co.root
    assert (co.root / "projects" / "rocblas" / "blob.bin").stat().st_size == 2 * 1024 * 1024
    assert co.version is None


def test_second_fetch_reuses_cache_and_sees_new_upstream_commit(tmp_path, home, monorepo):
    r = git_recipe(tmp_path, monorepo.url, "develop")
    log = tmp_path / "fetch.log"
    co1 = source.fetch(r, home=home, log=log)
    objects = co1.root / ".git" / "objects"
    before = sorted(str(p.relative_to(objects)) for p in objects.rglob("*") if p.is_file())
    log.write_text("")
    start = time.monotonic()
    co2 = source.fetch(r, home=home, log=log)
    elapsed = time.monotonic() - start
    after = sorted(str(p.relative_to(objects)) for p in objects.rglob("*") if p.is_file())
    assert co2 == co1
    assert after == before  # nothing transferred
    assert " fetch " not in log.read_text()
    assert elapsed < 5

    new = upstream_commit(monorepo, version="3.7.0")
    co3 = source.fetch(r, home=home, log=log)
    assert co3.root == co1.root
    assert co3.commit == new != co1.commit
    assert co3.version == "3.7.0"
    assert " fetch " in log.read_text()


def test_plain_path_and_file_url_share_the_cache(tmp_path, home, monorepo):
    co_path = source.fetch(git_recipe(tmp_path, str(monorepo.path), "develop"), home=home)
    co_url = source.fetch(git_recipe(tmp_path, monorepo.url, "develop"), home=home)
    assert co_path.url == monorepo.url == co_url.url
    assert co_path.root == co_url.root
    assert co_path.commit == monorepo.c_develop
    # shallow + partial also for the plain path (it was turned into a file:// URL)
    assert (co_path.root / ".git" / "shallow").is_file()
    assert not (co_path.root / "projects" / "rocblas").exists()


def test_remote_url_change_updates_origin(tmp_path, home, monorepo):
    co = source.fetch(git_recipe(tmp_path, monorepo.url, "develop"), home=home)
    repo = git.Repo(co.root)
    assert repo.remotes.origin.url == monorepo.url
    repo.git.remote("set-url", "origin", "file:///elsewhere")  # e.g. an old cache layout
    source.fetch(git_recipe(tmp_path, monorepo.url, "develop"), home=home)
    assert git.Repo(co.root).remotes.origin.url == monorepo.url


def test_unknown_ref(tmp_path, home, monorepo):
    with pytest.raises(FetchError) as ei:
        source.fetch(git_recipe(tmp_path, monorepo.url, "no-such-branch"), home=home)
    err = ei.value
    assert err.exit_code == 3
    assert "no-such-branch" in err.message and monorepo.url in err.message
    assert "develop" in err.hint and "rocm-7.1.0" in err.hint


def test_unknown_full_sha(tmp_path, home, monorepo):
    with pytest.raises(FetchError) as ei:
        source.fetch(git_recipe(tmp_path, monorepo.url, "0" * 40), home=home)
    assert ei.value.exit_code == 3
    assert "0" * 40 in ei.value.message


@pytest.mark.parametrize("kind", ["missing-dir", "not-a-repo", "refused"])
def test_unreachable_remote(tmp_path, home, kind):
    if kind == "missing-dir":
        url = str(tmp_path / "does-not-exist")
    elif kind == "not-a-repo":
        (tmp_path / "plain").mkdir()
        url = str(tmp_path / "plain")
    else:
        url = "https://127.0.0.1:9/rocm-libraries.git"
    with pytest.raises(FetchError) as ei:
        source.fetch(git_recipe(tmp_path, url, "develop"), home=home)
    assert ei.value.exit_code == 3
    assert "cannot reach" in ei.value.message
    assert "URL" in ei.value.hint


# ------------------------------------------------------------------------------------------
# cherry-picks


def test_cherry_pick(tmp_path, home, monorepo):
    r = git_recipe(tmp_path, monorepo.url, "develop", extra=f'cherry_pick = ["{monorepo.c_fix}"]')
    co = source.fetch(r, home=home)
    assert co.commit == monorepo.c_develop
    assert co.cherry_picks == (monorepo.c_fix,)
    assert marker(co) == "fixed"
    assert co.version == "3.6.0"  # the pick does not bring the old version along
    head = git.Repo(co.root).head.commit
    assert head.parents[0].hexsha == monorepo.c_develop
    assert status(co.root) == ""
    # the next fetch without the pick starts from the plain ref again
    co2 = source.fetch(git_recipe(tmp_path, monorepo.url, "develop", name="plain"), home=home)
    assert marker(co2) == "stock"
    assert git.Repo(co2.root).head.commit.hexsha == monorepo.c_develop


def test_cherry_pick_short_sha(tmp_path, home, monorepo):
    r = git_recipe(tmp_path, monorepo.url, "release/rocm-rel-7.0", extra=f'cherry_pick = ["{monorepo.c_fix[:12]}"]')
    co = source.fetch(r, home=home)
    assert co.cherry_picks == (monorepo.c_fix,)
    assert marker(co) == "fixed"


def test_cherry_pick_already_upstream_is_a_no_op(tmp_path, home, monorepo):
    r = git_recipe(tmp_path, monorepo.url, "feature/fix", extra=f'cherry_pick = ["{monorepo.c_fix}"]')
    co = source.fetch(r, home=home)
    assert co.commit == monorepo.c_fix and co.cherry_picks == (monorepo.c_fix,)
    assert marker(co) == "fixed" and status(co.root) == ""


def test_conflicting_cherry_pick(tmp_path, home, monorepo):
    upstream_commit(monorepo, branch="conflict", start=monorepo.c1, marker_text="other")
    r = git_recipe(tmp_path, monorepo.url, "conflict", extra=f'cherry_pick = ["{monorepo.c_fix}"]')
    with pytest.raises(FetchError) as ei:
        source.fetch(r, home=home)
    err = ei.value
    assert err.exit_code == 3
    assert monorepo.c_fix in err.message
    assert "projects/miopen/src/miopen.c" in err.message
    root = home / "src" / remote_key(monorepo.url)
    assert not (root / ".git" / "CHERRY_PICK_HEAD").exists()
    assert status(root) == ""
    # and the cache is still usable
    co = source.fetch(git_recipe(tmp_path, monorepo.url, "develop", name="after"), home=home)
    assert marker(co) == "stock"


# ------------------------------------------------------------------------------------------
# patches


def test_patch_applied_relative_to_subdir(tmp_path, home, monorepo):
    text = marker_patch("stock", "patched")
    r = git_recipe(tmp_path, monorepo.url, "develop", extra='patches = ["0001-marker.patch"]',
                   patches={"0001-marker.patch": text})
    co = source.fetch(r, home=home)
    assert marker(co) == "patched"
    assert co.patches == (hashlib.sha256(text.encode()).hexdigest(),)
    assert status(co.root).strip() == "M projects/miopen/src/miopen.c"


def test_patches_apply_in_order_on_top_of_each_other(tmp_path, home, monorepo):
    patches = {"0001-a.patch": marker_patch("stock", "one"), "0002-b.patch": marker_patch("one", "two")}
    r = git_recipe(tmp_path, monorepo.url, "develop", extra='patches = ["0001-a.patch", "0002-b.patch"]',
                   patches=patches)
    co = source.fetch(r, home=home)
    assert marker(co) == "two"
    assert len(co.patches) == 2


def test_patch_that_does_not_apply_changes_nothing(tmp_path, home, monorepo):
    patches = {"0001-good.patch": marker_patch("stock", "one"), "0002-bad.patch": marker_patch("nope", "two")}
    r = git_recipe(tmp_path, monorepo.url, "develop", extra='patches = ["0001-good.patch", "0002-bad.patch"]',
                   patches=patches)
    with pytest.raises(FetchError) as ei:
        source.fetch(r, home=home)
    err = ei.value
    assert err.exit_code == 3
    assert "0002-bad.patch" in err.message
    assert "0001-good.patch" not in err.message
    assert "src/miopen.c" in err.message
    root = home / "src" / remote_key(monorepo.url)
    assert status(root) == ""  # the good patch was not applied either
    assert 'return "stock"' in (root / "projects" / "miopen" / "src" / "miopen.c").read_text()


def test_previous_patch_and_stray_files_do_not_leak(tmp_path, home, monorepo):
    r = git_recipe(tmp_path, monorepo.url, "develop", extra='patches = ["p.patch"]', name="patched",
                   patches={"p.patch": marker_patch("stock", "patched")})
    co = source.fetch(r, home=home)
    assert marker(co) == "patched"
    (co.source_dir / "build").mkdir()
    (co.source_dir / "build" / "CMakeCache.txt").write_text("stale")
    co2 = source.fetch(git_recipe(tmp_path, monorepo.url, "develop", name="plain"), home=home)
    assert marker(co2) == "stock"
    assert co2.patches == ()
    assert not (co2.source_dir / "build").exists()
    assert status(co2.root) == ""


# ------------------------------------------------------------------------------------------
# version and subdir


def test_version_regex_mismatch_is_a_recipe_error(tmp_path, home, monorepo):
    body = fixture_recipe(name=None, url=monorepo.url, libraries=None, verify=None,
                          version="{ file = \"CMakeLists.txt\", regex = 'MIOPEN_VERSION_NOPE ([0-9.]+)' }")
    r = write_recipe(tmp_path, body)
    with pytest.raises(RecipeError) as ei:
        source.fetch(r, home=home)
    err = ei.value
    assert err.exit_code == 2
    assert str(r.path) in err.message
    assert "source.version" in err.message
    assert "CMakeLists.txt" in err.message and "MIOPEN_VERSION_NOPE" in err.message
    assert err.details["key"] == "source.version"


def test_version_file_missing_is_a_recipe_error(tmp_path, home, monorepo):
    body = fixture_recipe(name=None, url=monorepo.url, libraries=None, verify=None,
                          version="{ file = \"VERSION.txt\", regex = '([0-9.]+)' }")
    r = write_recipe(tmp_path, body)
    with pytest.raises(RecipeError) as ei:
        source.fetch(r, home=home)
    assert ei.value.exit_code == 2
    assert "VERSION.txt" in ei.value.message and "source.version" in ei.value.message


def test_missing_subdir(tmp_path, home, monorepo):
    r = git_recipe(tmp_path, monorepo.url, "develop", subdir="projects/nope")
    with pytest.raises(FetchError) as ei:
        source.fetch(r, home=home)
    assert ei.value.exit_code == 3
    assert "projects/nope" in ei.value.message


# ------------------------------------------------------------------------------------------
# resolve_ref


def test_resolve_ref(tmp_path, monorepo):
    assert source.resolve_ref(git_recipe(tmp_path, monorepo.url, "develop")) == monorepo.c_develop
    assert source.resolve_ref(git_recipe(tmp_path, monorepo.url, "rocm-7.1.0")) == monorepo.c1
    assert source.resolve_ref(git_recipe(tmp_path, str(monorepo.path), "feature/fix")) == monorepo.c_fix
    assert source.resolve_ref(git_recipe(tmp_path, monorepo.url, "a" * 40)) == "a" * 40  # no network
    with pytest.raises(FetchError) as ei:
        source.resolve_ref(git_recipe(tmp_path, monorepo.url, "nope"))
    assert ei.value.exit_code == 3 and "nope" in ei.value.message
    with pytest.raises(FetchError) as ei:
        source.resolve_ref(git_recipe(tmp_path, str(tmp_path / "missing"), "develop"), timeout=10)
    assert ei.value.exit_code == 3 and "cannot reach" in ei.value.message
    # nothing was cloned
    assert not (tmp_path / "rocmbuild-home" / "src").exists()


def test_resolve_ref_annotated_tag_is_peeled(tmp_path, monorepo):
    repo = git.Repo(monorepo.path)
    repo.create_tag("rocm-7.2.0", ref=monorepo.c_release, message="annotated")
    assert source.resolve_ref(git_recipe(tmp_path, monorepo.url, "rocm-7.2.0")) == monorepo.c_release


def test_fetch_annotated_tag(tmp_path, home, monorepo):
    git.Repo(monorepo.path).create_tag("rocm-7.2.0", ref=monorepo.c_release, message="annotated")
    co = source.fetch(git_recipe(tmp_path, monorepo.url, "rocm-7.2.0"), home=home)
    assert co.commit == monorepo.c_release and co.version == "3.5.0"


# ------------------------------------------------------------------------------------------
# concurrency


def test_fetch_waits_for_the_lock(tmp_path, home, monorepo):
    r = git_recipe(tmp_path, monorepo.url, "develop")
    lock = home / "src" / f"{remote_key(monorepo.url)}.lock"
    lock.parent.mkdir(parents=True)
    results: list = []
    with open(lock, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        t = threading.Thread(target=lambda: results.append(source.fetch(r, home=home)))
        t.start()
        time.sleep(0.7)
        assert results == [] and t.is_alive()
        assert not (home / "src" / remote_key(monorepo.url)).exists()
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    t.join(60)
    assert results and results[0].commit == monorepo.c_develop


def _fetch_in_child(recipe, home, q):
    try:
        q.put(source.fetch(recipe, home=home).commit)
    except BaseException as exc:  # pragma: no cover - reported to the parent
        q.put(repr(exc))


def test_two_processes_fetching_the_same_remote(tmp_path, home, monorepo):
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    recipes = [git_recipe(tmp_path, monorepo.url, ref, name=f"r{i}")
               for i, ref in enumerate(["develop", "rocm-7.1.0", "release/rocm-rel-7.0", "develop"])]
    procs = [ctx.Process(target=_fetch_in_child, args=(r, home, q)) for r in recipes]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    got = sorted(q.get(timeout=5) for _ in procs)
    assert got == sorted([monorepo.c_develop, monorepo.c1, monorepo.c_release, monorepo.c_develop])
    root = home / "src" / remote_key(monorepo.url)
    git.Repo(root).git.fsck("--connectivity-only")
    co = source.fetch(recipes[2], home=home)
    assert co.version == "3.5.0" and status(co.root) == ""


# ------------------------------------------------------------------------------------------
# tarballs


def make_tarball(path: Path, *, top: str | None = "MIOpen-3.5.1", extra=None) -> str:
    with tarfile.open(path, "w:gz") as tf:
        tf.add(MIOPEN_SRC, arcname=top or ".")
        for member, data in (extra or []):
            tf.addfile(member, io.BytesIO(data) if data is not None else None)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tar_recipe(tmp_path, url, sha, *, extra="", name="tb", patches=None):
    body = fixture_recipe(name=None, tarball=url, sha256=sha, ref=None, subdir=None, source_extra=extra,
                          libraries=None, verify=None)
    return write_recipe(tmp_path, body, name=name, patches=patches)


def test_tarball_good_sha_and_cache(tmp_path, home):
    tb = tmp_path / "miopen.tar.gz"
    sha = make_tarball(tb)
    r = tar_recipe(tmp_path, str(tb), sha, extra='patches = ["m.patch"]',
                   patches={"m.patch": marker_patch("stock", "patched")})
    co = source.fetch(r, home=home)
    assert co.root == home / "src" / f"tarball-{sha[:16]}" / "MIOpen-3.5.1"
    assert co.source_dir == co.root
    assert co.version == "3.5.1"
    assert co.tarball_sha256 == sha and co.commit is None and co.ref is None
    assert co.url == str(tb)
    assert marker(co) == "patched"
    assert len(co.patches) == 1
    cached = home / "downloads" / sha
    assert cached.is_file() and not list((home / "downloads").glob("*.part"))
    ino = cached.stat().st_ino
    # second fetch: the download is reused, the tree is fresh (patch applied exactly once)
    tb.unlink()
    co2 = source.fetch(r, home=home)
    assert cached.stat().st_ino == ino
    assert marker(co2) == "patched"


def test_tarball_cached_download_that_changed_is_not_reused(tmp_path, home):
    tb = tmp_path / "miopen.tar.gz"
    sha = make_tarball(tb)
    r = tar_recipe(tmp_path, tb.as_uri(), sha)
    (home / "downloads").mkdir(parents=True)
    (home / "downloads" / sha).write_bytes(b"corrupted")
    co = source.fetch(r, home=home)
    assert co.version == "3.5.1"
    assert sha256_file(home / "downloads" / sha) == sha


def test_tarball_without_top_dir_and_subdir(tmp_path, home):
    tb = tmp_path / "flat.tar.gz"
    with tarfile.open(tb, "w:gz") as tf:
        tf.add(MIOPEN_SRC, arcname="projects/miopen")
        tf.add(MIOPEN_SRC / "include", arcname="other")
    sha = hashlib.sha256(tb.read_bytes()).hexdigest()
    r = tar_recipe(tmp_path, tb.as_uri(), sha, extra='subdir = "projects/miopen"\npatches = ["m.patch"]',
                   patches={"m.patch": marker_patch("stock", "patched")})
    co = source.fetch(r, home=home)
    assert co.root == home / "src" / f"tarball-{sha[:16]}"
    assert co.source_dir == co.root / "projects" / "miopen"
    assert co.version == "3.5.1"
    assert marker(co) == "patched"


def test_tarball_bad_sha(tmp_path, home):
    tb = tmp_path / "miopen.tar.gz"
    make_tarball(tb)
    wrong = "0" * 64
    with pytest.raises(FetchError) as ei:
        source.fetch(tar_recipe(tmp_path, str(tb), wrong), home=home)
    assert ei.value.exit_code == 3
    assert "sha256 mismatch" in ei.value.message and wrong in ei.value.message
    assert list((home / "downloads").iterdir()) == []  # deleted
    assert tb.is_file()  # the user's own file is never deleted
    assert not (home / "src" / f"tarball-{wrong[:16]}").exists()


def test_tarball_patch_that_does_not_apply(tmp_path, home):
    tb = tmp_path / "miopen.tar.gz"
    sha = make_tarball(tb)
    r = tar_recipe(tmp_path, str(tb), sha, extra='patches = ["bad.patch"]',
                   patches={"bad.patch": marker_patch("nope", "x")})
    with pytest.raises(FetchError) as ei:
        source.fetch(r, home=home)
    assert "bad.patch" in ei.value.message and "src/miopen.c" in ei.value.message
    tree = home / "src" / f"tarball-{sha[:16]}" / "MIOpen-3.5.1"
    assert (tree / "src" / "miopen.c").read_text() == (MIOPEN_SRC / "src" / "miopen.c").read_text()


def _member(name, type_=tarfile.REGTYPE, linkname="", size=0):
    m = tarfile.TarInfo(name)
    m.type = type_
    m.linkname = linkname
    m.size = size
    return m


@pytest.mark.parametrize(
    "member, data, reason",
    [
        (_member("../evil", size=4), b"evil", ".."),
        (_member("MIOpen-3.5.1/../../evil", size=4), b"evil", ".."),
        (_member("/tmp/rocmbuild-abs-evil", size=4), b"evil", "absolute"),
        (_member("MIOpen-3.5.1/link", tarfile.SYMTYPE, "../../outside"), None, "outside"),
        (_member("MIOpen-3.5.1/abslink", tarfile.SYMTYPE, "/etc/passwd"), None, "absolute"),
        (_member("MIOpen-3.5.1/hard", tarfile.LNKTYPE, "../etc/passwd"), None, "outside"),
        (_member("MIOpen-3.5.1/dev", tarfile.CHRTYPE), None, "device"),
    ],
)
def test_tarball_unsafe_members_are_refused(tmp_path, home, member, data, reason):
    tb = tmp_path / "evil.tar.gz"
    sha = make_tarball(tb, extra=[(member, data)])
    with pytest.raises(FetchError) as ei:
        source.fetch(tar_recipe(tmp_path, str(tb), sha), home=home)
    assert ei.value.exit_code == 3
    assert reason in ei.value.message and member.name in ei.value.message
    assert not (home / "src" / "evil").exists() and not (tmp_path / "evil").exists()
    assert not Path("/tmp/rocmbuild-abs-evil").exists()
    assert not (home / "src" / f"tarball-{sha[:16]}").exists()  # nothing extracted
    assert [p.name for p in (home / "src").iterdir()] == [f"tarball-{sha[:16]}.lock"]


def test_tarball_symlink_inside_the_tree_is_fine(tmp_path, home):
    tb = tmp_path / "ok.tar.gz"
    sha = make_tarball(tb, extra=[(_member("MIOpen-3.5.1/include/alias", tarfile.SYMTYPE, "miopen"), None)])
    co = source.fetch(tar_recipe(tmp_path, str(tb), sha), home=home)
    assert (co.root / "include" / "alias" / "miopen.h").is_file()


def test_tarball_over_http(tmp_path, home):
    served = tmp_path / "www"
    served.mkdir()
    sha = make_tarball(served / "miopen.tar.gz")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None  # type: ignore[assignment]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/miopen.tar.gz"
        co = source.fetch(tar_recipe(tmp_path, url, sha), home=home)
        assert co.version == "3.5.1" and co.url == url
        with pytest.raises(FetchError) as ei:
            source.fetch(tar_recipe(tmp_path, url.replace("miopen", "missing"), "1" * 64, name="m"), home=home)
        assert ei.value.exit_code == 3 and "404" in ei.value.message
        assert not list((home / "downloads").glob("*.part"))
    finally:
        server.shutdown()
        server.server_close()


def test_tarball_missing_local_file(tmp_path, home):
    with pytest.raises(FetchError) as ei:
        source.fetch(tar_recipe(tmp_path, str(tmp_path / "nope.tar.gz"), "2" * 64), home=home)
    assert ei.value.exit_code == 3 and "nope.tar.gz" in ei.value.message
