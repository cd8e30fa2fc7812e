"""Recipes: TOML files that declare a source build. Parsed once into frozen dataclasses.

The format is a public contract, documented in ``docs/recipes.md``. Everything a user can get
wrong is reported as a :class:`RecipeError` (exit 2) naming the file, the key (with a "did you
mean" for typos) and, for TOML syntax errors, the line -- before anything is fetched.

Search order for a recipe given by name: ``--recipes-dir`` (in the order given),
``$ROCMBUILD_RECIPES`` (colon-separated), ``$XDG_CONFIG_HOME/rocmbuild/recipes`` (default
``~/.config/rocmbuild/recipes``), then the recipes bundled with rocmbuild. An argument that ends
in ``.toml`` or contains a ``/`` is a path.

Patch files are looked up in ``patches/<name>/`` beside the recipe file, then in
``patches/<name>/`` in the parent of the recipe's directory (the bundled layout).

Decisions where the issue was silent:
* ``[build] install_prefix`` (default ``/usr/local``) and ``[build] launcher`` are recipe keys.
* ``[build.defines]`` values may be bool, int, float, string or a list of strings; anything else
  (a table, a list of non-strings) is a type error naming the define.
* ``version = "source"`` in ``[verify]`` requires ``[source] version`` (else nothing to read).
* The literal define value ``"auto"`` for ``GPU_TARGETS`` is resolved later (see
  :func:`resolve_gpu_targets`), since it depends on the machine, not on the recipe.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from rocmbuild.errors import InputError, RecipeError

DefineValue = bool | int | float | str | tuple[str, ...]


@dataclass(frozen=True)
class VersionSpec:
    file: str
    regex: str


@dataclass(frozen=True)
class Source:
    git: str | None = None
    tarball: str | None = None
    sha256: str | None = None
    ref: str | None = None
    subdir: str | None = None
    sparse: tuple[str, ...] = ()
    cherry_pick: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()
    version: VersionSpec | None = None

    @property
    def url(self) -> str:
        return self.git or self.tarball or ""


@dataclass(frozen=True)
class Build:
    generator: str = "Unix Makefiles"
    build_type: str = "Release"
    jobs: int = 0
    targets: tuple[str, ...] = ()
    defines: tuple[tuple[str, DefineValue], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    install_prefix: str = "/usr/local"
    launcher: str | None = None

    def define(self, name: str) -> DefineValue | None:
        return dict(self.defines).get(name)


@dataclass(frozen=True)
class Requires:
    programs: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    hints: tuple[tuple[str, str], ...] = ()  # requirement (as written) -> how to get it

    def hint(self, requirement: str) -> str | None:
        return dict(self.hints).get(requirement)


@dataclass(frozen=True)
class Install:
    libraries: tuple[str, ...] = ()
    data: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verify:
    library: str = "libMIOpen"
    version: str | None = None
    encoding: str = "miopen"
    smoke: str | None = None


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    source: Source
    description: str = ""
    build: Build = field(default_factory=Build)
    requires: Requires = field(default_factory=Requires)
    install: Install = field(default_factory=Install)
    verify: Verify = field(default_factory=Verify)
    patch_files: tuple[Path, ...] = ()
    text_sha256: str = ""

    def canonical(self) -> dict[str, Any]:
        """Everything that affects the build, as plain JSON data (for the cache key)."""
        data = dataclasses.asdict(self)
        for k in ("path", "description", "patch_files", "text_sha256"):
            data.pop(k)
        return data

    def canonical_json(self) -> str:
        return json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), default=str)


# --------------------------------------------------------------------------------------------
# schema

_STR = "a string"
_INT = "an integer"
_STRLIST = "a list of strings"
_TABLE = "a table"

SCHEMA: dict[str, Any] = {
    "name": _STR,
    "description": _STR,
    "source": {
        "git": _STR,
        "tarball": _STR,
        "sha256": _STR,
        "ref": _STR,
        "subdir": _STR,
        "sparse": _STRLIST,
        "cherry_pick": _STRLIST,
        "patches": _STRLIST,
        "version": {"file": _STR, "regex": _STR},
    },
    "build": {
        "generator": _STR,
        "build_type": _STR,
        "jobs": _INT,
        "targets": _STRLIST,
        "defines": _TABLE,
        "env": _TABLE,
        "install_prefix": _STR,
        "launcher": _STR,
    },
    "requires": {"programs": _STRLIST, "paths": _STRLIST, "hints": _TABLE},
    "install": {"libraries": _STRLIST, "data": _STRLIST},
    "verify": {"library": _STR, "version": _STR, "encoding": _STR, "smoke": _STR},
}

GENERATORS = ("Ninja", "Unix Makefiles")
ENCODINGS = ("miopen", "cudnn")
SMOKES = ("batchnorm",)
LAUNCHERS = ("ccache", "sccache")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_DEFINE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _suggest(key: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(choices))}"


def _type_ok(value: Any, expected: str) -> bool:
    if expected == _STR:
        return isinstance(value, str)
    if expected == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == _STRLIST:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if expected == _TABLE:
        return isinstance(value, dict)
    raise AssertionError(expected)


def _validate(data: Mapping[str, Any], schema: Mapping[str, Any], path: Path, prefix: str = "") -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in schema:
            where = f"[{prefix[:-1]}]" if prefix else "the top level"
            raise RecipeError(
                f"{path}: unknown key '{dotted}' in {where}",
                _suggest(key, schema.keys()),
                details={"file": str(path), "key": dotted},
            )
        expected = schema[key]
        if isinstance(expected, dict):
            if not isinstance(value, dict):
                raise RecipeError(
                    f"{path}: '{dotted}' must be a table, got {type(value).__name__}",
                    f"write it as [{dotted}] with keys {', '.join(expected)}",
                    details={"file": str(path), "key": dotted},
                )
            _validate(value, expected, path, dotted + ".")
        elif not _type_ok(value, expected):
            raise RecipeError(
                f"{path}: '{dotted}' must be {expected}, got {type(value).__name__} ({value!r})",
                "fix the value's type; see docs/recipes.md",
                details={"file": str(path), "key": dotted},
            )


def _define_value(name: str, value: Any, path: Path) -> DefineValue:
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise RecipeError(
        f"{path}: define 'build.defines.{name}' must be a bool, number, string or list of strings, "
        f"got {type(value).__name__}",
        "bool becomes -DNAME:BOOL=ON/OFF, a list becomes a ;-separated STRING",
        details={"file": str(path), "key": f"build.defines.{name}"},
    )


def _fail(path: Path, key: str, message: str, hint: str) -> RecipeError:
    return RecipeError(f"{path}: {message}", hint, details={"file": str(path), "key": key})


def parse(text: str, path: Path) -> Recipe:
    """Parse and validate recipe text. ``path`` names the file in every error."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        line = int(m.group(1)) if m else None
        raise RecipeError(
            f"{path}: TOML syntax error{f' on line {line}' if line else ''}: {exc}",
            "fix the TOML syntax (strings need quotes; tables are [name]); see docs/recipes.md",
            details={"file": str(path), "line": line},
        ) from exc
    _validate(data, SCHEMA, path)

    if "source" not in data:
        raise _fail(path, "source", "missing [source] table", "add [source] with git = URL (or tarball = URL and sha256)")
    src = data["source"]
    if "git" in src and "tarball" in src:
        raise _fail(path, "source", "[source] has both 'git' and 'tarball'", "keep exactly one of them")
    if "git" not in src and "tarball" not in src:
        raise _fail(path, "source", "[source] needs 'git' or 'tarball'", "add git = URL or tarball = URL")
    if "tarball" in src:
        if not re.fullmatch(r"[0-9a-fA-F]{64}", src.get("sha256", "")):
            raise _fail(path, "source.sha256", "a tarball source needs sha256 = 64 hex digits",
                        "compute it with: sha256sum FILE")
        for k in ("ref", "sparse", "cherry_pick"):
            if k in src:
                raise _fail(path, f"source.{k}", f"'{k}' only applies to git sources", f"remove source.{k}")
    elif "sha256" in src:
        raise _fail(path, "source.sha256", "'sha256' only applies to tarball sources", "remove source.sha256")
    inside = [("subdir", src.get("subdir"))] + [("sparse", p) for p in src.get("sparse", [])]
    if "version" in src and isinstance(src["version"].get("file"), str):
        inside.append(("version.file", src["version"]["file"]))
    for k, v in inside:
        if v is not None and (os.path.isabs(v) or ".." in Path(v).parts):
            raise _fail(path, f"source.{k}", f"'{v}' must be a relative path inside the source", "e.g. projects/miopen")
    version = None
    if "version" in src:
        v = src["version"]
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
        version = VersionSpec(v["file"], v["regex"])
    source = Source(
        git=src.get("git"),
        tarball=src.get("tarball"),
        sha256=src.get("sha256", "").lower() or None,
        ref=src.get("ref"),
        subdir=src.get("subdir"),
        sparse=tuple(src.get("sparse", ())),
        cherry_pick=tuple(src.get("cherry_pick", ())),
        patches=tuple(src.get("patches", ())),
        version=version,
    )

    b = data.get("build", {})
    generator = b.get("generator", "Unix Makefiles")
    if generator not in GENERATORS:
        raise _fail(path, "build.generator", f"unknown generator '{generator}'",
                    f"use one of: {', '.join(GENERATORS)} ({_suggest(generator, GENERATORS)})")
    if b.get("jobs", 0) < 0:
        raise _fail(path, "build.jobs", "jobs must be >= 0", "0 means all cores")
    launcher = b.get("launcher")
    if launcher is not None and launcher not in LAUNCHERS:
        raise _fail(path, "build.launcher", f"unknown launcher '{launcher}'", f"use one of: {', '.join(LAUNCHERS)}")
    defines = []
    for name, value in b.get("defines", {}).items():
        if not _DEFINE_RE.match(name):
            raise _fail(path, f"build.defines.{name}", f"invalid CMake variable name '{name}'",
                        "use letters, digits and underscores")
        defines.append((name, _define_value(name, value, path)))
    env = []
    for name, value in b.get("env", {}).items():
        if not isinstance(value, str):
            raise _fail(path, f"build.env.{name}", f"'build.env.{name}' must be a string, got {type(value).__name__}",
                        'quote the value: NAME = "value"')
        env.append((name, value))
    build = Build(
        generator=generator,
        build_type=b.get("build_type", "Release"),
        jobs=b.get("jobs", 0),
        targets=tuple(b.get("targets", ())),
        defines=tuple(sorted(defines)),
        env=tuple(sorted(env)),
        install_prefix=b.get("install_prefix", "/usr/local"),
        launcher=launcher,
    )
    if not build.install_prefix.startswith("/"):
        raise _fail(path, "build.install_prefix", "install_prefix must be absolute", "e.g. /usr/local or /opt/rocm")

    r = data.get("requires", {})
    hints = r.get("hints", {})
    for k, v in hints.items():
        if not isinstance(v, str):
            raise _fail(path, f"requires.hints.{k}", f"hint for '{k}' must be a string", 'e.g. "apt install rocm-llvm"')
        if k not in r.get("programs", []) and k not in r.get("paths", []):
            raise _fail(path, f"requires.hints.{k}", f"hint for '{k}', which is not in requires.programs or paths",
                        _suggest(k, [*r.get("programs", []), *r.get("paths", [])]))
    requires = Requires(tuple(r.get("programs", ())), tuple(r.get("paths", ())), tuple(sorted(hints.items())))
    for prog in requires.programs:
        _split_requirement(prog, path)

    i = data.get("install", {})
    install = Install(tuple(i.get("libraries", ())), tuple(i.get("data", ())))
    for d in install.data:
        if os.path.isabs(d) or ".." in Path(d).parts:
            raise _fail(path, "install.data", f"data path '{d}' must be relative to the install prefix",
                        "e.g. share/miopen/db")

    v = data.get("verify", {})
    verify = Verify(
        library=v.get("library", install.libraries[0] if install.libraries else "libMIOpen"),
        version=v.get("version"),
        encoding=v.get("encoding", "miopen"),
        smoke=v.get("smoke"),
    )
    if verify.encoding not in ENCODINGS:
        raise _fail(path, "verify.encoding", f"unknown encoding '{verify.encoding}'", f"use one of: {', '.join(ENCODINGS)}")
    if verify.smoke is not None and verify.smoke not in SMOKES:
        raise _fail(path, "verify.smoke", f"unknown smoke test '{verify.smoke}'", f"use one of: {', '.join(SMOKES)}")
    if verify.version == "source" and version is None:
        raise _fail(path, "verify.version", "verify.version = \"source\" needs [source] version = { file, regex }",
                    "add source.version, or give a fixed version such as \"3.5.1\"")

    name = data.get("name", path.stem)
    if not _NAME_RE.match(name):
        raise _fail(path, "name", f"invalid recipe name '{name}'", "use letters, digits, '.', '_', '+', '-'")
    patch_files = tuple(_find_patch(p, name, path) for p in source.patches)
    return Recipe(
        name=name,
        path=path,
        source=source,
        description=data.get("description", ""),
        build=build,
        requires=requires,
        install=install,
        verify=verify,
        patch_files=patch_files,
        text_sha256=hashlib.sha256(text.encode()).hexdigest(),
    )


