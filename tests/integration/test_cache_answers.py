"""Every read from a binary cache is bounded, and a hostile answer is one clear line (issue 26,
classes 3 and 4).

A fake registry on 127.0.0.1 (tests/support/recorder.py: it records what it was sent and can
send a body without a length until the client hangs up) serves a layer declared as 3.2 KiB and
served endlessly or offered as 20 MiB, a signature blob that never ends, layer sizes that are no
sizes, a tag list that is not JSON; a ``file://`` cache holds an 800 MiB sparse ``.sha256``, a FIFO
named ``KEY.sig`` and a symlinked bundle; and a real 1 MiB tmpfs (root only, else skipped) fills
up under a download. Each ends in a FetchError (exit 3, never "internal error"), nothing kept.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rocmbuild.config import CacheConfig
from rocmbuild.errors import BuildFilesystemError, FetchError
from rocmbuild.remote import open_cache
from rocmbuild.fs.root import Root
from tests.support import recorder
from tests.support.cli import rb
from tests.support.pushed import push_mini

KEY = "cd" * 32
REPO = "rocmbuild/cache"
CONFIG = b'{"key": "not checked here"}'


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest(layer_size, layer_digest: str) -> bytes:
    return json.dumps({"schemaVersion": 2, "config": {"digest": f"sha256:{_sha(CONFIG)}", "size": len(CONFIG)},
                       "layers": [{"digest": f"sha256:{layer_digest}", "size": layer_size}]}).encode()


TAGS = json.dumps({"name": REPO, "tags": [KEY]}).encode()


def fake_registry(*, layer_size=3277, layer=None, sig=None, tags=TAGS):
    """A registry holding tag KEY (its layer declared as ``layer_size``, served as ``layer()``:
    bytes or an endless iterator) and, when ``sig`` is given, tag KEY.sig (served as ``sig()``)."""
    digest = "ab" * 32

    def answer(method: str, path: str, headers: dict):
        p = path.split("?")[0]
        if p == f"/v2/{REPO}/manifests/{KEY}":
            return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, _manifest(layer_size, digest)
        if p == f"/v2/{REPO}/manifests/{KEY}.sig" and sig is not None:
            return 200, {}, _manifest(400, "ef" * 32)
        if p == f"/v2/{REPO}/blobs/sha256:{_sha(CONFIG)}":
            return 200, {}, CONFIG
        if p == f"/v2/{REPO}/blobs/sha256:{digest}" and layer is not None:
            return 200, {}, layer()
        if p == f"/v2/{REPO}/blobs/sha256:{'ef' * 32}" and sig is not None:
            return 200, {}, sig()
        if p == f"/v2/{REPO}/tags/list" and tags is not None:
            return 200, {"Content-Type": "application/json"}, tags
        return 404, {}, b'{"errors": []}'

    return recorder.start(answer=answer)


def _endless():
    return itertools.repeat(b"\0" * 65536)


def _url(server) -> str:
    return f"oci://{server.host}/{REPO}"


@pytest.mark.parametrize("how", ["endless, no length", "offered as 20 MiB"])
def test_a_layer_is_read_to_its_declared_size_and_no_further(tmp_path, how):
    layer = _endless if how.startswith("endless") else (lambda: b"\0" * (20 << 20))
    server = fake_registry(layer=layer)
    try:
        started = time.monotonic()
        with Root.open(tmp_path / "pulled", "pulled", create=True) as dest, pytest.raises(FetchError) as err:
            open_cache(CacheConfig(_url(server))).fetch(KEY, dest)
        assert time.monotonic() - started < 30
        assert "3277" in err.value.message and "nothing was kept" in err.value.message
        assert os.listdir(tmp_path / "pulled") == []  # the partial is gone
        assert server.server.state.streamed < (8 << 20)  # the client hung up early, not after 274 MB
    finally:
        server.stop()


def test_a_signature_blob_that_never_ends_is_cut_at_its_cap(tmp_path):
    server = fake_registry(sig=_endless)
    try:
        with pytest.raises(FetchError) as err:
            open_cache(CacheConfig(_url(server))).lookup(KEY)
        assert "larger than" in err.value.message
        assert server.server.state.streamed < (8 << 20)
    finally:
        server.stop()


@pytest.mark.parametrize("size", ["abc", [1], None, 1e400, -1, 2 ** 80, True])
def test_a_layer_size_that_is_no_size_is_one_clear_line(size):
    server = fake_registry(layer_size=size)
    try:
        r = rb("cache", "list", "--remote", _url(server), "--json")
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr
        assert "not a size" in json.loads(r.stdout)["error"]["message"]
    finally:
        server.stop()


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"tags": 5}', b"[" * 100000])
def test_a_tag_list_that_is_not_the_apis_json_is_one_clear_line(body):
    server = fake_registry(tags=body)
    try:
        r = rb("cache", "list", "--remote", _url(server), "--json")
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert "tag list" in json.loads(r.stdout)["error"]["message"] and "internal error" not in r.stderr
    finally:
        server.stop()


def _file_cache(tmp_path: Path, payload: bytes = b"bundle bytes", d: Path | None = None) -> Path:
    d = d or tmp_path / "cache"
    d.mkdir(exist_ok=True)
    (d / f"{KEY}.tar.gz").write_bytes(payload)
    (d / f"{KEY}.manifest.json").write_bytes(CONFIG)
    (d / f"{KEY}.tar.gz.sha256").write_text(f"{_sha(payload)}  {KEY}.tar.gz\n")
    return d


@pytest.mark.parametrize("kind", ["file", "http"])
def test_an_800_mib_sha256_file_is_refused_without_reading_it(tmp_path, kind, request):
    server = request.getfixturevalue("static_http") if kind == "http" else None
    d = _file_cache(tmp_path, d=server.root if server else None)
    with open(d / f"{KEY}.tar.gz.sha256", "r+b") as f:
        f.truncate(800 << 20)  # sparse: no disk used
    started = time.monotonic()
    cache = open_cache(CacheConfig(server.url if server else f"file://{d}"))
    with pytest.raises(FetchError) as err:
        cache.lookup(KEY)
    assert time.monotonic() - started < 10  # not read: refused by its size
    assert ("4096 bytes" in err.value.message or "4 KiB" in err.value.message) and err.value.exit_code == 3


def test_a_fifo_named_key_sig_does_not_hang_and_a_linked_bundle_is_refused(tmp_path):
    d = _file_cache(tmp_path)
    os.mkfifo(d / f"{KEY}.sig")
    r = rb("cache", "list", "--remote", f"file://{d}", "--json", timeout=60)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "not a regular file" in json.loads(r.stdout)["error"]["message"]
    os.unlink(d / f"{KEY}.sig")
    outside = tmp_path / "outside.tar.gz"
    os.replace(d / f"{KEY}.tar.gz", outside)
    (d / f"{KEY}.tar.gz").symlink_to(outside)
    r = rb("cache", "list", "--remote", f"file://{d}", "--json")
    assert r.returncode == 3 and "a symbolic link" in json.loads(r.stdout)["error"]["message"], r.stdout


def _mounted_tmpfs(point: Path, size: str) -> bool:
    point.mkdir(parents=True, exist_ok=True)
    return shutil.which("mount") is not None and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], capture_output=True).returncode == 0


def test_a_full_disk_during_a_download_is_exit_3_and_removes_the_partial(tmp_path):
    payload = os.urandom(3 << 20)
    d = _file_cache(tmp_path, payload)
    point = tmp_path / "small"
    if not _mounted_tmpfs(point, "1m"):
        pytest.skip("cannot mount a tmpfs here (not root?)")
    try:
        with Root.open(point, "the download directory") as dest, pytest.raises(BuildFilesystemError) as err:
            open_cache(CacheConfig(f"file://{d}")).fetch(KEY, dest)
        assert err.value.exit_code == 3 and "no space left" in err.value.message
        assert "partial download" in err.value.message and err.value.details["errno"] == "ENOSPC"
        assert os.listdir(point) == []
    finally:
        subprocess.run(["umount", str(point)], check=True)


@pytest.mark.parametrize("planted", ["a signature of nested brackets", "an 800 MiB .sha256", "a FIFO as .sig"])
def test_a_hostile_cache_entry_falls_back_to_building_here_said_once(tmp_path, monorepo, planted):
    p = push_mini(tmp_path, monorepo)
    sig, side = p.cache / f"{p.key}.sig", p.cache / f"{p.key}.tar.gz.sha256"
    if planted.startswith("a signature"):
        sig.write_bytes(b"[" * 4000)
    elif planted.startswith("an 800"):
        with open(side, "r+b") as f:
            f.truncate(800 << 20)
    else:
        sig.unlink()
        os.mkfifo(sig)
    r = rb("build", str(p.recipe), "--cache", f"file://{p.cache}", "--json", timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    d = json.loads(r.stdout)
    assert d["ok"] and not d.get("substituted"), d
    assert "internal error" not in r.stderr
    said = [line for line in r.stderr.splitlines() if f"file://{p.cache}" in line and "building here" in line]
    assert len(said) == 1, r.stderr


def test_a_gzip_bomb_is_inflated_only_to_the_cap(tmp_path):
    import resource
    import zlib

    z, zeros = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16), b"\0" * (1 << 20)
    bomb = b"".join(z.compress(zeros) for _ in range(512)) + z.flush()  # 512 MiB of gzip in about 0.5 MiB

    def answer(method: str, path: str, headers: dict):
        if path.split("?")[0] == f"/v2/{REPO}/tags/list":
            return 200, {"Content-Type": "application/json", "Content-Encoding": "gzip"}, bomb
        return 404, {}, b"{}"

    server = recorder.start(answer=answer)
    try:
        r = rb("cache", "list", "--remote", _url(server), "--json")
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert "larger than 64 MiB" in json.loads(r.stdout)["error"]["message"]
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        assert peak_mib < 400, f"a child reached {peak_mib:.0f} MiB"
    finally:
        server.stop()
