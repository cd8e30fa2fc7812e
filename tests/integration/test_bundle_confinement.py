"""Bundles and export, confined: nothing a bundle says can steer a write, and nothing a bundle
holds is written before its manifest vouches for it. Canary files outside every root must stay
byte-identical with a link count of 1."""

from __future__ import annotations

import gzip
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from rocmbuild.store import bundle
from rocmbuild.errors import EXIT_BUILD, BuildFilesystemError, FetchError
from tests.support.cli import REPO, kill_group, rb
from tests.support.tars import bundle_entries, entry, write_tar
from tests.support.snapshots import CANARY, canaries

TOP = "rocmbuild-artifact"
LIB = f"{TOP}/tree/lib/libMIOpen.so.1.0"


def assert_intact(guard: dict[Path, bytes]) -> None:
    for path, data in guard.items():
        assert path.read_bytes() == data, f"{path} was changed"
        assert path.lstat().st_nlink == 1, f"{path} gained a hard link"
        assert sorted(p.name for p in path.parent.iterdir() if p.is_file() or p.is_symlink()) == ["flag"], \
            f"a file was written beside {path}: {sorted(os.listdir(path.parent))}"


def run(*args: str, env: dict, umask: int | None = None, fsize: int | None = None) -> subprocess.CompletedProcess:
    """``python -m rocmbuild ARGS`` with a umask and a file-size limit (RLIMIT_FSIZE: a write past
    it fails with EFBIG instead of filling the disk, so a bomb cannot hurt the machine running the test)."""
    def limits() -> None:
        if umask is not None:
            os.umask(umask)
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    e = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env}
    proc = subprocess.Popen([sys.executable, "-m", "rocmbuild", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e, cwd=str(REPO), start_new_session=True,
                            preexec_fn=limits)
    try:
        out, err = proc.communicate(timeout=120)
    except BaseException:
        kill_group(proc, wait=False)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def members(path: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(path) as tf:
        return [(m, tf.extractfile(m).read() if m.isfile() else None) for m in tf.getmembers()]


def repack(src: Path, dst: Path, *, manifest: dict | None = None, extra=(), order=None, change=None) -> Path:
    """``src`` member by member into ``dst``: the manifest replaced, ``change(name, info, data)``
    applied, ``extra`` members appended, and ``order`` (a key) re-sorting them."""
    out = []
    for m, data in members(src):
        if m.name == f"{TOP}/manifest.json" and manifest is not None:
            data = json.dumps(manifest).encode()
        if change is not None:
            m, data = change(m, data)
        if data is not None:
            m.size = len(data)
        out.append((m, data))
    out += list(extra)
    if order is not None:
        out.sort(key=order)
    dst.parent.mkdir(parents=True, exist_ok=True)
    write_tar(dst, out)
    return dst


@pytest.fixture(scope="module")
def honest(txn_world, tmp_path_factory) -> Path:
    """A bundle of the session's ``mini`` artifact, exported by this rocmbuild."""
    return Path(bundle.export(txn_world.artifacts["mini"], tmp_path_factory.mktemp("honest") / "mini.tar.gz").file)


def manifest_of(path: Path) -> dict:
    with tarfile.open(path) as tf:
        return json.loads(tf.extractfile(f"{TOP}/manifest.json").read())


def leftovers(home: Path) -> list[str]:
    """What an import left in the cache (nothing, after a refusal)."""
    adir = home / "artifacts"
    return sorted(str(p.relative_to(adir)) for p in adir.rglob("*") if p.name != "flag") if adir.exists() else []


# --------------------------------------------------------------------------------------------
# 1. a name from a manifest never reaches a path


HOSTILE = {"recipe": "../../../victim/EXPORTED", "version": "1/../../../../victim/V"}


@pytest.mark.parametrize("field", sorted(HOSTILE))
def test_a_hostile_name_is_refused_at_import_and_export_writes_nothing(tmp_path, honest, target_env, txn_world,
                                                                       field):
    """The reported break: a bundle naming its recipe ``../../..`` is imported by ``apply
    --artifact``, then ``export KEY -o DIR`` wrote the bundle outside DIR."""
    m = manifest_of(honest)
    evil = repack(honest, tmp_path / "in" / "evil.tar.gz", manifest={**m, field: HOSTILE[field]})
    home, out, victim = tmp_path / "home", tmp_path / "a" / "b" / "out", tmp_path / "victim"
    out.mkdir(parents=True)
    guard = canaries(victim, tmp_path)
    env = target_env("3.5.1", compile_version="3.5.1")
    r = rb("apply", "--artifact", str(evil), "--env", str(env.prefix), "--json", env={"ROCMBUILD_HOME": str(home)})
    assert r.returncode == EXIT_BUILD, r.stderr
    err = json.loads(r.stdout)["error"]
    # named by the manifest's schema (docs/state-files.md): the field, and a corrupt artifact
    assert f"field '{field}'" in err["message"] and "corrupt" in err["message"], err["message"]
    assert leftovers(home) == []
    x = rb("export", m["key"], "-o", f"{out}/", "--json", env={"ROCMBUILD_HOME": str(home)})
    assert x.returncode != 0
    assert_intact(guard)
    assert list(out.iterdir()) == [] and not (victim / "EXPORTED").exists()


@pytest.mark.parametrize("field", sorted(HOSTILE))
def test_export_refuses_an_artifact_imported_with_a_hostile_name(tmp_path, txn_world, field):
    """An artifact an older rocmbuild imported (its manifest never checked) is refused at export."""
    art = txn_world.artifacts["mini"]
    home = tmp_path / "home"
    dest = home / "artifacts" / "imported" / art.key
    shutil.copytree(art.path, dest, symlinks=True)
    m = json.loads((dest / "manifest.json").read_text())
    (dest / "manifest.json").write_text(json.dumps({**m, field: HOSTILE[field]}))
    out, victim = tmp_path / "a" / "b" / "out", tmp_path / "victim"
    out.mkdir(parents=True)
    guard = canaries(victim, tmp_path)
    x = rb("export", art.key[:16], "-o", str(out), "--json", env={"ROCMBUILD_HOME": str(home)})
    assert x.returncode == EXIT_BUILD, x.stderr
    msg = json.loads(x.stdout)["error"]["message"]
    # refused by the manifest's grammar at export, or by its schema when the cache is read
    assert f"manifest's {field} is invalid" in msg or "is damaged" in msg, msg
    assert_intact(guard)
    assert list(out.iterdir()) == [] and not (out / "mini-1").exists()


def test_output_with_a_trailing_slash_is_a_directory(tmp_path, txn_world):
    """``-o DIR/`` with DIR missing wrote a *file* named DIR: it is made, and the bundle goes in it."""
    art = txn_world.artifacts["mini"]
    out = tmp_path / "new" / "dir"
    x = rb("export", art.key, "-o", f"{out}/", "--json", env={"ROCMBUILD_HOME": str(txn_world.home)})
    assert x.returncode == 0, x.stderr
    d = json.loads(x.stdout)
    name = f"mini-{art.manifest.version}-{art.key[:12]}.tar.gz"
    assert out.is_dir() and d["file"] == str(out / name) and d["sha256_file"] == str(out / f"{name}.sha256")
    assert sorted(os.listdir(out)) == [name, f"{name}.sha256"]
    assert (out / f"{name}.sha256").read_text() == f"{d['sha256']}  {name}\n"


def test_planted_links_at_the_bundle_names_are_replaced_never_followed(tmp_path, txn_world):
    art = txn_world.artifacts["mini"]
    out, victim = tmp_path / "out", tmp_path / "victim"
    guard = canaries(victim)
    (victim / "flag2").write_bytes(CANARY)
    guard[victim / "flag2"] = CANARY
    out.mkdir()
    os.symlink(victim / "flag", out / "mini.tar.gz")
    os.symlink("../victim/flag2", out / "mini.tar.gz.sha256")
    x = run("export", art.key, "-o", str(out / "mini.tar.gz"), env={"ROCMBUILD_HOME": str(txn_world.home)},
            umask=0o077)
    assert x.returncode == 0, x.stderr
    for p in guard:
        assert p.read_bytes() == CANARY and p.stat().st_nlink == 1
    assert sorted(os.listdir(victim)) == ["flag", "flag2"]
    for name in ("mini.tar.gz", "mini.tar.gz.sha256"):
        st = (out / name).lstat()
        assert not (out / name).is_symlink() and oct(st.st_mode & 0o777) == oct(0o644)  # not the umask's 0600
    assert sorted(os.listdir(out)) == ["mini.tar.gz", "mini.tar.gz.sha256"]  # no temp left


# --------------------------------------------------------------------------------------------
# 2. the manifest first: nothing it does not vouch for is written


def _sparse_bundle(tmp_path: Path, fmt: str, manifest: dict) -> Path:
    """A real GNU tar archive: the manifest first, then a 10 GiB sparse ``tree/bomb`` (a hole)."""
    tmp_path.mkdir(exist_ok=True)
    stage = tmp_path / "stage"
    (stage / TOP / "tree").mkdir(parents=True)
    (stage / TOP / "manifest.json").write_text(json.dumps(manifest))
    with open(stage / TOP / "tree" / "bomb", "wb") as f:
        f.truncate(10 << 30)
    raw = tmp_path / "bomb.tar"
    argv = ["tar", "--sparse", f"--format={fmt.split('-')[0]}", "-cf", str(raw), "-C", str(stage),
            f"{TOP}/manifest.json", f"{TOP}/tree/bomb"]
    if "-" in fmt:
        argv.insert(2, f"--sparse-version={fmt.split('-')[1]}")
    subprocess.run(argv, check=True)
    shutil.rmtree(stage)
    bomb = tmp_path / "bomb.tar.gz"
    bomb.write_bytes(gzip.compress(raw.read_bytes()))
    raw.unlink()
    assert bomb.stat().st_size < 64 << 10
    return bomb


@pytest.mark.parametrize("fmt", ["gnu", "posix-1.0", "posix-0.1"])
@pytest.mark.parametrize("listed", [False, True], ids=["unlisted", "listed"])
def test_a_sparse_bomb_is_refused_before_anything_is_written(tmp_path, honest, target_env, fmt, listed):
    """The reported break: a small bundle holding a 10 GiB sparse member the manifest does not list
    was extracted in full ("no space") before its manifest was read."""
    m = manifest_of(honest)
    if listed:
        m["files"].append({"path": "bomb", "type": "file", "size": 4096, "sha256": "0" * 64, "mode": 0o644,
                           "mtime_ns": 0, "target": None})
    bomb = _sparse_bundle(tmp_path / "in", fmt, m)
    home, tmpdir = tmp_path / "home", tmp_path / "tmpdir"
    tmpdir.mkdir()
    guard = canaries(home / "artifacts", tmp_path)
    env = target_env("3.5.1", compile_version="3.5.1")
    e = {"ROCMBUILD_HOME": str(home), "TMPDIR": str(tmpdir)}
    for dry in ([], ["--dry-run"]):
        r = run("apply", "--artifact", str(bomb), "--env", str(env.prefix), "--json", *dry, env=e, fsize=64 << 20)
        assert r.returncode == EXIT_BUILD, r.stdout + r.stderr
        err = json.loads(r.stdout)["error"]
        assert err["details"]["member"] == f"{TOP}/tree/bomb" and "sparse" in err["details"]["reason"]
        assert "nothing was extracted" in err["message"]
    assert_intact(guard)
    assert leftovers(home) == [] and list(tmpdir.iterdir()) == []


def _extra(name: str, data: bytes):
    return entry(name, data=data)


def _bigger(m, data):
    return (m, data + b"more") if m.name == LIB else (m, data)


def _as_link(m, data):
    if m.name == LIB:
        m = tarfile.TarInfo(m.name)
        m.type, m.linkname = tarfile.SYMTYPE, "libMIOpen.so.1"
        return m, None
    return m, data


CASES = {
    "unlisted file": (dict(extra=[_extra(f"{TOP}/tree/lib/extra.so", b"x" * 100)]), f"{TOP}/tree/lib/extra.so",
                      "not listed"),
    "bigger than declared": (dict(change=_bigger), LIB, "where the manifest declares"),
    "manifest last": (dict(order=lambda r: r[0].name.endswith("manifest.json")), None,
                      "a bundle's manifest is its first member"),
    "outside the tree": (dict(extra=[_extra(f"{TOP}/provenance.json", b"{}")]), f"{TOP}/provenance.json",
                         "not below"),
    "a second manifest": (dict(extra=[_extra(f"{TOP}/manifest.json", b"{}")]), f"{TOP}/manifest.json", "not below"),
    "duplicate": (dict(extra=[_extra(LIB, b"evil")]), LIB, "duplicate"),
    "link for a file": (dict(change=_as_link), LIB, "a symlink where the manifest lists a file"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_the_manifest_does_not_vouch_for_is_refused(tmp_path, honest, case):
    kw, member, reason = CASES[case]
    evil = repack(honest, tmp_path / "in" / "evil.tar.gz", **kw)
    home = tmp_path / "home"
    guard = canaries(home / "artifacts", tmp_path)
    errors = []
    for do in (bundle.inspect, bundle.import_bundle):
        with pytest.raises(FetchError) as ei:
            do(str(evil), home=home)
        assert ei.value.exit_code == EXIT_BUILD and reason in ei.value.message, ei.value.message
        assert "nothing was extracted" in ei.value.message
        if member is not None:
            assert ei.value.details["member"] == member
        errors.append(ei.value.message)
    assert errors[0] == errors[1]  # the dry run says what the import says
    assert_intact(guard)
    assert leftovers(home) == []


def test_a_missing_member_is_refused_before_writing(tmp_path, honest):
    evil = tmp_path / "evil.tar.gz"
    write_tar(evil, [(m, d) for m, d in members(honest) if m.name != LIB])
    with pytest.raises(FetchError) as ei:
        bundle.import_bundle(str(evil), home=tmp_path / "home")
    assert "has no lib/libMIOpen.so.1.0" in ei.value.message and leftovers(tmp_path / "home") == []


def test_a_declared_total_that_does_not_fit_is_refused_before_writing(tmp_path, honest, mocker):
    real = os.fstatvfs
    mocker.patch.object(os, "fstatvfs", lambda fd: os.statvfs_result((*real(fd)[:4], 1, *real(fd)[5:])))
    home = tmp_path / "home"
    with pytest.raises(BuildFilesystemError) as ei:
        bundle.import_bundle(str(honest), home=home)
    assert ei.value.exit_code == EXIT_BUILD and "no space" in ei.value.message and "declares" in ei.value.message
    assert leftovers(home) == []


def test_hardlinks_of_an_older_bundle_become_copies(tmp_path):
    tree = [entry("lib", "dir"), entry("lib/a.so", data=b"A" * 5000), entry("lib/b.so", "hardlink", link="lib/a.so"),
            entry("lib/a.so.1", "symlink", link="a.so")]
    ok = tmp_path / "ok.tar.gz"
    write_tar(ok, bundle_entries(tree))
    art = bundle.import_bundle(str(ok), home=tmp_path / "home")
    a, b = art.file("lib/a.so"), art.file("lib/b.so")
    assert a.read_bytes() == b.read_bytes() == b"A" * 5000 and a.stat().st_ino != b.stat().st_ino
    assert art.intact() == [] and art.bytes_problems() == [] and os.readlink(art.file("lib/a.so.1")) == "a.so"
    assert art.file("lib/a.so").stat().st_mode & 0o777 == 0o444  # sealed
    # a hardlink to a file the manifest lists with other bytes
    bad = tmp_path / "bad.tar.gz"
    listing = json.loads(bundle_entries(tree)[0][1])
    listing["files"][1]["sha256"] = "1" * 64
    write_tar(bad, bundle_entries(tree, listing))
    with pytest.raises(FetchError) as ei:
        bundle.import_bundle(str(bad), home=tmp_path / "home2")
    assert "not a file the manifest lists with the same bytes" in ei.value.message


def test_a_bundle_written_the_old_way_still_imports(tmp_path, txn_world):
    """Bundles exported before the reproducible format: the manifest first with the cache's times,
    owners and modes, then ``tarfile.add`` of the whole tree (directories included)."""
    art = txn_world.artifacts["mini"]
    old = tmp_path / "old.tar.gz"
    with tarfile.open(old, "w:gz") as tf:
        data = (json.dumps(art.manifest.to_json(), indent=2, sort_keys=True, default=str) + "\n").encode()
        info = tf.gettarinfo(str(art.path / "manifest.json"), arcname=f"{TOP}/manifest.json")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        tf.add(art.tree, arcname=f"{TOP}/tree")
    imported = bundle.import_bundle(str(old), home=tmp_path / "home")
    assert imported.manifest == art.manifest and imported.intact() == [] and imported.bytes_problems() == []


# --------------------------------------------------------------------------------------------
# 4. reproducible bundles


def test_the_same_artifact_exports_to_the_same_bytes(tmp_path, txn_world):
    art = txn_world.artifacts["mini"]
    home = tmp_path / "home"
    shutil.copytree(art.path, home / "artifacts" / art.key, symlinks=True)  # a private copy: its times are touched below
    first = run("export", art.key, "-o", str(tmp_path / "one") + "/", "--json", env={"ROCMBUILD_HOME": str(home)})
    assert first.returncode == 0, first.stderr
    cached = home / "artifacts" / art.key
    for p in [cached / "manifest.json", cached / "identity.json", *[d for d in cached.rglob("*") if d.is_dir()]]:
        os.utime(p, (1_000_000, 1_000_000))  # what a copy or a backup restore does; file bytes and times stay
    other = tmp_path / "other-user"
    other.mkdir()
    second = run("export", art.key, "-o", str(tmp_path / "two" / "b.tar.gz"), "--json", umask=0o027,
                 env={"ROCMBUILD_HOME": str(home), "HOME": str(other), "TZ": "Asia/Kolkata", "USER": "nobody"})
    assert second.returncode == 0, second.stderr
    one, two = Path(json.loads(first.stdout)["file"]), Path(json.loads(second.stdout)["file"])
    assert one.read_bytes() == two.read_bytes()
    raw = one.read_bytes()
    assert raw[3] & 0x08 == 0 and raw[4:8] == b"\0\0\0\0"  # gzip: no file name, no time
    with tarfile.open(one) as tf:
        ms = tf.getmembers()
    assert ms[0].name == f"{TOP}/manifest.json"
    names = [tuple(m.name.split("/")) for m in ms[1:]]
    assert names == sorted(names) and names[0] == (TOP, "tree")
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in ms} == {(0, 0, "", "", 0)}
    assert {m.mode for m in ms if m.isfile()} <= {0o644, 0o755} and all(m.mode == 0o755 for m in ms if m.isdir())
    imported = bundle.import_bundle(str(two), home=tmp_path / "machine-b")
    assert imported.manifest == art.manifest and imported.intact() == [] and imported.bytes_problems() == []