_REQ_RE = re.compile(r"^\s*([^<>=!\s]+)\s*(?:>=\s*([0-9][0-9A-Za-z.+-]*))?\s*$")


def _split_requirement(spec: str, path: Path | None = None) -> tuple[str, str | None]:
    m = _REQ_RE.match(spec)
    if not m:
        raise RecipeError(
            f"{path}: invalid requirement '{spec}' in requires.programs",
            "write a program name or path, optionally with a version floor: \"cmake>=3.25\"",
            details={"file": str(path), "key": "requires.programs"},
        )
    return m.group(1), m.group(2)


split_requirement = _split_requirement


def _find_patch(name: str, recipe_name: str, path: Path) -> Path:
    if os.path.isabs(name) or ".." in Path(name).parts:
        raise _fail(path, "source.patches", f"patch '{name}' must be a plain file name", "put it in patches/<recipe>/")
    candidates = [
        path.parent / "patches" / recipe_name / name,
        path.parent.parent / "patches" / recipe_name / name,
    ]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise _fail(
        path,
        "source.patches",
        f"patch file '{name}' not found",
        "looked in: " + ", ".join(str(c) for c in candidates),
    )


# --------------------------------------------------------------------------------------------
# finding recipes


def bundled_dir() -> Path:
    """The recipes shipped with rocmbuild.

    Installed from a wheel they are ``rocmbuild/recipes`` (with ``rocmbuild/patches`` beside);
    in a checkout (and an editable install) they are the top-level ``recipes/`` (with
    ``patches/`` beside). Either way the patch lookup "patches/<name>/ in the parent of the
    recipe's directory" finds the bundled patches.
    """
    package = Path(__file__).resolve().parents[1]
    inside = package / "recipes"
    return inside if inside.is_dir() else package.parent / "recipes"


