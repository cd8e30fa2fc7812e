"""GPU architecture detection: which ``gfx`` targets this machine has.

Sources, in order:

1. The KFD topology, ``/sys/class/kfd/kfd/topology/nodes/*/properties``, key
   ``gfx_target_version`` (what rocminfo itself reads; no process started). CPU nodes carry 0
   and are skipped. The number is ``major*10000 + minor*100 + stepping`` and the name is
   ``gfx{major}{minor:x}{stepping:x}``: 90000 -> gfx900, 90010 -> gfx90a, 90402 -> gfx942,
   100300 -> gfx1030, 110501 -> gfx1151, 120001 -> gfx1201.
2. ``rocminfo`` when it is on PATH and the topology lists no GPU, or ``HSA_OVERRIDE_GFX_VERSION``
   is set (the runtime then loads kernels for the overriding target, which rocminfo reports and
   the topology does not): every agent line ``Name: gfxNNNN`` (ISA lines
   ``amdgcn-amd-amdhsa--gfx...`` and CPU agents are ignored). Its failure or an empty answer
   falls back to the topology's answer.

``ROCMBUILD_SYSFS_ROOT`` (or the ``sysfs_root`` argument) replaces ``/sys`` and, being an
explicit choice, skips rocminfo: tests fake a topology there. Results are deduplicated, order kept
(node order, which is the device order HIP uses).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from rocmbuild.proc import runner
from rocmbuild.errors import RocmbuildError

TOPOLOGY = Path("class/kfd/kfd/topology/nodes")
_ROCMINFO_RE = re.compile(r"^\s*Name:\s+(gfx[0-9a-f]+)\b", re.MULTILINE)


def arch_name(gfx_target_version: int) -> str | None:
    """110501 -> "gfx1151"; 0 (a CPU node) -> None."""
    v = int(gfx_target_version)
    if v <= 0:
        return None
    major, minor, step = v // 10000, (v // 100) % 100, v % 100
    return f"gfx{major}{minor:x}{step:x}"


def _dedupe(items) -> list[str]:
    out: list[str] = []
    for i in items:
        if i and i not in out:
            out.append(i)
    return out


def from_rocminfo(text: str) -> list[str]:
    return _dedupe(_ROCMINFO_RE.findall(text))


def from_topology(root: Path) -> list[str]:
    """Architectures from a KFD topology below ``root`` (a sysfs root such as /sys)."""
    nodes_dir = Path(root) / TOPOLOGY
    try:
        nodes = sorted((p for p in nodes_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    except OSError:
        return []
    found = []
    for node in nodes:
        try:
            text = (node / "properties").read_text()
        except OSError:
            continue
        m = re.search(r"^gfx_target_version\s+(\d+)\s*$", text, re.MULTILINE)
        if m:
            found.append(arch_name(int(m.group(1))))
    return _dedupe(found)


def detect(*, sysfs_root: Path | None = None) -> list[str]:
    """The machine's GPU architectures, e.g. ``["gfx1151"]``; empty when none is found."""
    env_root = os.environ.get("ROCMBUILD_SYSFS_ROOT")
    root = Path(sysfs_root) if sysfs_root is not None else Path(env_root or "/sys")
    found = from_topology(root)
    if sysfs_root is not None or env_root or (found and not os.environ.get("HSA_OVERRIDE_GFX_VERSION")):
        return found
    if runner.which("rocminfo"):
        try:
            done = runner.capture(["rocminfo"], timeout=60)
            if done.returncode == 0 and (archs := from_rocminfo(done.stdout)):
                return archs
        except (RocmbuildError, subprocess.TimeoutExpired, OSError):
            pass
    return found


def source_description(*, sysfs_root: Path | None = None) -> str:
    """Where :func:`detect` looks, for messages."""
    env_root = os.environ.get("ROCMBUILD_SYSFS_ROOT")
    root = Path(sysfs_root) if sysfs_root is not None else Path(env_root or "/sys")
    where = str(root / TOPOLOGY)
    if sysfs_root is None and not env_root and runner.which("rocminfo"):
        return f"{where}, then rocminfo"
    return where
