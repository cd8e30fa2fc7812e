"""The house rules of docs/architecture.md, checked on the source: which package may import which,
no module reaching into another's private names, modules under 400 lines, functions under 60."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "rocmbuild"

# Each layer may import itself and any layer after it, never one before it.
LAYERS = (
    ("cli",),
    ("flows", "doctor"),
    ("results",),
    ("swap",),
    ("target",),
    ("build",),
    ("recipe",),
    ("disk", "root", "names", "schema", "home", "locks", "runner", "reaper", "stop", "ui", "progress", "errors", "__init__"),
)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _unit(module: str) -> str:
    """``rocmbuild.swap.plan`` -> ``swap``; ``rocmbuild.disk`` -> ``disk``; ``rocmbuild`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(unit: str) -> int:
    for i, names in enumerate(LAYERS):
        if unit in names:
            return i
    raise AssertionError(f"rocmbuild.{unit} is in no layer of docs/architecture.md: add it to LAYERS there and here")


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        yield name, path, ast.parse(path.read_text(), str(path))


def _imports(tree: ast.Module, module: str):
    """(imported module, names) for every import in the module, relative ones resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            yield node.module, tuple(a.name for a in node.names)


MODULES = list(_modules())


@pytest.mark.parametrize("module,path,tree", MODULES, ids=[m for m, _, _ in MODULES])
def test_imports_follow_the_layers(module, path, tree):
    if module in ("rocmbuild.__main__", "rocmbuild.target._probe"):
        return  # the entry point imports cli; the probe runs inside the target's Python (stdlib only)
    mine = _layer(_unit(module))
    for imported, names in _imports(tree, module):
        if not imported.startswith("rocmbuild"):
            continue
        targets = [imported] if imported != "rocmbuild" else [f"rocmbuild.{n}" for n in names]
        for t in targets:
            if t == "rocmbuild.__version__":
                continue
            assert _layer(_unit(t)) >= mine, f"{module} imports {t}: a lower layer may not import a higher one"


@pytest.mark.parametrize("module,path,tree", MODULES, ids=[m for m, _, _ in MODULES])
def test_no_private_names_from_other_modules(module, path, tree):
    for imported, names in _imports(tree, module):
        if imported.startswith("rocmbuild") and imported != module:
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            assert not private, f"{module} imports private {private} from {imported}"


def test_the_probe_is_stdlib_only():
    tree = ast.parse((PKG / "target" / "_probe.py").read_text())
    for imported, _ in _imports(tree, "rocmbuild.target._probe"):
        assert not imported.startswith("rocmbuild"), "the probe runs inside the target's Python: stdlib (and torch) only"


@pytest.mark.parametrize("module,path,tree", MODULES, ids=[m for m, _, _ in MODULES])
def test_sizes(module, path, tree):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module} has {lines} lines (at most {MAX_MODULE_LINES}): split it along its concerns"
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            assert n <= MAX_FUNCTION_LINES, f"{module}.{node.name} has {n} lines (at most {MAX_FUNCTION_LINES})"
