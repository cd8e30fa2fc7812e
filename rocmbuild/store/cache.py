"""The build cache: the inputs of a build, their key, and the artifact stored under it.

Decisions: the key is computable *before* fetching (the commit comes from ``ls-remote``), so a
cache hit touches no source tree and starts no compiler; tool versions are remembered in
``home/tools.json`` by (resolved path, size, mtime), so even ``cc --version`` is not run again
until the compiler changes; a cached artifact whose files changed on disk is moved aside and
rebuilt, never reused. What goes into the key, and what is left out, is in ``docs/cache.md``.

Imported artifacts (bundles) live apart, in ``artifacts/imported/<key>/``: :func:`lookup` (what a
recipe build asks) does not serve a bundle imported by hand, so a bundle that claims a recipe
build's key is never that recipe's cache hit; :func:`lookup_imported` serves ``apply --artifact``
and ``export KEY``. Decision (substitution, docs/caches.md): an imported artifact whose
provenance says it was *substituted* (kind ``cache``: found in a binary cache under exactly the
key the recipe computes, its signature by a trusted key -- or ``--allow-unsigned`` -- its
bundle's sha256 and every file checked on import) *is* served by :func:`lookup` for that key,
after the built one: the recipe asked for that key, and the cache answered for it under a
signature. Like Nix's store, once accepted it stays accepted (a later command without
``--allow-unsigned`` still uses an unsigned one it let in; its provenance says ``signer: null``). An
entry whose bytes do not match its manifest is quarantined (:func:`quarantine`): renamed to
``artifacts/.quarantine/``, kept for a look, never served again.
"""

from __future__ import annotations

import dataclasses

import datetime as _dt
import hashlib
import json
import os
import re
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from rocmbuild.proc import runner
from rocmbuild import schema as s
from rocmbuild import ui
from rocmbuild.store.artifact import MANIFEST, Artifact, Manifest
from rocmbuild.store.provenance import origin
from rocmbuild.fs.disk import FileLock, read_json, sha256_file
from rocmbuild.fs.root import Root
from rocmbuild.errors import FetchError, InputError
from rocmbuild.fs.locks import LockWait
from rocmbuild.home import artifacts_dir
from rocmbuild.recipe.model import DefineValue, Recipe

logger = logging.getLogger(__name__)


PREBUILT_TOOL = "none (prebuilt)"
#: recipe tables that never change the bytes of a build (the description is not in canonical())
NOT_IN_KEY = ("requires", "verify")


@dataclass(frozen=True)
class Tools:
    """``--version`` of cmake and of the C and C++ compilers the build will use."""

    cmake: str
    cc: str
    cxx: str