def search_path(recipes_dirs: Sequence[str | Path] = ()) -> list[Path]:
    dirs = [Path(d).expanduser() for d in recipes_dirs]
    env = os.environ.get("ROCMBUILD_RECIPES", "")
    dirs += [Path(d).expanduser() for d in env.split(":") if d]
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    dirs.append(config / "rocmbuild" / "recipes")
    dirs.append(bundled_dir())
    return dirs


def available(recipes_dirs: Sequence[str | Path] = ()) -> list[tuple[str, Path]]:
    """(name, path) of every recipe found, first match per name wins, in search order."""
    seen: dict[str, Path] = {}
    for d in search_path(recipes_dirs):
        if d.is_dir():
            for f in sorted(d.glob("*.toml")):
                seen.setdefault(f.stem, f)
    return list(seen.items())


def find(name_or_path: str, recipes_dirs: Sequence[str | Path] = ()) -> Path:
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        p = Path(name_or_path).expanduser()
        if not p.is_file():
            raise RecipeError(f"recipe file not found: {p}", "check the path, or give a recipe name (rocmbuild recipes)")
        return p.resolve()
    for d in search_path(recipes_dirs):
        f = d / f"{name_or_path}.toml"
        if f.is_file():
            return f
    found = available(recipes_dirs)
    names = [n for n, _ in found]
    close = difflib.get_close_matches(name_or_path, names, n=1)
    listing = "; ".join(f"{n} ({p})" for n, p in found) or "none"
    hint = (f"did you mean '{close[0]}'? " if close else "") + f"recipes found: {listing}"
    raise RecipeError(
        f"unknown recipe '{name_or_path}' (searched: {', '.join(str(d) for d in search_path(recipes_dirs))})",
        hint,
        details={"recipes": {n: str(p) for n, p in found}},
    )


