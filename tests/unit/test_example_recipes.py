"""Every recipe under examples/ parses with the current grammar, finds its patches, and each
patch says why it exists before its diff (the header `git apply` skips)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmbuild.recipe.search import load

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").rglob("*.toml"))


def test_there_are_example_recipes():
    names = {p.name for p in EXAMPLES}
    assert "miopen-3.3.0-rocm7.toml" in names and "miopen-3.5.1-deb.toml" in names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO)))
def test_example_recipe_loads_and_its_patches_say_why(path: Path):
    recipe = load(str(path))
    assert recipe.name == path.stem
    assert len(recipe.patch_files) == len(recipe.source.patches)
    for patch in recipe.patch_files:
        text = patch.read_text()
        head, sep, _ = text.partition("diff --git ")
        assert sep, f"{patch.name}: no diff"
        assert "Why" in head and len(head.strip().splitlines()) >= 3, f"{patch.name}: no header saying why"


def test_the_rocm7_recipe_names_tools_by_variable_only():
    """No layout's literal compiler path: the ROCm 7 example works on /opt/rocm and /usr alike."""
    recipe = load(str(REPO / "examples/rocm7/miopen-3.3.0-rocm7.toml"))
    env = dict(recipe.build.env)
    defines = dict(recipe.build.defines)
    assert env["CXX"] == "${HIP_CXX}"
    assert defines["CMAKE_C_COMPILER"] == "${HIP_CC}"
    assert defines["HALF_INCLUDE_DIR"] == "${HALF_INCLUDE_DIR}"
    assert defines["MIOPEN_USE_ROCBLAS"] is False  # rocBLAS 5 dropped the f8 beta API this source uses
    assert not any("/opt/rocm/llvm" in str(v) or "clang++-" in str(v) for v in [*env.values(), *defines.values()])
