"""checkout -> configure -> build -> install (DESTDIR staging) -> Artifact; and the build cache.

The cache key is the sha256 of every build input (:func:`inputs`): the canonical recipe (less the source URL, the ref as spelled, ``jobs`` and the launcher), the
resolved commit (or the tarball's sha256), the content of every patch, the cherry-picked
commits, defines, environment, build type, install prefix, and the versions of cmake and of the
C and C++ compilers (the ones the build will use: ``CMAKE_C(XX)_COMPILER`` defines, else
``CC``/``CXX`` from ``[build.env]`` or the environment, else ``cc``/``c++``). The same inputs
never build twice.

Decisions:

* The key can be computed *before* fetching (the commit comes from ``git ls-remote``), so a cache
  hit touches no source tree and starts no compiler at all. Tool versions are remembered in
  ``$ROCMBUILD_HOME/tools.json`` keyed by the tool's resolved path, size and mtime, so even
  ``cc --version`` is not run again until the compiler changes.
* Artifacts are written atomically: everything is staged in ``artifacts/.tmp-<key>-<pid>/`` and
  renamed to ``artifacts/<key>/`` only when complete; an interrupted build (Ctrl-C, crash, a
  failed step) leaves no directory that a later run would trust. Leftover ``.tmp-*`` directories
  are removed by the next build of the same key.
* The build tree ``build/<key>/`` is kept after a failure (a rerun continues incrementally) and
  removed after success (a real MIOpen build tree is tens of GiB).
* Files installed outside ``install_prefix`` (an absolute ``install(... DESTINATION /etc)``) are
  not part of the artifact; rocmbuild warns about them.
* A cached artifact whose files changed on disk (:meth:`Artifact.intact`) is moved aside and
  rebuilt, never reused.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from rocmbuild import runner, ui
from rocmbuild.build import cmake
from rocmbuild.build.artifact import MANIFEST, TREE, Artifact, Manifest, find_libraries, fsync_tree, scan_tree
from rocmbuild.errors import BuildError, InputError, RequirementError
from rocmbuild.recipe.model import Recipe
from rocmbuild import home as home_layout
from rocmbuild.disk import FileLock, atomic_write_json, fsync_dir, read_json

_VERSION_RE = re.compile(r"(\d+\.\d+(?:\.\d+)?)")
_MAKE_PROGRESS = re.compile(r"^\[\s*(\d+)%\]")
_NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


# --------------------------------------------------------------------------------------------
# tools and the cache key


def compilers(recipe: Recipe) -> dict[str, str]:
    """The C and C++ compilers cmake will use, as names or paths (not yet resolved)."""
    env = dict(recipe.build.env)
    out = {}
    for lang, var, default in (("c", "CC", "cc"), ("cxx", "CXX", "c++")):
        define = recipe.build.define(f"CMAKE_{'C' if lang == 'c' else 'CXX'}_COMPILER")
        out[lang] = str(define) if isinstance(define, str) else env.get(var) or os.environ.get(var) or default
    return out


def tool_version(program: str, home: Path) -> str:
    """First line of ``program --version``, remembered by (path, size, mtime) in tools.json.

    A program that is not installed yields ``"missing"`` (the build then fails clearly on it;
    ``plan`` shows it).
    """
    path = runner.which(program)
    if path is None:
        return "missing"
    real = os.path.realpath(path)
    st = os.stat(real)
    ident = f"{real}:{st.st_size}:{st.st_mtime_ns}"
    db_path = home / "tools.json"
    try:
        db = read_json(db_path)
    except (OSError, ValueError):
        db = {}
    if ident in db:
        return db[ident]
    done = runner.capture([path, "--version"], timeout=60)
    text = (done.stdout or done.stderr).strip().splitlines()
    version = text[0].strip() if text else f"unknown (exit {done.returncode})"
    db[ident] = version
    atomic_write_json(db_path, db)
    return version


def inputs(recipe: Recipe, *, commit: str | None, home: Path) -> dict[str, Any]:
    """Everything the build's output depends on (hashed into the cache key)."""
    comp = compilers(recipe)
    canonical = recipe.canonical()
    # Where the source came from and how its ref was spelled do not change what is built: the
    # resolved commit (or the tarball's sha256) does. So a mirror (--source), a tag and the sha it
    # names all share one artifact.
    for k in ("git", "tarball", "ref"):
        canonical["source"].pop(k, None)
    # Nor do the parallelism and a compiler cache: -j8 and ccache build the same library.
    for k in ("jobs", "launcher"):
        canonical["build"].pop(k, None)
    inp = {
        "recipe": canonical,
        "commit": commit,
        "tarball_sha256": recipe.source.sha256,
        "patches": [
            {"name": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in recipe.patch_files
        ],
        "cherry_pick": list(recipe.source.cherry_pick),
        "defines": [[k, list(v) if isinstance(v, tuple) else v] for k, v in recipe.build.defines],
        "env": [list(kv) for kv in recipe.build.env],
        "build_type": recipe.build.build_type,
        "install_prefix": recipe.build.install_prefix,
        "tools": {
            "cmake": tool_version("cmake", home),
            "cc": f"{comp['c']}: {tool_version(comp['c'], home)}",
            "cxx": f"{comp['cxx']}: {tool_version(comp['cxx'], home)}",
        },
    }
    # plain JSON data (tuples become lists), so the manifest's copy compares equal after a reload
    return json.loads(json.dumps(inp, sort_keys=True))


def cache_key(inp: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inp, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def artifacts_dir(home: Path) -> Path:
    return home_layout.artifacts_dir(home)


def log_path(home: Path, key: str) -> Path:
    return home_layout.logs_dir(home) / f"{key}.log"


# --------------------------------------------------------------------------------------------
# the cache


def lookup(key: str, home: Path) -> Artifact | None:
    """The cached artifact for ``key``, or None. A changed artifact is moved aside, not reused."""
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


def _discard(path: Path) -> None:
    """Move a bad artifact aside (renamed, so a process still using it is not disturbed)."""
    aside = path.with_name(f".bad-{path.name}-{os.getpid()}")
    try:
        os.replace(path, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def _key_lock(home: Path, key: str) -> Iterator[None]:
    """Serialize builds of the same key (a second one waits, then finds the cache hit)."""
    d = artifacts_dir(home)
    d.mkdir(parents=True, exist_ok=True)
    with FileLock(d / f".{key}.lock"):
        yield


# --------------------------------------------------------------------------------------------
# building


class _Progress:
    """Turn make's ``[ 45%]`` and ninja's ``[12/300]`` lines into a progress bar."""

    def __init__(self, prog, task) -> None:
        self.prog, self.task = prog, task

    def __call__(self, line: str) -> None:
        step = parse_progress(line)
        if step is not None:
            self.prog.update(self.task, completed=step[0], total=step[1])


def parse_progress(line: str) -> tuple[int, int] | None:
    """(done, total) from a make or ninja progress line, or None."""
    m = _NINJA_PROGRESS.match(line)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = _MAKE_PROGRESS.match(line)
    if m:
        return int(m.group(1)), 100
    return None


def check_launcher(recipe: Recipe) -> str | None:
    if recipe.build.launcher is None:
        return None
    path = runner.which(recipe.build.launcher)
    if path is None:
        raise RequirementError(
            f"compiler launcher '{recipe.build.launcher}' is not installed",
            f"install {recipe.build.launcher} (e.g. apt-get install {recipe.build.launcher}) or drop --launcher / "
            "[build] launcher",
        )
    return path


def build(recipe: Recipe, checkout, *, home: Path, key: str, inp: dict[str, Any]) -> Artifact:
    """Configure, build and install ``checkout`` into a new artifact ``artifacts/<key>``.

    ``checkout`` is a :class:`rocmbuild.build.source.Checkout`. The caller has checked the cache.
    """
    with _key_lock(home, key):
        hit = lookup(key, home)
        if hit is not None:
            return hit
        adir = artifacts_dir(home)
        for stale in adir.glob(f".tmp-{key}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = adir / f".tmp-{key}-{os.getpid()}"
        tmp.mkdir(parents=True)
        build_dir = home_layout.build_dir(home) / key
        log = log_path(home, key)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"# rocmbuild build of {recipe.name} at {checkout.commit or checkout.url}\n")
        launcher = check_launcher(recipe)
        _check_expected_version(recipe, checkout)
        env = cmake.build_env(recipe.build)
        try:
            ui.info(f"configuring {recipe.name} ({recipe.build.generator}, {recipe.build.build_type})")
            runner.run(cmake.configure_argv(recipe.build, checkout.source_dir, build_dir, launcher),
                       env=env, log=log, what="configure failed", hint=_hint(log))
            ui.info(f"building with {cmake.jobs(recipe.build)} jobs (log: {log})")
            with ui.progress(f"building {recipe.name}") as (prog, task):
                runner.run(cmake.build_argv(recipe.build, build_dir), env=env, log=log,
                           on_line=_Progress(prog, task), what="build failed", hint=_hint(log))
            destdir = tmp / "destdir"
            runner.run(cmake.install_argv(build_dir), env=cmake.build_env(recipe.build, destdir), log=log,
                       what="install failed", hint=_hint(log))
            tree = tmp / TREE
            _collect(destdir, recipe.build.install_prefix, tree)
            files = scan_tree(tree)
            libraries = find_libraries(tree, files, recipe.install.libraries)
            for d in recipe.install.data:
                if not (tree / d).is_dir():
                    raise BuildError(
                        f"[install] data '{d}' was not installed by the build",
                        f"check the recipe's [install] data; installed: {', '.join(sorted({f.path.split('/')[0] for f in files}))}",
                    )
            expect = recipe.verify.version
            if expect == "source":
                expect = checkout.version
            manifest = Manifest(
                recipe=recipe.name,
                key=key,
                version=checkout.version,
                expect_version=expect,
                encoding=recipe.verify.encoding,
                smoke=recipe.verify.smoke,
                commit=checkout.commit,
                ref=checkout.ref,
                url=checkout.url,
                install_prefix=recipe.build.install_prefix,
                files=files,
                libraries=libraries,
                data=recipe.install.data,
                inputs=inp,
                created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            )
            fsync_tree(tree)
            atomic_write_json(tmp / MANIFEST, manifest.to_json())
            os.replace(tmp, adir / key)
            fsync_dir(adir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(build_dir, ignore_errors=True)
        ui.info(f"artifact {adir / key}")
        return Artifact(adir / key, manifest, cached=False)


def _check_expected_version(recipe: Recipe, checkout) -> None:
    """A fixed ``verify.version`` that the source does not have fails before compiling, not
    after a swap (a ref that moved on, e.g. a release branch that became 3.5.2)."""
    from packaging.version import InvalidVersion, Version

    expect = recipe.verify.version
    if expect in (None, "source") or checkout.version is None:
        return
    try:
        same = Version(expect) == Version(checkout.version)
    except InvalidVersion:
        same = expect == checkout.version
    if not same:
        raise BuildError(
            f"the source at {checkout.ref or ''} ({(checkout.commit or checkout.url)[:12]}) is version "
            f"{checkout.version}, but recipe '{recipe.name}' expects {expect} (verify.version)",
            "pin source.ref to a commit or tag with that version, or change verify.version",
            details={"expected": expect, "found": checkout.version},
        )


def _hint(log: Path) -> str:
    return f"read the full log at {log}; fix the cause (missing dependency, wrong define) and run again"


def _collect(destdir: Path, prefix: str, tree: Path) -> None:
    """Move ``destdir/<prefix>`` to ``tree``; warn about anything installed elsewhere."""
    staged = destdir / prefix.lstrip("/")
    if not staged.is_dir():
        raise BuildError(
            f"the install step put nothing under the install prefix {prefix}",
            "check CMAKE_INSTALL_PREFIX / [build] install_prefix and the project's install() rules",
        )
    os.replace(staged, tree)
    for dirpath, _dirs, files in os.walk(destdir):
        for f in files:
            ui.warn(f"installed outside the prefix, not part of the artifact: /{Path(dirpath, f).relative_to(destdir)}")
    shutil.rmtree(destdir, ignore_errors=True)
