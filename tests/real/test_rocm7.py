"""The seed's story in real bytes: Debian's real MIOpen packages, swapped by rocmbuild running
inside a Debian sid root, into venvs whose torch asks the real ``miopenGetVersion``.

The root (tests/support/rocm7root.py) holds the runtime the real MIOpen 3.5.1 needs to load
(``libmiopen1 7.2.4+dfsg-1`` of experimental: HIP 7, rocBLAS 5), sid's HIP 6 runtime (a ROCm 6
torch's ``libamdhip64.so.6``) and both ``.deb`` files in
``/debs``: 7.2.4+dfsg-1 (MIOpen 3.5.1 WITH the gfx115x batch-norm fix, ``MIO_BN_GFX115X`` in its
bytes) and 6.4.3+dfsg-1+b1 (MIOpen 3.4.0 without it). rocmbuild is installed from this checkout
into a venv inside (tests/support/rocm7session.py); everything runs through ``chroot``.

Runs as root only (mount, chroot). ``ROCMBUILD_SKIP_ROCM7=1`` skips it; ``ROCMBUILD_TEST_ROCM7_ROOT=DIR``
uses a full root made by the shared rocm7-root.sh (it also holds MIOpen 3.4.0's runtime: the case
that loads the real 3.4.0 runs only there) instead of the cached small one. Either root is the
lower layer of an overlay: never written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.rocm7root import (DEBS, MIOPEN_NEW, Mounts, RootError, ensure_small_root, mounts_below, remove_tree,
                                     runtime_of)
from tests.support.rocm7session import VENV, RootSession, build_standin, deps_layer, session_dir
from tests.support.snapshots import inodes, snapshot

pytestmark = pytest.mark.slow

SKIP_ENV = "ROCMBUILD_SKIP_ROCM7"
ROOT_ENV = "ROCMBUILD_TEST_ROCM7_ROOT"
SO = "usr/lib/x86_64-linux-gnu/libMIOpen.so.1.0"
FIX = "gfx115x batch-norm fix"
CONTAINS = f'contains = [{{ name = "{FIX}", grep = "MIO_BN_GFX115X", path = "lib/x86_64-linux-gnu" }}]'


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def rocm7():
    """The session inside the root: rocmbuild installed, the facts of both .deb files, a canary."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1")
    if os.geteuid() != 0:
        pytest.skip("the ROCm 7 root needs root (mmdebstrap, mount, chroot): run as root, or see docs/testing.md")
    given = os.environ.get(ROOT_ENV)
    if given:
        lower, full = Path(given), True
        missing = [n for n in DEBS.values() if not (lower / "debs" / n).is_file()]
        if missing or not (lower / "usr/bin/python3").exists():
            pytest.fail(f"{ROOT_ENV}={given} is not a ROCm 7 root: it needs usr/bin/python3 and debs/{', debs/'.join(DEBS.values())} "
                        f"(missing: {', '.join(missing) or 'usr/bin/python3'}); make one with rocm7-root.sh", pytrace=False)
    else:
        try:
            lower, full = ensure_small_root(log=print), False
        except RootError as exc:
            pytest.skip(f"the small ROCm 7 root cannot be made: {exc}")
    try:
        deps_layer(lower)  # rocmbuild's dependencies from PyPI, once per root (cached)
    except RootError as exc:
        pytest.skip(f"rocmbuild's dependencies cannot be installed in the ROCm 7 root: {exc}")
    work = session_dir()
    s = RootSession(lower, work / "session", full=full)
    try:
        s.start()  # a broken install of this checkout fails the session (not a skip)
        canary = work / "canary.bin"
        canary.write_bytes(os.urandom(4096))
        for version, name in DEBS.items():
            out = f"/tmp/deb-{version}"
            s.run_checked(["dpkg-deb", "-x", f"/debs/{name}", out], f"dpkg-deb -x {name}")
            s.facts[version] = {"deb": f"/debs/{name}", "deb_sha": sha(s.host(f"/debs/{name}")),
                                "so": s.host(f"{out}/{SO}"), "so_sha": sha(s.host(f"{out}/{SO}")),
                                "grep": s.host(f"{out}/{SO}").read_bytes().count(b"MIO_BN_GFX115X")}
        # the premise, in the bytes: 3.5.1 carries the fix, 3.4.0 does not
        assert s.facts["3.5.1"]["grep"] > 0 and s.facts["3.4.0"]["grep"] == 0, s.facts
        # outside every root: a host file; inside the root, outside every env: the .deb files rocmbuild reads
        s.canaries = {p: p.read_bytes() for p in [canary, *(s.host(f"/debs/{n}") for n in DEBS.values())]}
        s.standins = {v: build_standin(work / f"standin-{v}.so", v) for v in ("3.5.0", "3.4.0")}
        yield s
    finally:
        try:
            s.close()
        finally:
            remove_tree(work)  # unmounts first; never descends into a mount
    assert not mounts_below(work), "a mount outlived the session"


