"""Recipe text -> :class:`Recipe`: the schema, then one parser per table, composed by :func:`parse`.

Everything a user can get wrong is a :class:`RecipeError` (exit 2) naming the file, the key (with
a "did you mean" for typos) and, for TOML syntax errors, the line -- before anything is fetched.
Decisions: ``[build.defines]`` values may be bool, int, float, string or a list of strings,
anything else is a type error naming the define; ``verify.version = "source"`` requires
``[source] version``; patch files are looked up in ``patches/<name>/`` beside the recipe file, then
in ``patches/<name>/`` in the parent of the recipe's directory (the bundled layout);
``[source] tarball`` is an alias of ``archive`` (both at once is an error); a prebuilt build
(``[build] system = "prebuilt"``) needs an archive source and refuses every key that only a
compile would use (patches, cherry-picks, a version file, generator, defines, env, ...), so a
recipe never carries a setting that silently does nothing.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import tomllib
from pathlib import Path
from typing import Any, Iterable, Mapping

from rocmbuild import names
from rocmbuild.errors import InputError, RecipeError
from rocmbuild.recipe import arch
from rocmbuild.recipe.contains import parse_contains
from rocmbuild.recipe.requires import parse_requires, split_requirement  # noqa: F401 (re-exported)
from rocmbuild.recipe.paths import local_git_path, prefix_problem, relative_inside
from rocmbuild.recipe.model import (
    DEFINE_RE, ENCODINGS, GENERATORS, LAUNCHERS, SMOKES, SYSTEMS, Build, DefineValue, Install, Recipe,
    Requires, Source, Verify, VersionSpec,
)

_STR = "a string"
_INT = "an integer"
_BOOL = "true or false"
_STRLIST = "a list of strings"
_TABLE = "a table"
_ANY = "anything (checked by its own parser)"

SCHEMA: dict[str, Any] = {
    "name": _STR,
    "description": _STR,
    "source": {
        "git": _STR,
        "archive": _STR,
        "tarball": _STR,
        "sha256": _STR,
        "ref": _STR,
        "subdir": _STR,
        "sparse": _STRLIST,
        "cherry_pick": _STRLIST,
        "patches": _STRLIST,
        "version": {"file": _STR, "regex": _STR},
        "contains": _ANY,  # a list of tables: checked by recipe.contains
    },
    "build": {
        "system": _STR,
        "generator": _STR,
        "build_type": _STR,
        "jobs": _INT,
        "targets": _STRLIST,
        "defines": _TABLE,
        "env": _TABLE,
        "install_prefix": _STR,
        "launcher": _STR,
        "reproducible": _BOOL,
    },
    "requires": _ANY,  # strings and tables of alternatives: checked by recipe.requires
    "install": {"libraries": _STRLIST, "data": _STRLIST},
    "verify": {"library": _STR, "version": _STR, "encoding": _STR, "smoke": _STR},
}

def parse(text: str, path: Path) -> Recipe:
    """Parse and validate recipe text. ``path`` names the file in every error."""
    data = _toml(text, path)
    _validate(data, SCHEMA, path)
    # the tables in this order, so that the first mistake in the file is the one reported
    source = _source(data, path)
    build = _build(data.get("build", {}), path)
    _prebuilt(data, build, path)
    requires = _requires(data.get("requires", {}), path)
    install = _install(data.get("install", {}), path)
    verify = _verify(data.get("verify", {}), install, source, path)
    name = _name(data, path)
    return Recipe(
        name=name,
        path=path,
        source=source,
        description=data.get("description", ""),
        build=build,
        requires=requires,
        install=install,
        verify=verify,
        patch_files=tuple(_find_patch(p, name, path) for p in source.patches),
        text_sha256=hashlib.sha256(text.encode()).hexdigest(),
    )


def suggest(key: str, choices: Iterable[str]) -> str:
    """A "did you mean" for a near miss, else the list of what is known."""
    close = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(choices))}"


# --------------------------------------------------------------------------------------------
# syntax and schema


def _fail(path: Path, key: str, message: str, hint: str) -> RecipeError:
    return RecipeError(f"{path}: {message}", hint, details={"file": str(path), "key": key})


def _toml(text: str, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        line = int(m.group(1)) if m else None
        raise RecipeError(
            f"{path}: TOML syntax error{f' on line {line}' if line else ''}: {exc}",
            "fix the TOML syntax (strings need quotes; tables are [name]); "
            "a bundled recipe shows the format: `rocmbuild show miopen-3.5.1`",
            details={"file": str(path), "line": line},
        ) from exc


def _type_ok(value: Any, expected: str) -> bool:
    if expected == _STR:
        return isinstance(value, str)
    if expected == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected in (_STRLIST, _TABLE, _BOOL):
        return {_STRLIST: isinstance(value, list) and all(isinstance(v, str) for v in value),
                _TABLE: isinstance(value, dict), _BOOL: isinstance(value, bool)}[expected]
    if expected == _ANY:
        return True
    raise AssertionError(expected)


def _validate(data: Mapping[str, Any], schema: Mapping[str, Any], path: Path, prefix: str = "") -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in schema:
            where = f"[{prefix[:-1]}]" if prefix else "the top level"
            raise _fail(path, dotted, f"unknown key '{dotted}' in {where}", suggest(key, schema.keys()))
        expected = schema[key]
        if isinstance(expected, dict):
            if not isinstance(value, dict):
                raise _fail(path, dotted, f"'{dotted}' must be a table, got {type(value).__name__}",
                            f"write it as [{dotted}] with keys {', '.join(expected)}")
            _validate(value, expected, path, dotted + ".")
        elif not _type_ok(value, expected):
            raise _fail(path, dotted, f"'{dotted}' must be {expected}, got {type(value).__name__} ({value!r})",
                        "fix the value's type; a bundled recipe shows the format: "
                        "`rocmbuild show miopen-3.5.1`")


# --------------------------------------------------------------------------------------------
# one parser per table


def _source(data: Mapping[str, Any], path: Path) -> Source:
    if "source" not in data:
        raise _fail(path, "source", "missing [source] table", "add [source] with git = URL (or archive = URL and sha256)")
    src = data["source"]
    _source_kind(src, path)
    inside = [("subdir", src.get("subdir"))] + [("sparse", p) for p in src.get("sparse", [])]
    if "version" in src and isinstance(src["version"].get("file"), str):
        inside.append(("version.file", src["version"]["file"]))
    for k, v in inside:
        if v is not None and not relative_inside(v):
            raise _fail(path, f"source.{k}", f"'{v}' must be a relative path inside the source", "e.g. projects/miopen")
    return Source(
        git=local_git_path(src["git"], path) if "git" in src else None,
        archive=src.get("archive", src.get("tarball")),
        sha256=src.get("sha256", "").lower() or None,
        ref=src.get("ref"),
        subdir=src.get("subdir"),
        sparse=tuple(src.get("sparse", ())),
        cherry_pick=tuple(src.get("cherry_pick", ())),
        patches=tuple(src.get("patches", ())),
        version=_version_spec(src["version"], path) if "version" in src else None,
        contains=parse_contains(src.get("contains", []), path, git="git" in src),
    )


def _source_kind(src: Mapping[str, Any], path: Path) -> None:
    """Exactly one of git and archive (alias tarball), and only the keys that kind knows."""
    archive = "archive" if "archive" in src else "tarball"
    if "archive" in src and "tarball" in src:
        raise _fail(path, "source", "[source] has both 'archive' and 'tarball' (the same key)", "keep only 'archive'")
    if "git" in src and archive in src:
        raise _fail(path, "source", f"[source] has both 'git' and '{archive}'", "keep exactly one of them")
    if "git" not in src and archive not in src:
        raise _fail(path, "source", "[source] needs 'git' or 'archive'", "add git = URL or archive = URL")
    if archive in src:
        if not re.fullmatch(r"[0-9a-fA-F]{64}", src.get("sha256", "")):
            raise _fail(path, "source.sha256", f"a {archive} source needs sha256 = 64 hex digits",
                        "compute it with: sha256sum FILE")
        for k in ("ref", "sparse", "cherry_pick"):
            if k in src:
                raise _fail(path, f"source.{k}", f"'{k}' only applies to git sources", f"remove source.{k}")
    elif "sha256" in src:
        raise _fail(path, "source.sha256", "'sha256' only applies to archive (tarball) sources", "remove source.sha256")


#: keys that only a compile uses: a prebuilt recipe that sets one is told so
_COMPILE_ONLY = {"source": ("patches", "version"),
                 "build": ("generator", "build_type", "jobs", "targets", "defines", "env", "install_prefix",
                           "launcher", "reproducible")}


def _prebuilt(data: Mapping[str, Any], build: Build, path: Path) -> None:
    """A prebuilt recipe takes an archive source and none of the compile-only keys."""
    if not build.prebuilt:
        return
    if "git" in data["source"]:
        raise _fail(path, "build.system", "[build] system = \"prebuilt\" needs an archive source, not git",
                    "give [source] archive = URL|PATH with sha256 (.tar*, .zip, .whl or .deb; "
                    "pypi:NAME==VERSION, apt:NAME=VERSION)")
    for table, keys in _COMPILE_ONLY.items():
        for k in keys:
            if k in data.get(table, {}):
                raise _fail(path, f"{table}.{k}", f"'{table}.{k}' does not apply to a prebuilt build "
                            "(no configure, no compile)", f"remove {table}.{k}, or use [build] system = \"cmake\"")


def _version_spec(v: Mapping[str, Any], path: Path) -> VersionSpec:
    for k in ("file", "regex"):
        if k not in v:
            raise _fail(path, f"source.version.{k}", f"source.version needs '{k}'",
                        "version = { file = \"CMakeLists.txt\", regex = 'VERSION ([0-9.]+)' }")
    try:
        rx = re.compile(v["regex"])
    except re.error as exc:
        raise _fail(path, "source.version.regex", f"invalid regex: {exc}", "fix the regular expression") from exc
    if rx.groups < 1:
        raise _fail(path, "source.version.regex", "the version regex needs a capture group",
                    "put the version in parentheses, e.g. 'VERSION ([0-9.]+)'")
    return VersionSpec(v["file"], v["regex"])


def _build(b: Mapping[str, Any], path: Path) -> Build:
    system = b.get("system", "cmake")
    if system not in SYSTEMS:
        raise _fail(path, "build.system", f"unknown build system '{system}'",
                    f"use one of: {', '.join(SYSTEMS)} ({suggest(system, SYSTEMS)})")
    generator = b.get("generator", "Unix Makefiles")
    if generator not in GENERATORS:
        raise _fail(path, "build.generator", f"unknown generator '{generator}'",
                    f"use one of: {', '.join(GENERATORS)} ({suggest(generator, GENERATORS)})")
    if b.get("jobs", 0) < 0:
        raise _fail(path, "build.jobs", "jobs must be >= 0", "0 means all cores")
    launcher = b.get("launcher")  # not set: "auto" (kept as None: lock files of older recipes stay valid)
    if launcher is not None and launcher not in LAUNCHERS:
        raise _fail(path, "build.launcher", f"unknown launcher '{launcher}'", f"use one of: {', '.join(LAUNCHERS)}")
    build = Build(
        system=system,
        generator=generator,
        build_type=b.get("build_type", "Release"),
        jobs=b.get("jobs", 0),
        targets=tuple(b.get("targets", ())),
        defines=_defines(b.get("defines", {}), path),
        env=_env(b.get("env", {}), path),
        install_prefix=b.get("install_prefix", "/usr/local"),
        launcher=launcher,
        reproducible=b.get("reproducible", True),
    )
    problem = prefix_problem(build.install_prefix)
    if problem:
        raise _fail(path, "build.install_prefix", f"[build] install_prefix {build.install_prefix!r} {problem}",
                    "write a clean absolute path such as /usr/local or /opt/rocm (no '..', '.', '//' "
                    "or trailing '/')")
    return build


def _defines(table: Mapping[str, Any], path: Path) -> tuple[tuple[str, DefineValue], ...]:
    defines = []
    for name, value in table.items():
        if not DEFINE_RE.match(name):
            raise _fail(path, f"build.defines.{name}", f"invalid CMake variable name '{name}'",
                        "use letters, digits and underscores")
        defines.append((name, _define_value(name, value, path)))
        try:
            arch.check_defines(defines[-1:], "build.defines")
        except InputError as exc:  # an unknown GPU architecture, named with its file and key
            raise _fail(path, f"build.defines.{name}", exc.message, exc.hint) from None
    return tuple(sorted(defines))


def _define_value(name: str, value: Any, path: Path) -> DefineValue:
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _fail(path, f"build.defines.{name}",
                f"define 'build.defines.{name}' must be a bool, number, string or list of strings, "
                f"got {type(value).__name__}",
                "bool becomes -DNAME:BOOL=ON/OFF, a list becomes a ;-separated STRING")


def _env(table: Mapping[str, Any], path: Path) -> tuple[tuple[str, str], ...]:
    env = []
    for name, value in table.items():
        if not isinstance(value, str):
            raise _fail(path, f"build.env.{name}", f"'build.env.{name}' must be a string, got {type(value).__name__}",
                        'quote the value: NAME = "value"')
        env.append((name, value))
    return tuple(sorted(env))


def _requires(r: Any, path: Path) -> Requires:
    if not isinstance(r, dict):
        raise _fail(path, "requires", f"'requires' must be a table, got {type(r).__name__}",
                    "write it as [requires] with keys programs, paths, hints")
    return parse_requires(r, path)


def _install(i: Mapping[str, Any], path: Path) -> Install:
    install = Install(tuple(i.get("libraries", ())), tuple(i.get("data", ())))
    for d in install.data:
        if not relative_inside(d):
            raise _fail(path, "install.data", f"data path '{d}' must be relative to the install prefix",
                        "e.g. share/miopen/db")
    for lib in install.libraries:  # a stem ("libMIOpen") or a file-name glob for a set ("libcudnn*")
        if not lib or "/" in lib or lib in (".", "..") or not _library_stem(lib):
            raise _fail(path, "install.libraries", f"library '{lib}' must be a file-name stem or glob",
                        'e.g. "libMIOpen", or "libcudnn*" for a set swapped as one')
    return install


def _library_stem(lib: str) -> str:
    """The stem a library entry names: a glob's literal start (``libcudnn*`` -> ``libcudnn``)."""
    return re.split(r"[*?\[]", lib, maxsplit=1)[0].rstrip("._-")


