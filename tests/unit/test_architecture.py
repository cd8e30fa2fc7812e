"""The house rules of docs/architecture.md, checked on the source: which package may import which,
no module reaching into another's private names, modules under 400 lines, functions under 60.

Decision: one test per rule, not one per module (they were ~450 tests of four rules): each rule
walks every module and fails once, listing every offender with what to do, so a broken rule says
all it found at once and the suite counts rules, not files.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "rocmbuild"

# Each layer may import itself and any layer after it, never one before it.
LAYERS = (
    ("cli",),
    ("flows", "doctor"),
    ("swap",),
    ("environment",),
    ("results",),
    ("remote",),
    ("builder", "store", "sources"),
    ("recipe",),
    ("fs", "proc", "names", "schema", "home", "config", "ui", "progress", "progressbar", "steps", "errors", "__init__"),
)
MAX_MODULE_LINES = 400
# the cohesion rule: a module over MAX_MODULE_LINES says in its docstring why it is one thing
WHY_ONE = "One module because"
MAX_FUNCTION_LINES = 60


def _unit(module: str) -> str:
    """``rocmbuild.swap.plan`` -> ``swap``; ``rocmbuild.fs.disk`` -> ``disk``; ``rocmbuild`` -> ``__init__``."""
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


def _offenders(found: list[str], rule: str) -> None:
    assert not found, f"{len(found)} offence(s) of the rule '{rule}':\n  " + "\n  ".join(found)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes inside an ``if TYPE_CHECKING:`` body (not its ``else``)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            found.update(id(n) for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return found


def _runtime_imports(tree: ast.Module, module: str):
    """The imports that run: every import but those under ``if TYPE_CHECKING:`` (deferred ones in a
    function included: they run when it is called)."""
    skip = _type_checking_only(tree)
    kept = ast.Module(body=[], type_ignores=[])
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip:
            kept.body.append(node)
    yield from _imports(kept, module)


def _layer_breaks(module: str, tree: ast.Module):
    """Runtime imports of a higher layer. An import under ``if TYPE_CHECKING:`` is not one: it
    never runs, so it orders no import and makes no cycle; it lets a value type of a lower layer
    name a higher layer's type in an annotation (``results/`` holds a swap ``Plan``, a ``Target``),
    which mypy checks."""
    if module in ("rocmbuild.__main__", "rocmbuild.environment._probe"):
        return  # the entry point imports cli; the probe runs inside the target's Python (stdlib only)
    mine = _layer(_unit(module))
    for imported, names in _runtime_imports(tree, module):
        if not imported.startswith("rocmbuild"):
            continue
        targets = [imported] if imported != "rocmbuild" else [f"rocmbuild.{n}" for n in names]
        for t in targets:
            if t != "rocmbuild.__version__" and _layer(_unit(t)) < mine:
                yield f"{module} imports {t}: a lower layer may not import a higher one"


def test_imports_follow_the_layers():
    _offenders([msg for module, _path, tree in MODULES for msg in _layer_breaks(module, tree)],
               "imports follow the layers")


def _private_imports(module: str, tree: ast.Module):
    for imported, names in _imports(tree, module):
        if imported.startswith("rocmbuild") and imported != module:
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            if private:
                yield f"{module} imports private {private} from {imported}"


def test_no_private_names_from_other_modules():
    _offenders([msg for module, _path, tree in MODULES for msg in _private_imports(module, tree)],
               "no private names from other modules")


def test_the_rules_report_every_offender():
    """The folded rules still find what they are for: a lower layer importing a higher one, a
    private name, an oversized function -- each one listed."""
    tree = ast.parse("from rocmbuild.cli import app\nfrom rocmbuild.swap.plan import _hidden\n"
                     "def f():\n" + "    x = 1\n" * (MAX_FUNCTION_LINES + 1))
    assert list(_layer_breaks("rocmbuild.recipe.model", tree)) == [
        "rocmbuild.recipe.model imports rocmbuild.cli: a lower layer may not import a higher one",
        "rocmbuild.recipe.model imports rocmbuild.swap.plan: a lower layer may not import a higher one"]
    # an import under TYPE_CHECKING is exempt; its else branch, a deferred import and one under
    # another condition are not
    tree2 = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rocmbuild.swap.plan import Plan\n"
                      "else:\n    from rocmbuild.cli import app\nif DEBUG:\n    from rocmbuild.flows import apply\n"
                      "def f():\n    from rocmbuild.swap import journal\n")
    assert list(_layer_breaks("rocmbuild.recipe.model", tree2)) == [
        f"rocmbuild.recipe.model imports rocmbuild.{m}: a lower layer may not import a higher one"
        for m in ("cli", "flows", "swap")]
    assert list(_private_imports("rocmbuild.recipe.model", tree)) == [
        "rocmbuild.recipe.model imports private ['_hidden'] from rocmbuild.swap.plan"]
    assert [m.split(" has ")[0] for m in _size_breaks("rocmbuild.recipe.model", Path(__file__), tree)] == [
        "rocmbuild.recipe.model.f"]


def test_the_probe_is_stdlib_only():
    tree = ast.parse((PKG / "environment" / "_probe.py").read_text())
    for imported, _ in _imports(tree, "rocmbuild.environment._probe"):
        assert not imported.startswith("rocmbuild"), "the probe runs inside the target's Python: stdlib (and torch) only"


def _size_breaks(module: str, path: Path, tree: ast.Module):
    lines = len(path.read_text().splitlines())
    if lines > MAX_MODULE_LINES and WHY_ONE not in (ast.get_docstring(tree) or ""):
        yield (f"{module} has {lines} lines (over {MAX_MODULE_LINES}): split it along its concerns, or say in "
               f"its docstring why it is one thing ('{WHY_ONE} ...')")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                yield f"{module}.{node.name} has {n} lines (at most {MAX_FUNCTION_LINES})"


def test_sizes():
    _offenders([msg for module, path, tree in MODULES for msg in _size_breaks(module, path, tree)], "sizes")


# --------------------------------------------------------------------------------------------
# Confinement: nothing writes to a target, a state dir or the home's known targets by a path string


#: the modules that act on targets and their state: every write goes through a rocmbuild.fs.root.Root
CONFINED = ("rocmbuild.swap", "rocmbuild.flows.apply", "rocmbuild.flows.manage", "rocmbuild.flows.guards",
            "rocmbuild.flows.export", "rocmbuild.flows.cacheverify", "rocmbuild.store.bundle", "rocmbuild.store.unbundle",
            "rocmbuild.store.cache", "rocmbuild.store.housekeeping", "rocmbuild.remote")
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


def test_targets_and_state_are_written_only_through_a_root():
    confined = [m for m in MODULES if m[0].startswith(CONFINED)]
    assert len(confined) > 20, "the confined modules are found"
    found = []
    for module, _path, tree in confined:
        calls = [f"line {n}: {what}" for n, what in _path_writes(tree) if (module, what) not in ALLOWED_PATH_WRITES]
        if calls:
            found.append(f"{module} writes by a path string ({'; '.join(calls)})")
    _offenders(found, "targets and state are written only through a rocmbuild.fs.root.Root (swap.roots.Roots for "
                      "a target and its state dir)")


def test_the_confinement_rule_catches_path_writes():
    tree = ast.parse("import os, shutil\nos.unlink(p)\nshutil.rmtree(d)\nPath(p).write_text('x')\n"
                     "open(p, 'wb')\natomic_write_json(p, {})\nroots.target.unlink('lib/x')\nroot.rmdir('a')\n"
                     "os.utime(fd, ns=(1, 1))\nos.symlink(t, name, dir_fd=dfd)\nopen(fd, 'wb', closefd=False)\n")
    assert [n for n, _ in _path_writes(tree)] == [2, 3, 4, 5, 6]


# True docs: the map names every module, and no docstring cites a file the repository lacks.
DOCS = PKG.parent / "docs"
#: a citation of a repository file in a docstring or comment: docs/x.md, tests/..., benchmarks/..., a bare x.md
CITED = re.compile(r"(?<![\w/.$<{-])((?:docs|tests|benchmarks|examples|recipes|patches)/[\w./-]+\.(?:md|py|toml|sh)"
                   r"|[\w-]+\.md)\b")


def _unnamed(doc: str, path: Path) -> bool:
    rel = path.relative_to(PKG).as_posix()
    if path.name == "__init__.py" or "/data/" in f"/{rel}":
        return False
    if rel.startswith("cli/commands/cmd_"):
        return "cmd_<verb>.py" not in doc
    return f"`{path.name}`" not in doc and rel not in doc


def test_the_architecture_map_names_every_module():
    doc = (DOCS / "architecture.md").read_text()
    _offenders([f"{p.relative_to(PKG)} is not named in docs/architecture.md" for p in sorted(PKG.rglob("*.py"))
                if _unnamed(doc, p)], "the map names every module")


def test_no_docstring_cites_a_missing_file():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        for m in CITED.finditer(path.read_text()):
            cited = m.group(1)
            if not any((base / cited).exists() for base in (PKG.parent, DOCS)):
                found.append(f"{path.relative_to(PKG.parent)} cites {cited}, which the repository does not have")
    _offenders(found, "no docstring cites a missing file")


def test_the_docs_rules_catch_offenders(tmp_path):
    doc = "`kept.py` and cli/commands/cmd_<verb>.py"
    assert _unnamed(doc, PKG / "swap" / "gone.py") and not _unnamed(doc, PKG / "swap" / "kept.py")
    assert not _unnamed(doc, PKG / "cli" / "commands" / "cmd_apply.py")
    assert [m.group(1) for m in CITED.finditer("see docs/cli.md and DESIGN.md, not x/docs/y.md")] == [
        "docs/cli.md", "DESIGN.md"]


#: a docstring's cross-reference (``:mod:`rocmbuild.x` ``, ``:func:`~rocmbuild.x.f` ``...)
DOTTED = re.compile(r":\w+:`~?rocmbuild((?:\.\w+)+)`")


def _missing_module(dotted: str) -> bool:
    """``rocmbuild.a.b...`` names no module: ``a`` is neither a module nor a package, or ``a`` is a
    package and ``b`` is neither its module nor a name its ``__init__`` defines or imports."""
    parts = dotted.strip(".").split(".")
    first = PKG / parts[0]
    if (PKG / f"{parts[0]}.py").exists():
        return False
    if not first.is_dir():
        return True
    if len(parts) == 1 or (first / f"{parts[1]}.py").exists() or (first / parts[1]).is_dir():
        return False
    init = first / "__init__.py"
    return not (init.exists() and re.search(rf"\b{re.escape(parts[1])}\b", init.read_text()))


def test_no_docstring_names_a_missing_module():
    found = [f"{path.relative_to(PKG.parent)} names rocmbuild{m.group(1)}, which does not exist"
             for path in sorted(PKG.rglob("*.py")) for m in DOTTED.finditer(path.read_text())
             if _missing_module(m.group(1))]
    _offenders(found, "no docstring names a missing module")
    assert _missing_module(".build.prebuilt") and _missing_module(".swap.gone") and not _missing_module(".swap.plan.Plan")
