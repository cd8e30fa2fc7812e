"""checkout -> configure -> build -> install (DESTDIR staging) -> a new artifact in the cache;
for a prebuilt recipe, the archive's subtree extracted straight into the artifact instead.

Decisions: the artifact is staged in ``artifacts/.tmp-<key>-<pid>/`` and renamed to
``artifacts/<key>/`` only when complete, so an interrupted build leaves nothing a later run would
trust (a stop by any signal removes it on the way out); the build tree ``build/<key>/`` is kept
after a failure (a rerun continues incrementally) and removed after success, and is never used by
two process trees at once (buildtree.py); the published tree is sealed (read-only, each file's
identity recorded: ``artifact.seal``); files installed outside ``install_prefix`` are not part of the
artifact (a warning names them). The whole story is in ``docs/cache.md``.

One module because the build is one story told in order (checkout, configure, build, install,
seal, publish) and each step hands the next what it made; split, the order would be spread over files.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rocmbuild import progress, ui
from rocmbuild.proc import runner, stop
from rocmbuild.builder import buildtree, cmake, logs, reproducible, retry, tweak
from rocmbuild.sources import fixes
from rocmbuild.store.artifact import MANIFEST, TREE, Artifact, Manifest, find_libraries, scan_tree, seal
from rocmbuild.store.cache import Inputs, key_lock, lookup
from rocmbuild.sources.debarchive import Package, is_deb, read_package
from rocmbuild.sources.extract import safe_extract
from rocmbuild.store.manifest import FoundFix
from rocmbuild.fs.disk import atomic_write_json
from rocmbuild.fs.root import Root
from rocmbuild.errors import BuildError, RecipeError, RequirementError
from rocmbuild.home import artifacts_dir, build_dir as build_root
from rocmbuild.fs.locks import LockWait
from rocmbuild.recipe import arch
from rocmbuild.recipe.model import Recipe
from rocmbuild.recipe.paths import prefix_problem

if TYPE_CHECKING:
    from rocmbuild.sources.source import Checkout


# --------------------------------------------------------------------------------------------
# the compiler launcher


@dataclass(frozen=True)
class LauncherCheck:
    """Whether the recipe's compiler launcher (``[build] launcher``, ``--launcher``) is on PATH."""

    launcher: str
    path: str | None  # None: not installed

    def to_json(self) -> dict[str, str]:
        """A doctor-style check: name, status, detail, fix."""
        return {
            "name": f"launcher {self.launcher}",
            "status": "ok" if self.path else "fail",
            "detail": self.path or "not found on PATH",
            "fix": "" if self.path else f"install {self.launcher} or drop --launcher",
        }

    def error(self) -> RequirementError:
        return RequirementError(
            f"compiler launcher '{self.launcher}' is not installed",
            f"install {self.launcher} (e.g. apt-get install {self.launcher}) or drop --launcher / [build] launcher",
        )


AUTO_LAUNCHER = "ccache"


@dataclass(frozen=True)
class Launcher:
    """The compiler launcher a build uses: its path (None: none) and what it adds to the build's
    environment (``auto``'s ccache keeps its own cache under $ROCMBUILD_HOME)."""

    path: str | None = None
    env: tuple[tuple[str, str], ...] = ()


def auto_launcher(recipe: Recipe) -> bool:
    """Whether the recipe leaves the launcher to rocmbuild (``[build] launcher`` unset or ``auto``)."""
    return not recipe.build.prebuilt and recipe.build.launcher in (None, "auto")


def launcher_check(recipe: Recipe) -> LauncherCheck | None:
    """The check of a launcher the recipe names (None: auto, none, or a prebuilt recipe: nothing
    is required)."""
    name = recipe.build.launcher
    if recipe.build.prebuilt or name in (None, "auto", "none"):
        return None
    return LauncherCheck(name, runner.which(name))


