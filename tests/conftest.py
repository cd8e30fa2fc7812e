"""Shared fixtures: real git repos, real libraries, an isolated ROCMBUILD_HOME."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import Monorepo, build_library, make_monorepo


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own cache/state home and config dir; nothing touches ~/.cache."""
    monkeypatch.setenv("ROCMBUILD_HOME", str(tmp_path / "rocmbuild-home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.delenv("ROCMBUILD_RECIPES", raising=False)
    monkeypatch.delenv("ROCMBUILD_FAILPOINTS", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)


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
