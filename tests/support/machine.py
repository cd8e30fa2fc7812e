"""The host around a target: a ROCm install tree and a GPU topology, as files.

No GPU and no ROCm exist on the test machines; ``doctor`` and ``target.gpu`` read only the
presence of ROCm files and the KFD topology in sysfs, so both are written as small files and
pointed at with ``ROCM_PATH`` / ``ROCMBUILD_SYSFS_ROOT`` by the callers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROCM_FILES = ("bin/hipcc", "llvm/bin/clang++", "lib/cmake/hip/hip-config.cmake")


def make_rocm_tree(root: Path) -> Path:
    """A ROCm tree with the files doctor looks for (empty files: doctor checks presence only)."""
    for rel in ROCM_FILES:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    return root


def write_kfd_topology(root: Path, versions: tuple[int, ...]) -> Path:
    """KFD topology under ``root`` (a sysfs root): node 0 is a CPU, then one GPU node per
    ``gfx_target_version`` (e.g. 110501). Replaces any topology written before."""
    nodes = root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    if nodes.exists():
        shutil.rmtree(nodes)
    for i, v in enumerate((0,) + tuple(versions)):
        node = nodes / str(i)
        node.mkdir(parents=True)
        (node / "properties").write_text(
            f"cpu_cores_count {8 if v == 0 else 0}\nsimd_count {0 if v == 0 else 80}\n"
            f"gfx_target_version {v}\nvendor_id {0 if v == 0 else 4098}\n"
        )
    return root