def check_launcher(recipe: Recipe) -> str | None:
    """The launcher's path (None: no launcher); a missing named launcher is a RequirementError
    (exit 2); ``auto`` uses ccache when it is on PATH and nothing otherwise."""
    if auto_launcher(recipe):
        return runner.which(AUTO_LAUNCHER)
    check = launcher_check(recipe)
    if check is None:
        return None
    if check.path is None:
        raise check.error()
    return check.path


def launcher(recipe: Recipe, home: Path) -> Launcher:
    """The launcher of this build. ``auto``'s ccache gets ``CCACHE_DIR=<home>/ccache`` (unless
    ``[build.env]`` sets it) and ``CCACHE_BASEDIR=<home>``, so the compiles of two build dirs of
    one source (two keys) hash alike; a named launcher keeps the user's own configuration."""
    path = check_launcher(recipe)
    if path is None or not auto_launcher(recipe):
        return Launcher(path)
    own = dict(recipe.build.env)
    env = {"CCACHE_DIR": str(home / "ccache"), "CCACHE_BASEDIR": str(home)}
    return Launcher(path, tuple((k, v) for k, v in env.items() if k not in own))


# --------------------------------------------------------------------------------------------
# building


def parse_progress(line: str) -> tuple[int, int] | None:
    """(done, total) from a ninja progress line, (percent, 100) from make's, or None."""
    step = progress.parse_step(line)
    if step is None:
        return None
    return (step.done, step.total) if step.done is not None and step.total is not None else (int(step.percent), 100)


