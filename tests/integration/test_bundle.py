"""Artifact bundles (export / import) and lock files, on real artifacts built with cmake."""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import tarfile
import threading
from pathlib import Path

import pytest

from rocmbuild.store import bundle, cache
from rocmbuild.errors import EXIT_BUILD, EXIT_INPUT, ArtifactError, FetchError, InputError
from rocmbuild.recipe import lockfile
from rocmbuild import recipe
from tests.support.builds import do_build, make_checkout, make_recipe


@pytest.fixture
def artifact(tmp_path):
    art, _home, _key = do_build(make_recipe(tmp_path), make_checkout(tmp_path))
    return art


def other_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "machine-b"
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))
    return home


def test_export_import_roundtrip(tmp_path, monkeypatch, artifact):
    out = bundle.export(artifact, tmp_path / "out" / "mini.tar.gz")
    assert Path(out.file).is_file()
    side = Path(out.sha256_file).read_text()
    assert side.startswith(out.sha256) and side.strip().endswith("mini.tar.gz")
    home_b = other_home(tmp_path, monkeypatch)
    imported = bundle.import_bundle(out.file, home=home_b)
    assert imported.path == home_b / "artifacts" / "imported" / artifact.key  # apart from built ones
    assert imported.manifest == artifact.manifest
    assert imported.intact() == []  # sizes, mtimes and links as the manifest says
    # never a recipe's cache hit: only apply --artifact / export KEY find it
    assert cache.lookup(artifact.key, home_b) is None
    assert cache.lookup_imported(artifact.key, home_b).path == imported.path
    prov = json.loads((imported.path / bundle.PROVENANCE).read_text())
    assert prov["kind"] == "file" and prov["source"] == str(Path(out.file).absolute())
    assert prov["bundle_sha256"] == out.sha256 and prov["sha256_checked"] is True and prov["imported"]
    # sealed: read-only files, identities recorded after the chmod
    lib = imported.file("lib/libMIOpen.so.1.0")
    assert lib.stat().st_mode & 0o222 == 0 and imported.recorded()["lib/libMIOpen.so.1.0"]["inode"] == lib.stat().st_ino
    again = bundle.import_bundle(out.file, home=home_b)  # idempotent
    assert again.path == imported.path


def test_export_to_a_directory_names_the_file(tmp_path, artifact):
    out = bundle.export(artifact, tmp_path)
    assert Path(out.file).parent == tmp_path and out.file.endswith(".tar.gz")
    assert artifact.key[:12] in out.file


def test_bad_checksum_is_refused(tmp_path, monkeypatch, artifact):
    out = bundle.export(artifact, tmp_path / "mini.tar.gz")
    Path(out.sha256_file).write_text("0" * 64 + "  mini.tar.gz\n")
    home_b = other_home(tmp_path, monkeypatch)
    with pytest.raises(FetchError) as ei:
        bundle.import_bundle(out.file, home=home_b)
    assert ei.value.exit_code == EXIT_BUILD and "sha256 mismatch" in ei.value.message
    assert not (home_b / "artifacts").exists() or not [p for p in (home_b / "artifacts").iterdir()
                                                         if not p.name.startswith(".")]


def _repack(src: Path, dst: Path, change: dict[str, bytes]) -> None:
    with tarfile.open(src) as tin, tarfile.open(dst, "w:gz") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read() if m.isfile() else None
            if m.name in change:
                data = change[m.name]
                m.size = len(data)
            tout.addfile(m, io.BytesIO(data) if data is not None else None)


def test_tampered_file_inside_is_refused(tmp_path, monkeypatch, artifact):
    out = bundle.export(artifact, tmp_path / "mini.tar.gz")
    evil = tmp_path / "evil.tar.gz"
    _repack(Path(out.file), evil, {"rocmbuild-artifact/tree/share/miopen/db/gfx1151.db.txt": b"evil\n"})
    home_b = other_home(tmp_path, monkeypatch)
    with pytest.raises(FetchError) as ei:
        bundle.import_bundle(str(evil), home=home_b)  # no .sha256 beside: per-file checks still catch it
    assert "gfx1151.db.txt" in ei.value.message
    assert not (home_b / "artifacts" / artifact.key).exists()


def test_unsafe_member_is_refused(tmp_path, monkeypatch):
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tf:
        info = tarfile.TarInfo("../../escape.txt")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"bad"))
    home_b = other_home(tmp_path, monkeypatch)
    with pytest.raises(FetchError):
        bundle.import_bundle(str(evil), home=home_b)
    assert not (tmp_path / "escape.txt").exists() and not (home_b.parent / "escape.txt").exists()


def test_not_a_bundle_and_missing_file(tmp_path, monkeypatch):
    plain = tmp_path / "plain.tar.gz"
    with tarfile.open(plain, "w:gz") as tf:
        info = tarfile.TarInfo("hello.txt")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"hi"))
    home_b = other_home(tmp_path, monkeypatch)
    with pytest.raises(InputError) as ei:
        bundle.import_bundle(str(plain), home=home_b)
    assert ei.value.exit_code == EXIT_INPUT and "not a rocmbuild artifact bundle" in ei.value.message
    with pytest.raises(InputError):
        bundle.import_bundle(str(tmp_path / "missing.tar.gz"), home=home_b)