@dataclass(frozen=True)
class Inputs:
    """Everything a build's output depends on; :attr:`key` hashes :meth:`to_json`."""

    recipe: Mapping[str, Any]  # the canonical recipe, less what does not change the output
    commit: str | None
    tarball_sha256: str | None
    patches: tuple[tuple[str, str], ...]  # (file name, sha256), in order
    cherry_pick: tuple[str, ...]
    defines: tuple[tuple[str, DefineValue], ...]
    env: tuple[tuple[str, str], ...]
    build_type: str
    install_prefix: str
    tools: Tools

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data (as stored in the manifest, so it compares equal after a reload)."""
        data = {
            "recipe": self.recipe,
            "commit": self.commit,
            "tarball_sha256": self.tarball_sha256,
            "patches": [{"name": n, "sha256": s} for n, s in self.patches],
            "cherry_pick": list(self.cherry_pick),
            "defines": [[k, list(v) if isinstance(v, tuple) else v] for k, v in self.defines],
            "env": [list(kv) for kv in self.env],
            "build_type": self.build_type,
            "install_prefix": self.install_prefix,
            "tools": {"cmake": self.tools.cmake, "cc": self.tools.cc, "cxx": self.tools.cxx},
        }
        return json.loads(json.dumps(data, sort_keys=True))

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def compilers(recipe: Recipe) -> dict[str, str]:
    """The C and C++ compilers cmake will use, as names or paths (not yet resolved)."""
    env = dict(recipe.build.env)
    out = {}
    for lang, var, default in (("c", "CC", "cc"), ("cxx", "CXX", "c++")):
        define = recipe.build.define(f"CMAKE_{'C' if lang == 'c' else 'CXX'}_COMPILER")
        out[lang] = str(define) if isinstance(define, str) else env.get(var) or os.environ.get(var) or default
    return out


TOOLS_SPEC = s.dict_of(s.string)  # tools.json: {"<real path>:<size>:<mtime_ns>": "<first line of --version>"}


def tool_version(program: str, home: Path, *, remember: bool = True) -> str:
    """First line of ``program --version``, remembered by (path, size, mtime) in tools.json.

    A program that is not installed yields ``"missing"`` (the build then fails clearly on it;
    ``plan`` shows it). ``remember=False`` (``plan``, which changes nothing) reads tools.json but
    never writes it.
    """
    path = runner.which(program)
    if path is None:
        return "missing"
    real = os.path.realpath(path)
    st = os.stat(real)
    ident = f"{real}:{st.st_size}:{st.st_mtime_ns}"
    db_path = home / "tools.json"
    try:
        db = s.load(TOOLS_SPEC, read_json(db_path), db_path)
    except FileNotFoundError:
        db = {}
    except (OSError, ValueError, RecursionError) as exc:  # a SchemaError too: asked again, the file rewritten whole
        ui.warn(f"the remembered tool versions cannot be read ({exc}); asking the tools again")
        db = {}
    if ident in db:
        return db[ident]
    done = runner.capture([path, "--version"], timeout=60)
    text = (done.stdout or done.stderr).strip().splitlines()
    version = text[0].strip() if text else f"unknown (exit {done.returncode})"
    if remember:
        db[ident] = version
        with Root.open(home, "the cache", create=True) as root:
            root.write_atomic(db_path.name, (json.dumps(db, indent=2, sort_keys=True) + "\n").encode())
    return version


def inputs(recipe: Recipe, *, commit: str | None, home: Path, remember: bool = True) -> Inputs:
    """The inputs of building ``recipe`` at ``commit`` (hashed into the cache key); ``remember``:
    see :func:`tool_version`."""
    real, recipe = recipe, home_neutral(recipe, home)
    canonical = recipe.canonical()
    # Only what changes the bytes is hashed. What the build needs ([requires], its hints), how the
    # artifact is judged ([verify]: read from the recipe at apply time, see builder.for_recipe) and
    # the description do not: editing them reuses the artifact.
    for k in NOT_IN_KEY:
        canonical.pop(k, None)
    # Where the source came from and how its ref was spelled do not change what is built: the
    # resolved commit (or the tarball's sha256) does. So a mirror (--source), a tag and the sha it
    # names all share one artifact.
    for k in ("git", "archive", "ref"):
        canonical["source"].pop(k, None)
    # Nor does [source] contains: it is checked, not built (a hit is checked against it: flows.build).
    canonical["source"].pop("contains", None)
    # Nor do the parallelism and a compiler cache (auto, none, ccache, sccache): -j8 and ccache
    # build the same library.
    for k in ("jobs", "launcher"):
        canonical["build"].pop(k, None)
    if not recipe.build.prebuilt:
        canonical["build"].pop("system", None)  # cmake, the default: the keys of earlier builds stay
    return Inputs(
        recipe=json.loads(json.dumps(canonical, sort_keys=True)),
        commit=commit,
        tarball_sha256=recipe.source.sha256,
        patches=tuple((p.name, sha256_file(p)) for p in recipe.patch_files),
        cherry_pick=recipe.source.cherry_pick,
        defines=recipe.build.defines,
        env=recipe.build.env,
        build_type=recipe.build.build_type,
        install_prefix=recipe.build.install_prefix,
        tools=_tools(real, home, remember),
    )


def _tools(recipe: Recipe, home: Path, remember: bool = True) -> Tools:
    """The tool versions; a prebuilt build runs no tool, so none is asked (no ``cmake --version``)."""
    if recipe.build.prebuilt:
        return Tools(cmake=PREBUILT_TOOL, cc=PREBUILT_TOOL, cxx=PREBUILT_TOOL)
    comp = compilers(recipe)
    return Tools(
        cmake=tool_version("cmake", home, remember=remember),
        cc=f"{comp['c']}: {tool_version(comp['c'], home, remember=remember)}",
        cxx=f"{comp['cxx']}: {tool_version(comp['cxx'], home, remember=remember)}",
    )


def home_neutral(recipe: Recipe, home: Path) -> Recipe:
    """``recipe`` with the cache home in its define and env values written ``${ROCMBUILD_HOME}``
    (what the key hashes): a dir rocmbuild makes there (``${HALF_INCLUDE_DIR}``'s, named after
    its content) gives the same key on machines whose homes differ."""
    h = str(home).rstrip("/")

    def one(v):
        if isinstance(v, str) and (v == h or h + "/" in v):
            return v.replace(h + "/", "${ROCMBUILD_HOME}/") if v != h else "${ROCMBUILD_HOME}"
        return tuple(one(x) for x in v) if isinstance(v, tuple) else v

    b = recipe.build
    defines, env = tuple((k, one(v)) for k, v in b.defines), tuple((k, one(v)) for k, v in b.env)
    if (defines, env) == (b.defines, b.env):
        return recipe
    return dataclasses.replace(recipe, build=dataclasses.replace(b, defines=defines, env=env))


def cache_key(inp: Inputs) -> str:
    return inp.key


def log_path(home: Path, key: str) -> Path | None:
    """The newest build log of the artifact ``key`` (kept after success and failure; None: none)."""
    from rocmbuild.builder import logs

    return logs.newest(home, key)


def lookup(key: str, home: Path) -> Artifact | None:
    """The cached artifact for ``key``: the one built here, else one substituted from a binary
    cache (see the module notes), or None. A changed artifact is moved aside, not reused."""
    built = _lookup_built(key, home)
    logger.debug("cache lookup %s in %s: %s", key[:16], artifacts_dir(home), "hit (built)" if built else "no built artifact")
    if built is not None:
        return built
    if origin(imported_dir(home) / key) is None:
        return None
    art = lookup_imported(key, home)
    if art is None:
        ui.warn(f"the substituted artifact {key[:16]} was changed on disk or is unreadable; it will not be reused")
    return art


def _lookup_built(key: str, home: Path) -> Artifact | None:
    path = artifacts_dir(home) / key
    manifest = path / MANIFEST
    if not manifest.is_file():
        return None
    try:
        art = Artifact(path, Manifest.from_json(read_json(manifest)), cached=True)
    except (ValueError, KeyError, TypeError, InputError) as exc:
        ui.warn(f"cached artifact {path} has an unreadable manifest ({exc}); rebuilding")
        _discard(path)
        return None
    changed = art.intact()
    if changed:
        ui.warn(f"cached artifact {path} was changed on disk ({', '.join(changed[:5])}); it will not be reused")
        _discard(path)
        return None
    return art


def imported_dir(home: Path) -> Path:
    """Where artifacts imported from bundles live, apart from the built ones."""
    return artifacts_dir(home) / "imported"


def lookup_imported(key: str, home: Path) -> Artifact | None:
    """The imported artifact ``key`` (for ``apply --artifact`` and ``export KEY``), or None."""
    path = imported_dir(home) / key
    try:
        art = Artifact(path, Manifest.from_json(read_json(path / MANIFEST)), cached=True)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, InputError):
        return None
    return None if art.intact() else art


_KEY = re.compile(r"^[0-9a-f]{64}$")


def entries(home: Path) -> list[Path]:
    """Every artifact directory in the cache: the built ones, then the imported ones (sorted)."""
    out = []
    adir = artifacts_dir(home)
    for d in (adir, imported_dir(home)):
        if d.is_dir() and not d.is_symlink() and not adir.is_symlink():  # what a link points to is not the cache's
            out += sorted(p for p in d.iterdir() if _KEY.match(p.name) and p.is_dir() and not p.is_symlink())
    return out


def quarantine(path: Path) -> Path:
    """Move the artifact directory ``path`` to ``artifacts/.quarantine/`` (a rename: a process still
    reading it is not disturbed); returns where it went. It is never served again."""
    path = Path(path)
    adir = path.parent.parent if path.parent.name == "imported" else path.parent
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    kind = "imported-" if path.parent.name == "imported" else ""
    name = f"{kind}{path.name}-{stamp}-{os.getpid()}"
    with Root.under(adir.parent, adir, "the artifact cache") as root:  # never through a symlink
        root.makedirs(".quarantine")
        root.replace(os.path.relpath(path, adir), f".quarantine/{name}")
    return adir / ".quarantine" / name


def corrupt(art: Artifact, problems: list[str]) -> FetchError:
    """Quarantine ``art`` and the error (exit 3) that says so."""
    try:
        where = str(quarantine(art.path))
    except OSError as exc:
        where = f"nowhere ({exc.strerror or exc})"
    again = ("import the bundle again" if art.imported
             else f"run the command again: the recipe is rebuilt ({art.manifest.recipe})")
    return FetchError(
        f"the cached artifact {art.key[:16]} ({art.manifest.recipe}) does not match its manifest: "
        + "; ".join(problems[:5]) + f"; it was quarantined to {where}; nothing in the target was changed",
        f"{again}; `rocmbuild cache verify` checks the whole cache",
        details={"artifact": str(art.path), "quarantined": where, "problems": problems},
    )


def check_untampered(art: Artifact) -> None:
    """Before a swap: every file whose identity moved since it was published is hashed; a
    mismatch quarantines the artifact and raises (exit 3) before the target is touched."""
    bad = art.tampered()
    if bad:
        raise corrupt(art, bad)


def _discard(path: Path) -> None:
    """Move a bad artifact aside (renamed, so a process still using it is not disturbed)."""
    aside = f".bad-{path.name}-{os.getpid()}"
    try:
        adir = path.parent
        with Root.under(adir.parent.parent if adir.name == "imported" else adir.parent, adir,
                        "the artifact cache") as root:
            root.replace(path.name, aside)
            root.rmtree(aside)
    except OSError:
        return


@contextmanager
def key_lock(home: Path, key: str, wait: bool | LockWait = True) -> Iterator[None]:
    """Serialize builds of the same key (a second one, told to wait, then finds the cache hit;
    ``wait`` is the lock policy, see :class:`rocmbuild.fs.disk.FileLock`)."""
    d = artifacts_dir(home)
    Root.under(home, d, "the artifact cache", create=True).close()
    with FileLock(d / f".{key}.lock", wait=wait, what=f"the build of artifact {key[:16]}"):
        yield