def build(recipe: Recipe, checkout: Checkout, *, home: Path, key: str, inp: Inputs,
          wait: bool | LockWait = False, log: Path | None = None) -> Artifact:
    """Configure, build and install ``checkout`` into a new artifact ``artifacts/<key>``.

    The caller has checked the cache; a build of the same key that finished meanwhile is reused.
    ``wait`` is the policy for the key lock (:class:`rocmbuild.fs.disk.FileLock`) and for a build
    tree still used by a live process (not touched: exit 5, unless waiting). ``log`` is this
    attempt's log (:func:`rocmbuild.builder.logs.start`; a new one when not given).
    """
    with key_lock(home, key, wait=wait):
        hit = lookup(key, home)
        if hit is not None:
            return hit
        adir = artifacts_dir(home)
        for stale in adir.glob(f".tmp-{key}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tree_dir = build_root(home) / key
        log = attempt_log(home, key, recipe, checkout, log)
        use = launcher(recipe, home)
        _check_expected_version(recipe, checkout)
        owner, attempt = _claim_tree(recipe, checkout, tree_dir, key, inp, wait)
        tmp = adir / f".tmp-{key}-{os.getpid()}"
        try:
            tmp.mkdir(parents=True)
            tree = tmp / TREE
            if owner is None:
                _extract_prebuilt(recipe, checkout, tree)
            else:
                repro = reproducible.settings(recipe.build, checkout, home=home, build_dir=tree_dir, tools=inp.tools)
                _compile(recipe, checkout, tree_dir, tmp / "destdir", log, use, owner.started, repro)
                _collect(tmp / "destdir", recipe.build.install_prefix, tree)
            manifest = _manifest(recipe, checkout, key, inp, tree)
            seal(tmp, manifest.files)  # read-only, fsynced, identities recorded
            atomic_write_json(tmp / MANIFEST, manifest.to_json())
            with Root.under(home, adir, "the artifact cache") as root:  # published by renameat beneath its fd
                root.replace(tmp.name, key)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if attempt is not None:
                attempt.end(ok=False)
            if isinstance(exc, KeyboardInterrupt):
                stop.note(exc, f"the build of {recipe.name} was ended and its temp artifact removed "
                          f"(the build tree {tree_dir} is kept: the next build continues it)",
                          build_dir=str(tree_dir), removed=str(tmp))
            raise
        if attempt is not None:
            attempt.end(ok=True)
        shutil.rmtree(tree_dir, ignore_errors=True)
        return Artifact(adir / key, manifest, cached=False)


def _claim_tree(recipe: Recipe, checkout: Checkout, tree_dir: Path, key: str, inp: Inputs,
                wait: bool | LockWait) -> tuple[buildtree.Owner | None, retry.Attempt | None]:
    """The build tree, ours (``buildtree.claim``), started from the previous failed attempt at the
    same recipe and commit when this key has none (``retry.seed``), and this attempt's record.
    ``tree_dir`` is ``<home>/build/<key>``.
    A prebuilt recipe has no tree."""
    if recipe.build.prebuilt:
        return None, None
    commit = checkout.commit or inp.tarball_sha256
    retry.seed(tree_dir, recipe=recipe.name, commit=commit, key=key, home=tree_dir.parent.parent)
    owner = buildtree.claim(tree_dir, wait=LockWait.of(wait).wait)
    return owner, retry.Attempt(tree_dir, recipe=recipe.name, commit=commit, key=key)


def _compile(recipe: Recipe, checkout: Checkout, build_dir: Path, destdir: Path, log: Path,
             use: Launcher, started, repro: reproducible.Settings | None = None) -> None:
    """cmake configure, build (with a progress bar) and install into ``destdir``; ``started(sid)``
    records each command's session in the build tree's owner record; ``repro``: the prefix maps
    and SOURCE_DATE_EPOCH (builder/reproducible.py; None: none)."""
    stamp = repro.env() if repro is not None else {}
    env = {**cmake.build_env(recipe.build), **dict(use.env), **stamp}
    hint = f"read the full log at {log}; fix the cause (missing dependency, wrong define) and run again"
    ui.info(f"configuring {recipe.name} ({recipe.build.generator}, {recipe.build.build_type})")
    if repro is not None:
        epoch = "(from [build.env])" if repro.epoch is None else repro.epoch
        ui.detail(f"reproducible: prefix maps to '.', SOURCE_DATE_EPOCH={epoch} ({repro.epoch_from})")
    argv = cmake.configure_argv(recipe.build, checkout.source_dir, build_dir, use.path,
                                tweak.for_recipe(recipe, checkout.commit or checkout.tarball_sha256, checkout.patches),
                                reproducible.flag_values(recipe.build, repro, os.environ))
    retry.reconcile(build_dir, argv, cmake.build_env(recipe.build))  # a kept cache asks nothing this one does not
    with progress.phase("configure", f"configuring {recipe.name}"):
        runner.run(argv, env=env, log=log, what="configure failed", hint=hint, on_start=started)
    jobs = cmake.jobs(recipe.build)
    ui.info(f"building with {jobs} job{'' if jobs == 1 else 's'} (log: {log})")
    with progress.phase("build", f"building {recipe.name}") as steps:
        runner.run(cmake.build_argv(recipe.build, build_dir), env=env, log=log,
                   on_line=steps.line, what="build failed", hint=hint, on_start=started)
    with progress.phase("install", f"installing {recipe.name}"):
        runner.run(cmake.install_argv(build_dir), env={**cmake.build_env(recipe.build, destdir), **stamp},
                   log=log, what="install failed", hint=hint, on_start=started)


def rebuild_into(recipe: Recipe, checkout: Checkout, build_dir: Path, *, home: Path, inp: Inputs, log: Path,
                 use: Launcher) -> Path:
    """Build ``checkout`` from zero in the new ``build_dir`` and return the installed tree
    (``build_dir/.rocmbuild-check/tree``), for ``build --check``: nothing in the cache is touched,
    no attempt is recorded. ``build_dir`` should sit beside ``build/<key>`` (a launcher's
    ``CCACHE_BASEDIR`` makes paths relative to it: the same depth gives the same paths)."""
    out = build_dir / ".rocmbuild-check"
    tree = out / TREE
    if recipe.build.prebuilt:
        out.mkdir(parents=True)
        _extract_prebuilt(recipe, checkout, tree)
        return tree
    repro = reproducible.settings(recipe.build, checkout, home=home, build_dir=build_dir, tools=inp.tools)
    _compile(recipe, checkout, build_dir, out / "destdir", log, use, None, repro)
    _collect(out / "destdir", recipe.build.install_prefix, tree)
    return tree


def attempt_log(home: Path, key: str, recipe: Recipe, checkout: Checkout, log: Path | None) -> Path:
    """This attempt's log: the one the caller started (the fetch wrote to it), else a new one."""
    what = f"# rocmbuild build of {recipe.name} at {checkout.commit or checkout.url}"
    if log is None:
        return logs.start(home, key, what, recipe.name)
    with open(log, "a", encoding="utf-8") as f:
        f.write(what + "\n")
    return log


def _extract_prebuilt(recipe: Recipe, checkout: Checkout, tree: Path) -> None:
    """A prebuilt recipe: the archive's subtree (``[source] subdir``) is extracted straight into
    the artifact's tree, with the same walls as every extraction; the download is the only other
    copy (no ``src/`` tree, no build tree, no process)."""
    subdir = recipe.source.subdir or ""
    ui.info(f"extracting {subdir or 'the archive'} from {checkout.root.name} into the artifact (prebuilt: "
            "no configure, no compile)")
    if (package := safe_extract(checkout.root, tree, subdir=subdir)) is not None:
        ui.info(f"the tree is from {package.describe()}")


def _manifest(recipe: Recipe, checkout: Checkout, key: str, inp: Inputs, tree: Path) -> Manifest:
    """The manifest of the installed ``tree``: every file, every library, what to verify."""
    files = scan_tree(tree)
    libraries = find_libraries(tree, files, recipe.install.libraries)
    found = _fixes_found(recipe, checkout, tree, libraries)
    for d in recipe.install.data:
        if not (tree / d).is_dir():
            raise BuildError(
                f"[install] data '{d}' was not installed by the build",
                f"check the recipe's [install] data; installed: {', '.join(sorted({f.path.split('/')[0] for f in files}))}",
            )
    return Manifest(
        recipe=recipe.name,
        key=key,
        version=checkout.version,
        **verify_fields(recipe, checkout.version),
        commit=checkout.commit,
        ref=checkout.ref,
        url=checkout.url,
        install_prefix=recipe.build.install_prefix,
        files=files,
        libraries=libraries,
        data=recipe.install.data,
        inputs=inp.to_json(),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        gpu_targets=arch.build_targets(recipe.build.defines),
        fixes=tuple(f.name for f in found),
        fixes_found=found,
        package=_package(recipe, checkout),
    )


def _package(recipe: Recipe, checkout: Checkout) -> Package | None:
    """A prebuilt tree's Debian package (its control fields, read again: a few KB), else None."""
    if not recipe.build.prebuilt or not is_deb(checkout.root):
        return None
    return read_package(checkout.root)


def _fixes_found(recipe: Recipe, checkout: Checkout, tree: Path, libraries) -> tuple[FoundFix, ...]:
    """The declared fixes, where found: the artifact's bytes are searched (sources/fixes.py); a
    prebuilt artifact without one is refused (exit 2) before it is published."""
    if not recipe.source.contains:
        return ()
    with progress.phase("fixes", f"searching the artifact of {recipe.name} for its fixes"):
        found, missing = fixes.search_artifact(recipe, tree, [lib.file for lib in libraries])
    if recipe.build.prebuilt and missing:
        raise fixes.artifact_refusal(recipe, missing)
    return fixes.merged(recipe, checkout.fixes, found)


def verify_fields(recipe: Recipe, version: str | None) -> dict:
    """The manifest fields verification uses, from the recipe's ``[verify]`` (``"source"``: the
    version read from the checkout)."""
    expect = recipe.verify.version
    return {"expect_version": version if expect == "source" else expect,
            "encoding": recipe.verify.encoding, "smoke": recipe.verify.smoke}


def for_recipe(art: Artifact, recipe: Recipe) -> Artifact:
    """``art`` as ``recipe`` serves it today: ``[verify]`` is not part of the key, so a cached
    artifact is judged by the recipe's current ``[verify]`` (in memory; the sealed manifest on disk
    keeps what it was built with). A fixed ``verify.version`` the artifact does not have fails
    here, before any swap."""
    if art.imported:
        return art
    m = art.manifest
    _check_version(recipe, m.version, m.ref, m.commit or m.url)
    return replace(art, manifest=replace(m, **verify_fields(recipe, m.version)))


def _check_expected_version(recipe: Recipe, checkout: Checkout) -> None:
    """A fixed ``verify.version`` that the source does not have fails before compiling, not
    after a swap (a ref that moved on, e.g. a release branch that became 3.5.2)."""
    _check_version(recipe, checkout.version, checkout.ref, checkout.commit or checkout.url)


def _check_version(recipe: Recipe, version: str | None, ref: str | None, where: str) -> None:
    from packaging.version import InvalidVersion, Version

    expect = recipe.verify.version
    if expect in (None, "source") or version is None:
        return
    try:
        same = Version(expect) == Version(version)
    except InvalidVersion:
        same = expect == version
    if not same:
        at = f"{ref} ({where[:12]})" if ref else where[:12]
        raise RecipeError(  # the recipe contradicts its own source: bad input, exit 2, nothing changed
            f"the source at {at} is version {version}, but recipe '{recipe.name}' expects {expect} "
            "(verify.version)",
            "pin source.ref to a commit or tag with that version, or change verify.version",
            details={"expected": expect, "found": version},
        )


def _collect(destdir: Path, prefix: str, tree: Path) -> None:
    """Move ``destdir/<prefix>`` to ``tree``; warn about anything installed elsewhere.

    The prefix is checked again here (the recipe parser refuses an unclean one), and every
    directory from ``destdir`` down to ``destdir/<prefix>`` must be a real directory, not a
    symlink: what is moved, and later removed with the temp dir, is always inside ``destdir``."""
    staged = _staged_prefix(destdir, prefix)
    os.replace(staged, tree)
    for dirpath, _dirs, files in os.walk(destdir):
        for f in files:
            ui.warn(f"installed outside the prefix, not part of the artifact: /{Path(dirpath, f).relative_to(destdir)}")
    shutil.rmtree(destdir, ignore_errors=True)


def _staged_prefix(destdir: Path, prefix: str) -> Path:
    """``destdir/<prefix>``, refused unless it is a real directory inside ``destdir`` after
    resolving every symlink (no component may be a link)."""
    problem = prefix_problem(prefix)
    staged = destdir / prefix.lstrip("/")
    if problem is None:
        steps = prefix.strip("/").split("/")
        for here in (destdir, *(destdir.joinpath(*steps[:i + 1]) for i in range(len(steps)))):
            if here.is_symlink():
                problem = f"{here} is a symlink (to {os.readlink(here)})"
                break
        else:
            if staged.is_dir():
                real, root = staged.resolve(), destdir.resolve()
                if real == root or root not in real.parents:
                    problem = f"{staged} resolves to {real}, outside {root}"
    if problem is not None:
        raise BuildError(f"refusing to collect the install prefix {prefix}: {problem}; nothing was moved",
                         "use a clean absolute [build] install_prefix and an install step that does not "
                         "replace its directories with symlinks")
    if not staged.is_dir():
        raise BuildError(
            f"the install step put nothing under the install prefix {prefix}",
            "check CMAKE_INSTALL_PREFIX / [build] install_prefix and the project's install() rules",
        )
    return staged