@pytest.fixture
def http_dir(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_import_from_url_checks_sha256(tmp_path, monkeypatch, artifact, http_dir):
    served, base = http_dir
    out = bundle.export(artifact, served / "mini.tar.gz")
    home_b = other_home(tmp_path, monkeypatch)
    imported = bundle.import_bundle(f"{base}/mini.tar.gz", home=home_b)
    assert imported.manifest.key == artifact.key
    # without a .sha256 beside it and no --sha256: refused, nothing downloaded into the cache
    os.unlink(out.sha256_file)
    home_c = tmp_path / "machine-c"
    with pytest.raises(InputError) as ei:
        bundle.import_bundle(f"{base}/mini.tar.gz", home=home_c)
    assert "--sha256" in ei.value.hint
    # with an explicit --sha256 it works
    assert bundle.import_bundle(f"{base}/mini.tar.gz", home=home_c, sha256=out.sha256).key == artifact.key
    # a wrong --sha256: exit 3, the download deleted
    with pytest.raises(FetchError):
        bundle.import_bundle(f"{base}/mini.tar.gz", home=tmp_path / "machine-d", sha256="1" * 64)
    assert not list((tmp_path / "machine-d" / "downloads").glob("*.tar.gz"))


# ---------------------------------------------------------------------------------------------
# lock files


def test_lock_roundtrip_and_changed_recipe(tmp_path):
    r = make_recipe(tmp_path)
    ov = recipe.Overrides(defines=("X=1",), jobs=2)
    lock = lockfile.create(str(r.path), [], ov, "b" * 40)
    lockfile.write(lock, tmp_path / "mini.lock.json")
    assert json.loads((tmp_path / "mini.lock.json").read_text())["commit"] == "b" * 40
    name, pinned, loaded = lockfile.load(tmp_path / "mini.lock.json")
    assert pinned.ref == "b" * 40 and pinned.defines == ("X=1",) and pinned.jobs == 2
    assert recipe.load(name).name == "mini"
    # comments do not change the recipe; a changed define does
    r.path.write_text("# a comment\n" + r.path.read_text())
    lockfile.load(tmp_path / "mini.lock.json")
    r.path.write_text(r.path.read_text().replace("jobs = 2", "jobs = 1"))
    with pytest.raises(InputError) as ei:
        lockfile.load(tmp_path / "mini.lock.json")
    assert ei.value.exit_code == EXIT_INPUT and "changed since the lock" in ei.value.message


def test_bad_lock_file(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(InputError):
        lockfile.load(tmp_path / "x.json")
    with pytest.raises(InputError):
        lockfile.load(tmp_path / "missing.json")


@pytest.mark.parametrize("change", [
    {"key": "../../pwned"},
    {"data": ["../../etc"]},
    {"files+": {"path": "../outside.txt", "type": "file", "size": 1, "sha256": "0" * 64, "mode": 420, "mtime_ns": 0}},
    {"files+": {"path": "lib/evil", "type": "link", "target": "../../../etc/passwd"}},
])
def test_malicious_manifest_is_refused(tmp_path, monkeypatch, artifact, change):
    """A bundle's manifest comes from elsewhere: its key and paths must stay inside the cache/tree."""
    out = bundle.export(artifact, tmp_path / "mini.tar.gz")
    manifest = json.loads((artifact.path / "manifest.json").read_text())
    for k, v in change.items():
        if k == "files+":
            manifest["files"].append(v)
        else:
            manifest[k] = v
    evil = tmp_path / "evil.tar.gz"
    _repack(Path(out.file), evil, {"rocmbuild-artifact/manifest.json": json.dumps(manifest).encode()})
    home_b = other_home(tmp_path, monkeypatch)
    with pytest.raises(ArtifactError) as ei:  # a corrupt artifact (exit 3), naming the field
        bundle.import_bundle(str(evil), home=home_b)
    field = "files[" if "files+" in change else next(iter(change))
    assert ei.value.exit_code == EXIT_BUILD and f"'{field}" in ei.value.message and "expected" in ei.value.message
    assert not (tmp_path / "pwned").exists() and not (home_b / "pwned").exists()
    assert not (home_b / "artifacts").exists() or not [p for p in (home_b / "artifacts").iterdir()
                                                         if not p.name.startswith(".")]


def test_not_a_tarball_has_a_bundle_hint(tmp_path, monkeypatch):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"this is not a tar archive")
    with pytest.raises(FetchError) as ei:
        bundle.import_bundle(str(junk), home=other_home(tmp_path, monkeypatch))
    assert "rocmbuild export" in ei.value.hint and "source.tarball" not in ei.value.hint