def _verify(v: Mapping[str, Any], install: Install, source: Source, path: Path) -> Verify:
    verify = Verify(
        library=v.get("library", _library_stem(install.libraries[0]) if install.libraries else "libMIOpen"),
        version=v.get("version"),
        encoding=v.get("encoding", "miopen"),
        smoke=v.get("smoke"),
    )
    if verify.encoding not in ENCODINGS:
        raise _fail(path, "verify.encoding", f"unknown encoding '{verify.encoding}'", f"use one of: {', '.join(ENCODINGS)}")
    if verify.smoke is not None and verify.smoke not in SMOKES:
        raise _fail(path, "verify.smoke", f"unknown smoke test '{verify.smoke}'", f"use one of: {', '.join(SMOKES)}")
    if verify.version == "source" and source.version is None:
        raise _fail(path, "verify.version", "verify.version = \"source\" needs [source] version = { file, regex }",
                    "add source.version, or give a fixed version such as \"3.5.1\"")
    if verify.version not in (None, "source") and not names.is_version(verify.version):
        raise _fail(path, "verify.version", f"invalid version: {names.bad_name_reason('version', verify.version)}",
                    "give \"source\" or a version such as \"3.5.1\"")
    return verify


def _name(data: Mapping[str, Any], path: Path) -> str:
    name = data.get("name", path.stem)
    why = names.bad_name_reason("recipe", name)
    if why is not None:  # the name reaches file names (cache, logs, patches/<name>/, bundles)
        raise _fail(path, "name", f"invalid recipe name: {why}",
                    "use letters, digits and '.', '_', '+', '-' (e.g. miopen-develop)")
    return name


def _find_patch(name: str, recipe_name: str, path: Path) -> Path:
    if not relative_inside(name):
        raise _fail(path, "source.patches", f"patch '{name}' must be a plain file name", "put it in patches/<recipe>/")
    candidates = [
        path.parent / "patches" / recipe_name / name,
        path.parent.parent / "patches" / recipe_name / name,
    ]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise _fail(path, "source.patches", f"patch file '{name}' not found",
                "looked in: " + ", ".join(str(c) for c in candidates))