@pytest.fixture
def canaries_stay(rocm7):
    yield
    for path, data in rocm7.canaries.items():
        assert path.read_bytes() == data, f"the canary {path} changed"


def recipe(s: RootSession, name: str, archive: str, version: str, *, sha256: str | None, fix: bool) -> str:
    """A prebuilt recipe for a libmiopen1 package; returns its path inside the root."""
    lines = [f'name = "{name}"', f'description = "Debian libmiopen1 as a prebuilt (MIOpen {version})"', "",
             "[source]", f'archive = "{archive}"']
    lines += [f'sha256 = "{sha256}"'] if sha256 else []
    lines += ['subdir = "usr"'] + ([CONTAINS] if fix else [])
    lines += ["", "[build]", 'system = "prebuilt"', "", "[install]", 'libraries = ["libMIOpen"]', "",
              "[verify]", f'version = "{version}"', 'encoding = "miopen"']
    path = f"/recipes/{name}.toml"
    s.host(path).parent.mkdir(parents=True, exist_ok=True)
    s.host(path).write_text("\n".join(lines) + "\n")
    return path


def loaded(s: RootSession, prefix: str) -> Path:
    (site,) = s.host(prefix).glob("lib/python3*/site-packages")
    return site / "torch" / "lib" / "libMIOpen.so"


def state(s: RootSession, prefix: str) -> tuple:
    return snapshot(s.host(prefix)), inodes(s.host(prefix))


def out(r) -> str:
    return r.stdout + r.stderr


def status(s: RootSession, prefix: str) -> dict:
    r = s.rb("status", "--env", prefix, "--json")
    assert r.returncode == 0, out(r)
    return json.loads(r.stdout)


def test_the_real_351_deb_over_a_stock_350_and_back(rocm7, canaries_stay):
    """The 3.5.1 .deb applied over a stock 3.5.0: torch's real miopenGetVersion says 3005001 and the
    placed file is Debian's byte for byte; rollback brings back the stand-in byte for byte."""
    s, f = rocm7, rocm7.facts["3.5.1"]
    env = s.make_env("stock350", s.standins["3.5.0"], "3.5.0")
    before = state(s, env)
    assert s.torch_version_int(env) == 3005000
    r = s.rb("apply", recipe(s, "deb-351", f"file://{f['deb']}", "3.5.1", sha256=f["deb_sha"], fix=False), "--env", env)
    assert r.returncode == 0, out(r)
    assert s.torch_version_int(env) == 3005001  # the real library answers, asked directly
    placed = loaded(s, env).resolve()
    assert sha(placed) == f["so_sha"], f"{placed} is not the libMIOpen.so.1.0 of {f['deb']}"
    r = s.rb("verify", "--env", env, "--expect", "3.5.1", "--json")
    assert r.returncode == 0, out(r)
    assert {"name": "version", "found": "3.5.1 (3005001)"}.items() <= next(
        c for c in json.loads(r.stdout)["checks"] if c["name"] == "version").items()
    st = status(s, env)
    assert st["torch"]["version_int"] == 3005001 and st["torch"]["runtime_version"] == "3.5.1"
    package = st["changes"]["in_effect"][-1]["package"]  # read from the .deb's control file
    assert (package["name"], package["version"], package["architecture"]) == ("libmiopen1", MIOPEN_NEW, "amd64")
    r = s.rb("rollback", "--env", env)
    assert r.returncode == 0, out(r)
    assert state(s, env) == before  # content, modes, links and the original inodes
    assert sha(loaded(s, env)) == sha(s.standins["3.5.0"])
    assert s.torch_version_int(env) == 3005000


def test_the_fix_is_found_in_the_351_bytes(rocm7, canaries_stay):
    """The 3.5.1 .deb declared to carry the gfx115x fix: MIO_BN_GFX115X is in its libMIOpen, so it is
    applied, and status names the fix among what is in effect."""
    s, f = rocm7, rocm7.facts["3.5.1"]
    env = s.make_env("fix350", s.standins["3.5.0"], "3.5.0")
    r = s.rb("apply", recipe(s, "deb-351-fix", f"file://{f['deb']}", "3.5.1", sha256=f["deb_sha"], fix=True), "--env", env)
    assert r.returncode == 0, out(r)
    assert s.torch_version_int(env) == 3005001
    assert FIX in status(s, env)["changes"]["in_effect"][-1]["fixes"]


