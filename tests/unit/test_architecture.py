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
    ("remote",),
    ("build",),
    ("recipe",),
    ("disk", "kcopy", "root", "beneath", "names", "schema", "home", "config", "locks", "runner", "reaper", "stop", "ui", "progress", "steps", "errors", "__init__"),
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


# --------------------------------------------------------------------------------------------
# Confinement: nothing writes to a target, a state dir or the home's known targets by a path string


#: the modules that act on targets and their state: every write goes through a rocmbuild.root.Root
CONFINED = ("rocmbuild.swap", "rocmbuild.flows.apply", "rocmbuild.flows.manage", "rocmbuild.flows.guards",
            "rocmbuild.flows.export", "rocmbuild.flows.cache", "rocmbuild.build.bundle", "rocmbuild.build.unbundle",
            "rocmbuild.build.cache", "rocmbuild.build.housekeeping", "rocmbuild.remote")
_PATH_WRITES = {"os": {"replace", "rename", "renames", "unlink", "remove", "link", "symlink", "mkdir", "makedirs",
                       "rmdir", "removedirs", "chmod", "chown", "lchown", "truncate", "mkfifo", "mknod", "utime"},
                "shutil": {"rmtree", "copy", "copy2", "copyfile", "copytree", "move", "copystat", "copymode"},
                "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory"}}
_DISK_WRITES = {"atomic_write_bytes", "atomic_write_json", "makedirs_durable", "link_or_copy", "own_copy",
                "fsync_dir", "make_read_only"}
_PATH_METHODS = {"write_text", "write_bytes", "touch", "symlink_to", "hardlink_to", "mkdir", "rmdir", "unlink",
                 "rename", "chmod"}


def _on_an_fd(call: ast.Call) -> bool:
    """An ``*at`` call (``dir_fd=``) or one on an open descriptor (``os.utime(fd, ...)``,
    ``open(fd, "wb")``): it resolves nothing by a path string."""
    if any(k.arg in ("dir_fd", "src_dir_fd", "dst_dir_fd") for k in call.keywords):
        return True
    first = call.args[0] if call.args else None
    return isinstance(first, ast.Name) and (first.id == "fd" or first.id.endswith("fd"))


def _path_writes(tree: ast.Module):
    """Each call in ``tree`` that writes by a path string: ``os.unlink(p)``, ``shutil.rmtree``,
    ``disk.atomic_write_json``, ``Path.write_text``, ``open(p, "w")``... A method of the same name on
    a root (``roots.target.unlink(rel)``: its receiver names a root) acts through a directory fd."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _on_an_fd(node):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr in _PATH_WRITES.get(f.value.id, ()):
            yield node.lineno, ast.unparse(f)
        elif isinstance(f, (ast.Name, ast.Attribute)) and (f.id if isinstance(f, ast.Name) else f.attr) in _DISK_WRITES:
            yield node.lineno, ast.unparse(f)
        elif isinstance(f, ast.Attribute) and f.attr in _PATH_METHODS and "root" not in ast.unparse(f.value).lower():
            yield node.lineno, ast.unparse(f)
        elif isinstance(f, ast.Name) and f.id == "open" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                and any(c in str(node.args[1].value) for c in "wax+"):
            yield node.lineno, "open(..., " + repr(node.args[1].value) + ")"


#: path writes that touch no target: (module, call) -> why
ALLOWED_PATH_WRITES = {
    ("rocmbuild.flows.apply", "tempfile.mkdtemp"): "a dry run's private temp dir for a downloaded bundle",
    ("rocmbuild.flows.apply", "shutil.rmtree"): "removes that private temp dir",
    ("rocmbuild.remote.static", "os.link"): "linkat between two names under one directory fd of a Root (a push "
                                            "claims its bundle)",
}


@pytest.mark.parametrize("module,path,tree", [m for m in MODULES if m[0].startswith(CONFINED)],
                         ids=[m[0] for m in MODULES if m[0].startswith(CONFINED)])
def test_targets_and_state_are_written_only_through_a_root(module, path, tree):
    found = [f"line {n}: {what}" for n, what in _path_writes(tree) if (module, what) not in ALLOWED_PATH_WRITES]
    assert not found, (f"{module} writes by a path string ({'; '.join(found)}): act through a "
                       "rocmbuild.root.Root (swap.roots.Roots for a target and its state dir) instead")


def test_the_confinement_rule_catches_path_writes():
    tree = ast.parse("import os, shutil\nos.unlink(p)\nshutil.rmtree(d)\nPath(p).write_text('x')\n"
                     "open(p, 'wb')\natomic_write_json(p, {})\nroots.target.unlink('lib/x')\nroot.rmdir('a')\n"
                     "os.utime(fd, ns=(1, 1))\nos.symlink(t, name, dir_fd=dfd)\nopen(fd, 'wb', closefd=False)\n")
    assert [n for n, _ in _path_writes(tree)] == [2, 3, 4, 5, 6]