def load(name_or_path: str, recipes_dirs: Sequence[str | Path] = ()) -> Recipe:
    path = find(name_or_path, recipes_dirs)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"cannot read recipe {path}: {exc}", "check the file's permissions and encoding") from exc
    return parse(text, path)


# --------------------------------------------------------------------------------------------
# command-line overrides


@dataclass(frozen=True)
class Overrides:
    ref: str | None = None
    source: str | None = None
    defines: tuple[str, ...] = ()  # NAME=VALUE, as typed by the user
    jobs: int | None = None
    gpu_targets: str | None = None
    launcher: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, ())}


def _parse_cli_define(text: str) -> tuple[str, DefineValue]:
    if "=" not in text:
        raise InputError(f"-D {text}: expected NAME=VALUE", "for example: -D MIOPEN_USE_MLIR=OFF")
    name, value = text.split("=", 1)
    typ = None
    if ":" in name:
        name, typ = name.split(":", 1)
    if not _DEFINE_RE.match(name):
        raise InputError(f"-D {text}: invalid CMake variable name '{name}'", "use letters, digits and underscores")
    if (typ or "").upper() == "BOOL" or (typ is None and value.upper() in ("ON", "OFF", "TRUE", "FALSE")):
        return name, value.upper() in ("ON", "TRUE", "1", "YES")
    return name, value