def test_the_340_deb_declared_to_carry_the_fix_is_refused(rocm7, canaries_stay):
    """MIOpen 3.4.0 has no MIO_BN_GFX115X in its bytes: declared to carry the fix, it is refused
    (exit 2) naming the fix, before anything in the env changes."""
    s, f = rocm7, rocm7.facts["3.4.0"]
    env = s.make_env("stock340", s.standins["3.4.0"], "3.4.0")
    before = state(s, env)
    r = s.rb("apply", recipe(s, "deb-340-fix", f"file://{f['deb']}", "3.4.0", sha256=f["deb_sha"], fix=True),
             "--env", env)
    assert r.returncode == 2, out(r)
    assert FIX in out(r)
    assert state(s, env) == before
    assert s.torch_version_int(env) == 3004000


def test_a_torch_compiled_against_34_refuses_the_real_351_before_any_swap(rocm7, canaries_stay):
    """The real 3.5.1 under a torch compiled against MIOpen 3.4: PyTorch for ROCm needs the same
    major.minor, so rocmbuild refuses before any swap, naming both versions."""
    s, f = rocm7, rocm7.facts["3.5.1"]
    env = s.make_env("torch34", s.standins["3.4.0"], "3.4.0")
    before = state(s, env)
    r = s.rb("apply", recipe(s, "deb-351-plain", f"file://{f['deb']}", "3.5.1", sha256=f["deb_sha"], fix=False),
             "--env", env)
    assert r.returncode == 2, out(r)
    text = out(r)
    assert "3.4.0" in text and "3.5.1" in text and "nothing was changed" in text, text
    assert state(s, env) == before
    ch = status(s, env)["changes"]
    assert ch["in_effect"] == [] and ch["unfinished"] == [], ch  # no transaction was started


def test_status_of_an_env_holding_the_real_340(rocm7, canaries_stay):
    """The real MIOpen 3.4.0 loaded by a torch compiled against it: status reports 3.4.0 (3004000).
    Loading it needs HIP 6 and rocBLAS 4: only the full root has them."""
    if not rocm7.full:
        pytest.skip(f"the real 3.4.0 loads only with sid's rocBLAS 4 (4 GB), not in the small root: set {ROOT_ENV}")
    s = rocm7
    env = s.make_env("real340", s.facts["3.4.0"]["so"], "3.4.0")
    st = status(s, env)
    assert st["torch"]["version_int"] == 3004000 and st["torch"]["runtime_version"] == "3.4.0", st["torch"]
    (lib,) = [x for x in st["libraries"] if x["kind"] == "miopen"]
    assert lib["version"] == "3.4.0" and lib["path"].endswith("torch/lib/libMIOpen.so")
    assert s.torch_version_int(env) == 3004000


def test_an_apt_archive_inside_the_root(rocm7, canaries_stay):
    """``archive = "apt:libmiopen1=7.2.4+dfsg-1"``: apt-get download from the root's own sources."""
    s, f = rocm7, rocm7.facts["3.5.1"]
    env = s.make_env("apt350", s.standins["3.5.0"], "3.5.0")
    r = s.rb("apply", recipe(s, "apt-351", f"apt:libmiopen1={MIOPEN_NEW}", "3.5.1", sha256=f["deb_sha"], fix=False),
             "--env", env)
    assert r.returncode == 0, out(r)
    assert sha(loaded(s, env).resolve()) == f["so_sha"]
    assert s.torch_version_int(env) == 3005001


def test_the_runtime_is_the_packages_depends_less_its_test_data():
    shown = ("Package: libmiopen1\nVersion: 7.2.4+dfsg-1\nDepends: libclang-common-22-dev, libmiopen-tests-data "
             "(= 7.2.4+dfsg-1), libamdhip64-7 (>= 7.1.0), libfoo1 | libfoo2, librocblas5 (>= 7.2.3~)\n"
             "Description: x\n Depends: not a field\n")
    assert runtime_of(shown) == ["libclang-common-22-dev", "libamdhip64-7", "libfoo1", "librocblas5"]
    with pytest.raises(RootError, match="no Depends"):
        runtime_of("Package: libmiopen1\n")


@pytest.fixture
def as_root():
    if os.geteuid() != 0:
        pytest.skip("mount needs root")


def test_a_sessions_mounts_go_and_its_dev_is_private(as_root, tmp_path):
    """What Mounts.system() mounts is a proc and a tmpfs /dev of its own (never the host's /dev);
    close() leaves nothing mounted; remove_tree unmounts what a killed session left, then removes."""
    root = tmp_path / "r"
    m = Mounts(root)
    try:
        m.system()
        dev = root / "dev"
        assert os.major((dev / "null").stat().st_rdev) == 1 and os.minor((dev / "null").stat().st_rdev) == 3
        assert (dev / "null").stat().st_dev != Path("/dev/null").stat().st_dev  # not the host's devtmpfs
        (dev / "null").write_bytes(b"x")  # a working device
        assert sorted(p.name for p in mounts_below(root)) == ["dev", "proc"]
    finally:
        m.close()
    assert mounts_below(root) == []
    left = Mounts(root)
    left.system()  # as a killed session would leave them
    remove_tree(root)
    assert not root.exists() and mounts_below(tmp_path) == []
    assert Path("/dev/null").exists() and Path("/proc/self").exists()


