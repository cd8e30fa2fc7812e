"""GPU architecture detection from a faked KFD topology and a faked rocminfo (the GPU is what we mock)."""

from __future__ import annotations

import os

import pytest

from rocmbuild.environment import gpu


@pytest.mark.parametrize(
    "version, name",
    [
        (90000, "gfx900"), (90006, "gfx906"), (90008, "gfx908"), (90010, "gfx90a"), (90402, "gfx942"),
        (100300, "gfx1030"), (110000, "gfx1100"), (110001, "gfx1101"), (110501, "gfx1151"), (120001, "gfx1201"),
    ],
)
def test_arch_name(version, name):
    assert gpu.arch_name(version) == name


def test_cpu_node_has_no_arch():
    assert gpu.arch_name(0) is None


def test_detect_from_topology(fake_gpu, monkeypatch):
    fake_gpu(110501, 110501, 90010)
    assert gpu.detect() == ["gfx1151", "gfx90a"]  # CPU node skipped, deduplicated, order kept


def test_detect_sysfs_root_argument(fake_gpu, monkeypatch):
    root = fake_gpu(110501)
    monkeypatch.delenv("ROCMBUILD_SYSFS_ROOT")
    assert gpu.detect(sysfs_root=root) == ["gfx1151"]


def test_no_gpu(fake_gpu, tmp_path):
    fake_gpu()
    assert gpu.detect() == []
    assert gpu.detect(sysfs_root=tmp_path / "nothing-here") == []


def test_topology_node_order_is_numeric(tmp_path):
    nodes = tmp_path / "class/kfd/kfd/topology/nodes"
    for i, v in ((10, 90402), (2, 110501), (0, 0)):
        (nodes / str(i)).mkdir(parents=True)
        (nodes / str(i) / "properties").write_text(f"gfx_target_version {v}\n")
    assert gpu.from_topology(tmp_path) == ["gfx1151", "gfx942"]


ROCMINFO = """\
*******
Agent 1
*******
  Name:                    AMD RYZEN AI MAX+ 395 w/ Radeon 8060S
  Device Type:             CPU
*******
Agent 2
*******
  Name:                    gfx1151
  Marketing Name:          AMD Radeon Graphics
  Device Type:             GPU
  ISA Info:
    ISA 1
      Name:                    amdgcn-amd-amdhsa--gfx1151
"""


def test_from_rocminfo():
    assert gpu.from_rocminfo(ROCMINFO) == ["gfx1151"]


def test_detect_asks_rocminfo_when_the_topology_lists_no_gpu(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "rocminfo"
    exe.write_text("#!/bin/sh\ncat <<'EOF'\n" + ROCMINFO + "EOF\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("ROCMBUILD_SYSFS_ROOT", raising=False)
    assert gpu.detect() == ["gfx1151"]


@pytest.mark.parametrize("override", [None, "11.0.0"])
def test_the_topology_answers_without_a_process_unless_an_override_is_set(tmp_path, monkeypatch, mocker, override):
    """rocminfo reads the topology too: it runs only when HSA_OVERRIDE_GFX_VERSION changes what
    the runtime uses (rocminfo then names the overriding target)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    ran = tmp_path / "ran"
    exe = bindir / "rocminfo"
    exe.write_text(f"#!/bin/sh\ntouch {ran}\ncat <<'EOF'\n" + ROCMINFO.replace("gfx1151", "gfx1100") + "EOF\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("ROCMBUILD_SYSFS_ROOT", raising=False)
    if override:
        monkeypatch.setenv("HSA_OVERRIDE_GFX_VERSION", override)
    else:
        monkeypatch.delenv("HSA_OVERRIDE_GFX_VERSION", raising=False)
    mocker.patch.object(gpu, "from_topology", return_value=["gfx1151"])  # a gfx1151 box's KFD nodes
    assert gpu.detect() == (["gfx1100"] if override else ["gfx1151"])
    assert ran.exists() == bool(override)