def apply_overrides(recipe: Recipe, ov: Overrides) -> Recipe:
    """Return a new Recipe with command-line overrides applied (the recipe file is not touched)."""
    source = recipe.source
    if ov.ref is not None:
        if source.tarball:
            raise InputError("--ref only applies to git sources", f"recipe '{recipe.name}' uses a tarball")
        source = dataclasses.replace(source, ref=ov.ref)
    if ov.source is not None:
        if source.tarball:
            source = dataclasses.replace(source, tarball=ov.source)
        else:
            source = dataclasses.replace(source, git=ov.source)
    defines = dict(recipe.build.defines)
    for d in ov.defines:
        k, v = _parse_cli_define(d)
        defines[k] = v
    if ov.gpu_targets is not None:
        targets = [t.strip() for t in ov.gpu_targets.split(",") if t.strip()]
        if not targets or not all(re.fullmatch(r"gfx[0-9a-f]+", t) for t in targets):
            raise InputError(f"--gpu-targets {ov.gpu_targets}: expected e.g. gfx1151 or gfx1151,gfx1100",
                             "see `rocmbuild doctor` for this machine's architecture")
        defines["GPU_TARGETS"] = ";".join(targets)
    build = recipe.build
    if ov.jobs is not None:
        if ov.jobs < 0:
            raise InputError("--jobs must be >= 0", "0 means all cores")
        build = dataclasses.replace(build, jobs=ov.jobs)
    if ov.launcher is not None:
        if ov.launcher not in LAUNCHERS:
            raise InputError(f"--launcher {ov.launcher}: unknown launcher", f"use one of: {', '.join(LAUNCHERS)}")
        build = dataclasses.replace(build, launcher=ov.launcher)
    build = dataclasses.replace(build, defines=tuple(sorted(defines.items())))
    return dataclasses.replace(recipe, source=source, build=build)


def resolve_gpu_targets(recipe: Recipe, detect: Callable[[], list[str]]) -> Recipe:
    """Replace ``GPU_TARGETS = "auto"`` with the architectures found on this machine.

    ``--gpu-targets`` (applied by :func:`apply_overrides`) wins because it already replaced the
    value. None found: a clear error, exit 2.
    """
    if recipe.build.define("GPU_TARGETS") != "auto":
        return recipe
    archs = detect()
    if not archs:
        raise InputError(
            f"recipe '{recipe.name}' sets GPU_TARGETS = \"auto\" but no AMD GPU was found on this machine",
            "pass --gpu-targets gfx1151 (or your architecture; `rocmbuild doctor` shows it). Building for one "
            "architecture instead of all is the largest build-time saving there is.",
        )
    defines = dict(recipe.build.defines)
    defines["GPU_TARGETS"] = ";".join(archs)
    return dataclasses.replace(recipe, build=dataclasses.replace(recipe.build, defines=tuple(sorted(defines.items()))))