def test_a_rocm6_torch_refuses_the_rocm7_library_before_any_swap(rocm7, canaries_stay):
    """A torch that loads the real HIP 6 (sid's libamdhip64.so.6, as a ROCm 6 wheel does) and the
    real 3.5.1 of ROCm 7.2, which needs libamdhip64.so.7: refused before any swap, naming both."""
    s, f = rocm7, rocm7.facts["3.5.1"]
    hip6 = "/usr/lib/x86_64-linux-gnu/libamdhip64.so.6"
    if not s.host(hip6).exists():
        pytest.skip(f"this root has no {hip6} (sid's libamdhip64-6): a small root older than format 3?")
    env = s.make_env("rocm6", s.standins["3.5.0"], "3.5.0", extra_libs=(hip6,))
    before = state(s, env)
    r = s.rb("apply", recipe(s, "deb-351-on-6", f"file://{f['deb']}", "3.5.1", sha256=f["deb_sha"], fix=False),
             "--env", env)
    assert r.returncode == 2, out(r)
    assert "libamdhip64.so.7" in out(r) and "libamdhip64.so.6" in out(r), out(r)
    assert state(s, env) == before


MIOPEN_SOURCE_ENV = "ROCMBUILD_TEST_MIOPEN_SOURCE"
MIOPEN_HOME_ENV = "ROCMBUILD_TEST_MIOPEN_HOME"


def test_the_real_miopen_built_by_the_rocm72_compiler_applies_and_rolls_back(rocm7, canaries_stay, tmp_path):
    """Optional, too slow for CI (1h51m on 2 cores): examples/rocm7/miopen-3.3.0-rocm7.toml builds the
    last develop of ROCm/MIOpen (MIOpen 3.3.0) with the root's clang-22 for gfx1151; the result is
    applied to a venv whose torch was compiled against 3.3 (torch's real miopenGetVersion says
    3003000, the placed file is the artifact's) and rolled back byte for byte.
    Needs the full root (ROCMBUILD_TEST_ROCM7_ROOT) and ROCMBUILD_TEST_MIOPEN_SOURCE, that source as
    a git URL or path inside the root (the fetchable snapshot lacks 4 blobs: docs/miopen.md says how
    to commit it without them); ROCMBUILD_TEST_MIOPEN_HOME, a cache home inside the root that may
    already hold the build (a cache hit then takes seconds)."""
    source = os.environ.get(MIOPEN_SOURCE_ENV)
    if not (os.environ.get(ROOT_ENV) and source):
        pytest.skip(f"the real MIOpen build needs {ROOT_ENV} (the full root) and {MIOPEN_SOURCE_ENV} "
                    "(ROCm/MIOpen develop inside it): 45 minutes to two hours on 2 cores")
    s = rocm7
    home = os.environ.get(MIOPEN_HOME_ENV, "/root/rocmbuild-home")
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "rocm7", s.host("/recipes/rocm7"),
                    dirs_exist_ok=True)
    toml = "/recipes/rocm7/miopen-3.3.0-rocm7.toml"
    how = ("--source", source, "--ref", "develop", "--gpu-targets", "gfx1151")
    env = {"ROCMBUILD_HOME": home, "NO_COLOR": "1", "COLUMNS": "200"}

    def rb(*args: str, timeout: float = 600):
        return s.run([f"{VENV}/bin/rocmbuild", *args], timeout=timeout, env=env)

    r = rb("doctor", toml, "--gpu-targets", "gfx1151", "--json")
    assert r.returncode == 0, out(r)  # every variable resolved on Debian's layout; no GPU is a warning
    r = rb("build", toml, *how, "--json", timeout=4 * 3600)
    assert r.returncode == 0, out(r)
    built = json.loads(r.stdout)
    assert built["version"] == "3.3.0", built
    lib = s.host(f"{home}/artifacts/{built['key']}/tree/lib/libMIOpen.so.1.0")
    prefix = s.make_env("torch33", build_standin(tmp_path / "standin-3.3.0.so", "3.3.0"), "3.3.0")
    before = state(s, prefix)
    r = rb("apply", toml, *how, "--env", prefix)
    assert r.returncode == 0, out(r)
    assert s.torch_version_int(prefix) == 3003000  # the real library, asked by torch's own call
    assert sha(loaded(s, prefix)) == sha(lib)
    r = rb("rollback", "--env", prefix)
    assert r.returncode == 0, out(r)
    assert state(s, prefix) == before
