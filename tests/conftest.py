"""Every shared fixture of the suite, registered here (test modules never import fixtures).

Each is a thin wrapper over a world builder of ``tests/support`` that adds what pytest owns:
scope, ``tmp_path`` and ``monkeypatch``. The expensive worlds (the monorepo, the library builds,
the artifact cache) are made once per session and copied or pointed at per test.
"""

from __future__ import annotations

import gc
import os
import shutil
import uuid
from pathlib import Path

import pytest

from tests.support import forkserver, leaks
from tests.support.envs import make_env
from tests.support.machine import write_kfd_topology
from tests.support.monorepo import Monorepo, make_monorepo
from tests.support.project import build_library
from tests.support.therock import make_therock_env
from tests.support import registry
from tests.support.world import World, build_world


@pytest.fixture(scope="session", autouse=True)
def _no_process_survives_the_session():
    """Fail the session if any process it started is still running at its end (then kill them).

    The session marks its environment (``ROCMBUILD_TEST_SESSION=<uuid>``, inherited by every
    child) and records what already ran; at the end, the processes that descend from pytest or
    carry the marker are listed, killed, and reported as an error (tests/support/leaks.py)."""
    marker = uuid.uuid4().hex
    old = os.environ.get(leaks.MARKER)
    os.environ[leaks.MARKER] = marker
    before = leaks.session_processes(os.getpid(), marker)
    try:
        yield marker
    finally:
        if old is None:
            os.environ.pop(leaks.MARKER, None)
        else:
            os.environ[leaks.MARKER] = old
    forkserver.close()  # rb()'s fork server (tests/support/forkserver.py) lives as long as the session
    gc.collect()  # objects that own a helper process (GitPython's `git cat-file`) end it when collected
    left = leaks.survivors(os.getpid(), marker, before)
    if left:
        listing = leaks.describe(left)
        leaks.kill(left)
        pytest.fail(f"{len(left)} process(es) started by the test session outlived it (now killed):\n{listing}\n"
                    "a test that starts processes must kill their process group in a finally/teardown",
                    pytrace=False)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own cache/state home and config dir; nothing touches ~/.cache."""
    monkeypatch.setenv("ROCMBUILD_HOME", str(tmp_path / "rocmbuild-home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.delenv("ROCMBUILD_RECIPES", raising=False)
    monkeypatch.delenv("ROCMBUILD_FAILPOINTS", raising=False)
    monkeypatch.delenv("ROCMBUILD_CONFIG", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    monkeypatch.delenv("ROCMBUILD_PAUSEPOINTS", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.delenv("CONDA_EXE", raising=False)  # conda-like test envs are activated by rocmbuild's own bash run
    monkeypatch.delenv("MAMBA_EXE", raising=False)


@pytest.fixture(scope="session")
def _monorepo_template(tmp_path_factory) -> Monorepo:
    return make_monorepo(tmp_path_factory.mktemp("monorepo-template") / "rocm-libraries")


@pytest.fixture
def monorepo(_monorepo_template, tmp_path) -> Monorepo:
    """A private copy of the fixture monorepo (tests may add commits to it)."""
    dst = tmp_path / "upstream" / "rocm-libraries"
    shutil.copytree(_monorepo_template.path, dst, symlinks=True)
    t = _monorepo_template
    return Monorepo(dst, dst.as_uri(), t.c1, t.c_release, t.c_develop, t.c_fix)


@pytest.fixture(scope="session")
def fixture_libs(tmp_path_factory):
    """Real libMIOpen builds at several versions, built once per session: {version: libdir}."""
    cache: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in cache:
            cache[version] = build_library(version, tmp_path_factory.mktemp(f"lib-{version}"))
        return cache[version]

    return get


@pytest.fixture(scope="session")
def txn_world(_monorepo_template, tmp_path_factory) -> World:
    """A ROCMBUILD_HOME with the artifacts of ``mini``, ``mini-fix`` and ``mini-develop``, built once
    per session (tests/support/world.py)."""
    return build_world(tmp_path_factory.mktemp("txn-home"), tmp_path_factory.mktemp("txn-recipes"),
                       _monorepo_template.url)


@pytest.fixture
def txn_home(txn_world, monkeypatch) -> World:
    """Points ``ROCMBUILD_HOME`` at the session's ``txn_world`` (instead of this test's empty home),
    so builds and applies of its recipes are cache hits."""
    monkeypatch.setenv("ROCMBUILD_HOME", str(txn_world.home))
    return txn_world


# --------------------------------------------------------------------------------------------
# target environments and a faked GPU (tests/support/envs.py, tests/support/machine.py)


@pytest.fixture
def target_env(fixture_libs, tmp_path):
    """Factory for fake-torch target environments (real venvs, real libMIOpen builds).

    ``target_env(version="3.5.1", *, layout="conda", name=None, **make_env_kwargs) -> Env``:
    ``version`` is the libMIOpen the env contains (built by ``fixture_libs``); everything else
    (``compile_version``, ``hip``, knobs such as ``extra_libs`` or ``import_error``) goes to
    :func:`tests.support.envs.make_env`. Each call makes a new env under ``tmp_path``.
    """
    counter = {"n": 0}

    def make(version: str = "3.5.1", *, layout: str = "conda", name: str | None = None, **kwargs):
        counter["n"] += 1
        root = tmp_path / (name or f"env{counter['n']}-{layout}-{version}")
        return make_env(root, layout=layout, lib_dir=fixture_libs(version), **kwargs)

    return make


@pytest.fixture
def therock_env(fixture_libs, tmp_path):
    """Factory for TheRock-wheel targets (tests/support/therock.py): ``therock_env(version="3.5.0",
    *, generation="per-family"|"multi-arch", compile_version=..., preload=("miopen",), **knobs) -> Env``,
    a fake torch whose ``_rocm_init.py`` preloads MIOpen through a stand-in ``rocm_sdk``."""
    counter = {"n": 0}

    def make(version: str = "3.5.0", *, generation: str = "per-family", **kwargs):
        counter["n"] += 1
        root = tmp_path / f"therock{counter['n']}-{generation}-{version}"
        return make_therock_env(root, lib_dir=fixture_libs(version), generation=generation, **kwargs)

    return make


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """Factory: ``fake_gpu(110501, ...)`` writes a KFD topology (node 0 is a CPU, then one node per
    ``gfx_target_version``) and sets ``ROCMBUILD_SYSFS_ROOT`` to it, so ``rocmbuild.environment.gpu.detect()``
    sees those GPUs (``fake_gpu()``: a machine without a GPU). Returns the sysfs root."""

    def make(*versions: int) -> Path:
        root = write_kfd_topology(tmp_path / "fake-sysfs", versions)
        monkeypatch.setenv("ROCMBUILD_SYSFS_ROOT", str(root))
        return root

    return make


@pytest.fixture
def oci_registry(tmp_path):
    """A real OCI registry (docker-registry) on 127.0.0.1, no auth; killed in teardown."""
    why = registry.missing()
    if why:
        pytest.fail(why)
    server = registry.start(tmp_path / "registry")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def oci_registry_auth(tmp_path):
    """The same with htpasswd basic auth (user ``registry.USER``, password ``registry.PASSWORD``)."""
    why = registry.missing()
    if why:
        pytest.fail(why)
    server = registry.start(tmp_path / "registry-auth", auth=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def static_http(tmp_path):
    """A directory served over plain HTTP on 127.0.0.1 (a static web cache)."""
    server = registry.static_server(tmp_path / "www")
    try:
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------
# the fast lane (docs/testing.md "The fast lane"): `python -m pytest -m "not slow"`

#: integration modules whose tests each build the fixture project with CMake, start several
#: `python -m rocmbuild` processes, or start servers (measured with --durations, docs/testing.md);
#: their modules that set ``pytestmark = pytest.mark.slow`` themselves need no entry here
SLOW_MODULES = frozenset({
    "test_bundle", "test_cache_immutable", "test_cache_key", "test_changed", "test_cli_build", "test_demo",
    "test_envs_and_tab", "test_first_contact", "test_fixes", "test_fleet", "test_gpu_targets", "test_housekeeping",
    "test_json_contract", "test_leak_check", "test_messages", "test_packaging", "test_playbooks", "test_progress",
    "test_pull", "test_readme_commands", "test_remote_cache", "test_reproducible", "test_retry", "test_safe_text", "test_source",
    "test_substitution", "test_words",
})


def pytest_collection_modifyitems(config, items):
    """Mark every test of :data:`SLOW_MODULES` (under tests/integration) ``slow``."""
    for item in items:
        path = Path(str(item.fspath))
        if path.parent.name == "integration" and path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def pytest_addoption(parser):
    """``--crash-runs N``: how many runs the crash campaign test makes (tests/integration/
    test_crash_campaign.py; default a short campaign, or ``ROCMBUILD_CRASH_RUNS``)."""
    parser.addoption("--crash-runs", type=int, default=None, metavar="N",
                     help="runs of the crash campaign test (default 6, or $ROCMBUILD_CRASH_RUNS); "
                          "the long campaign: --crash-runs 300 (or python3 -m benchmarks.crashes --runs 300)")
