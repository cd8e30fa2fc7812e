"""Build a recipe, or say what building it would run.

recipe.load -> overrides -> requirements -> (ls-remote) cache key -> cache hit, or
source.fetch -> pipeline.build -> Artifact. The source lock is held across fetch and build: the work
tree is shared per remote, and another rocmbuild must not check out a different ref under our
running compiler. Both locks (source, artifact key) follow the one policy (``--wait``,
``--wait-timeout``): ``build`` has no target, so its options govern exactly these two. ``build_plan`` changes nothing and never fails for what only a build needs
(network, GPU, requirements): it reports them instead. Every cache hit and every new build
records a use of the artifact (its last use, for ``cache gc``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Sequence

from rocmbuild import home as home_layout
from rocmbuild import progress
from rocmbuild import recipe as _recipe
from rocmbuild import ui
from rocmbuild.builder import pipeline, cmake, hints, logs, reproducible, requirements, shims, tweak
from rocmbuild.store import cache, housekeeping
from rocmbuild.sources import fixes, source
from rocmbuild.store.artifact import Artifact
from rocmbuild.store.manifest import FoundFix
from rocmbuild.store.provenance import origin
from rocmbuild.errors import FetchError, InputError, RequirementError, RocmbuildError
from rocmbuild.flows import substitute
from rocmbuild.flows.substitute import CacheOptions
from rocmbuild.home import artifacts_dir, cache_home
from rocmbuild.fs.locks import LockWait
from rocmbuild.names import safe_text
from rocmbuild.recipe import Overrides, Recipe
from rocmbuild.recipe import variables
from rocmbuild.results import BuildPlan, BuildResult, SourcePlan
from rocmbuild.environment import gpu


def load_recipe(name: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides(),
                *, resolve_auto: bool = True) -> Recipe:
    """Load a recipe, apply command-line overrides, resolve the recipe variables (``${ROCM_PATH}``,
    ``${HIP_CXX}``, ...: recipe.variables) and ``GPU_TARGETS = "auto"``."""
    r = variables.resolve_recipe(_recipe.apply_overrides(_recipe.load(name, recipes_dirs), overrides))
    if resolve_auto:
        r = _recipe.resolve_gpu_targets(r, gpu.detect)
    return r


def requirement_checks(r: Recipe) -> tuple[requirements.DoctorCheck, ...]:
    """The recipe's [requires] (and its launcher) as doctor-style checks."""
    checks = requirements.check_requirements(r)
    launcher = pipeline.launcher_check(r)
    if launcher is not None:
        checks.append(requirements.DoctorCheck(**launcher.to_json()))
    return tuple(checks)


def _missing(r: Recipe) -> RequirementError | None:
    try:
        require(r)
    except RequirementError as exc:
        return exc
    return None


def require(r: Recipe) -> None:
    """Raise RequirementError (exit 2) listing every missing requirement, before any fetch."""
    failed = [c for c in requirement_checks(r) if c.status == "fail"]
    if failed:
        lines = "\n".join(safe_text(f"  - {c.name}: {c.detail}") for c in failed)  # one line each
        fixes = safe_text(hints.summary([c.fix for c in failed]))  # one install line, packages once
        raise RequirementError(
            f"recipe '{r.name}' needs what this machine does not have:\n{lines}",
            fixes or "install the missing programs; `rocmbuild doctor " + r.name + "` shows every check",
            details={"missing": [c.to_json() for c in failed]},
        )


def resolve_commit(r: Recipe, *, offline: bool = False) -> str | None:
    """The commit the recipe's ref names now (None for tarball sources). A 40-hex ``ref`` is its
    own answer (no network); ``offline`` never asks the remote: see :func:`offline_commit`."""
    if r.source.tarball:
        return None
    if offline and not source.is_full_sha((r.source.ref or "").lower()):
        return offline_commit(r, cache_home())
    return source.resolve_ref(r)


class Resolving:
    """:func:`resolve_commit` started in a thread of its own, so its ``git ls-remote`` (a network
    round trip, seconds for a large monorepo) runs while ``apply`` probes the target (the target's
    ``import torch``, seconds for a real ROCm torch): the one waits on nothing from the other.

    :meth:`result` waits for it and returns the commit or raises its error, as a call would;
    :meth:`stop` ends its command if it still runs (the probe failed, or a stop arrived: the
    caller's error is the one reported, and no git outlives it). The thread is a daemon, so a
    process ending at an error does not wait for a remote; the command's supervisor ends the
    command then (its parent-death signal)."""

    def __init__(self, r: Recipe, *, offline: bool = False) -> None:
        from rocmbuild.proc import stopper

        self.recipe, self.offline = r, offline
        self._stopper = stopper.Stopper()
        self._done = threading.Event()
        self._commit: str | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, name="rocmbuild-resolve", daemon=True).start()

    def _run(self) -> None:
        from rocmbuild.proc import stopper

        try:
            with stopper.stoppable(self._stopper):
                self._commit = resolve_commit(self.recipe, offline=self.offline)
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that asks for the result
            self._error = exc
        finally:
            self._done.set()

    def result(self) -> str | None:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._commit

    def stop(self) -> None:
        if not self._done.is_set():
            self._stopper.stop()


def offline_commit(r: Recipe, home: Path) -> str:
    """``--offline`` with a ref that needs resolving (decision): the commit of the newest cached
    artifact (built or substituted) that is exactly this recipe's build at its commit (its key is
    the one the recipe computes there), i.e. what the ref named when it was last built or
    substituted here; none: exit 3."""
    found = []
    for path in cache.entries(home):
        art = cache.lookup(path.name, home)
        if art is None:
            continue
        m = art.manifest
        if m.recipe != r.name or not m.commit:
            continue
        if cache.cache_key(cache.inputs(r, commit=m.commit, home=home)) == art.key:
            found.append(((path / "manifest.json").stat().st_mtime, m.commit))
    if not found:
        raise FetchError(f"{r.name}: --offline, and the ref '{r.source.ref or 'HEAD'}' needs the network to be resolved: "
                         "no cached artifact of this recipe matches it",
                         "pin a full 40-hex commit (--ref SHA, or apply a lock file), or run without --offline")
    return max(found)[1]


def build_recipe(r: Recipe, before_build: Callable[[str | None], None] | None = None, *,
                 wait: bool | LockWait = False, caches: CacheOptions = CacheOptions(),
                 resolving: Resolving | None = None) -> Artifact:
    """Build (or find in the cache) the artifact for an already-loaded recipe.

    ``before_build(version)`` is called with the version read from the fetched source (or from
    the cached artifact) before anything is compiled; it may raise to stop. ``wait`` is the lock
    policy for the source and artifact-key locks (fail at once by default, like the target's).
    The attempt's log is started before the fetch, so it holds the fetch's output too. After the
    local cache, the binary caches are asked (``caches``: :mod:`rocmbuild.flows.substitute`).
    ``resolving``: the commit already being resolved (:class:`Resolving`, of this recipe)."""
    home = cache_home()
    missing = _missing(r)  # raised only if this machine must build (a cached artifact needs no compiler)
    if resolving is not None and (resolving.recipe is not r or resolving.offline != caches.offline):
        raise ValueError("build_recipe: resolving was started for another recipe or --offline setting")
    try:
        commit = resolving.result() if resolving is not None else resolve_commit(r, offline=caches.offline)
    except FetchError:
        if missing is not None:  # what to install says more than an unreachable remote
            raise missing from None
        raise
    inp = cache.inputs(r, commit=commit, home=home)
    key = cache.cache_key(inp)
    hit = None if caches.fresh else cache.lookup(key, home)
    if caches.fresh:
        _discard(home, key)
    if hit is None and (caches.lookup or caches.require):
        hit = substitute.substitute(r.name, key, home, caches, wait=wait)
    elif hit is not None:
        ui.info(f"{r.name}: cache hit {key[:16]} (no configure, no compile)")
    if hit is not None:
        hit = _with_fixes(pipeline.for_recipe(hit, r), r, home, wait)  # today's [verify] and contains: not in the key
        if before_build is not None:
            before_build(hit.manifest.version)
        return used(hit, home)
    if missing is not None:
        raise missing
    with source.source_lock(r, home=home, wait=wait):
        log = logs.start(home, key, f"# rocmbuild: fetch and build of {r.name} ({r.source.url} {r.source.ref or ''})",
                         r.name)
        with progress.phase("fetch", f"fetching {r.name}"):
            checkout = fixes.check(r, source.fetch(r, home=home, log=log, locked=True), home=home, log=log)
        if checkout.commit != commit:
            # the ref moved between ls-remote and fetch: key the build on what was really fetched
            inp = cache.inputs(r, commit=checkout.commit, home=home)
            key = cache.cache_key(inp)
            hit = cache.lookup(key, home)
            if hit is not None:
                return used(_carries(pipeline.for_recipe(hit, r), checkout.fixes), home)
            log = logs.start(home, key, f"# rocmbuild: build of {r.name}: the ref moved during the fetch (its log: {log})",
                             r.name)
        if before_build is not None:
            before_build(checkout.version)
        shims.make(r, home)  # ${HALF_INCLUDE_DIR}'s half/half.hpp, when rocmbuild provides it
        return used(pipeline.for_recipe(pipeline.build(r, checkout, home=home, key=key, inp=inp, wait=wait, log=log), r), home)


def _discard(home: Path, key: str) -> None:
    """``--fresh``: the cached artifact of ``key`` goes (under its key lock), so the build that
    follows publishes anew; one a running build holds stays (that build publishes it)."""
    path = artifacts_dir(home) / key
    if not path.is_dir():
        return
    why = housekeeping.take(home, housekeeping.Candidate("artifact", str(path), "--fresh", 0, None, key), dry_run=False)
    if why is None:
        ui.info(f"--fresh: removed the cached artifact {key[:16]}; building anew")
    else:
        ui.warn(f"--fresh: the cached artifact {key[:16]} stays: {why}")


def _carries(art: Artifact, found: tuple[FoundFix, ...]) -> Artifact:
    """``art`` listing ``found`` among its fixes (in memory; the sealed manifest keeps its own)."""
    m = art.manifest
    more = tuple(f for f in found if f.name not in m.fixes)
    if not more:
        return art
    return replace(art, manifest=replace(m, fixes=m.fixes + tuple(f.name for f in more),
                                         fixes_found=m.found() + more))


def _with_fixes(art: Artifact, r: Recipe, home: Path, wait: bool | LockWait) -> Artifact:
    """A cache hit as ``r`` serves it: a declared fix its manifest does not list (the recipe
    gained it after the build; [source] contains is not in the key) is searched in the
    artifact's own bytes first; one not there is, for a source recipe, checked on the fetched
    source, and refused like a build's; a prebuilt artifact without it is refused (exit 2)."""
    todo = [f.name for f in r.source.contains if f.name not in art.manifest.fixes]
    if art.imported or not todo:
        return art
    with progress.phase("fixes", f"searching the artifact of {r.name} for its fixes"):
        found, missing = fixes.search_artifact(r, art.tree, [lib.file for lib in art.manifest.libraries], todo)
    art = _carries(art, tuple(found))
    if r.build.prebuilt:
        if missing:
            raise fixes.artifact_refusal(r, missing)
        return art
    if all(f.name in art.manifest.fixes for f in r.source.contains):
        return art
    with source.source_lock(r, home=home, wait=wait), progress.phase("fetch", f"checking the fixes of {r.name}"):
        checkout = fixes.check(r, source.fetch(r, home=home, locked=True), home=home)
    return _carries(art, checkout.fixes)


def used(art: Artifact, home: Path) -> Artifact:
    """Record a use of ``art`` (its last use: what ``cache gc`` ages artifacts by); returns it."""
    housekeeping.touch(home, art.path)
    return art


def log_of(art: Artifact) -> str | None:
    """The log of the build that just made ``art`` (None: a cache hit ran nothing). The source
    lock is held from the fetch to the publish, so no other attempt at this key started after ours."""
    if art.cached:
        return None
    log = logs.newest(cache_home(), art.key)
    return str(log) if log else None


def build(name: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides(), *,
          wait: bool | LockWait = False, caches: CacheOptions = CacheOptions()) -> Artifact:
    return build_recipe(load_recipe(name, recipes_dirs, overrides), wait=wait, caches=caches)


def build_result(name: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides(), *,
                 wait: bool | LockWait = False, caches: CacheOptions = CacheOptions()) -> BuildResult:
    """``rocmbuild build``: the artifact, how long this run took, the log it wrote and, for a
    substituted artifact, where it came from."""
    start = time.monotonic()
    before = {p.name for p in cache.entries(cache_home())}
    art = build(name, recipes_dirs, overrides, wait=wait, caches=caches)
    return BuildResult(art, duration_s=time.monotonic() - start, log=log_of(art), substituted=origin(art.path),
                       added=art.key not in before)


# --------------------------------------------------------------------------------------------
# the build plan


def _gpu_targets(r: Recipe) -> str | tuple[str, ...] | None:
    """The recipe's GPU_TARGETS as it wrote it ("a;b" or a list; checked by recipe/arch.py)."""
    v = r.build.define("GPU_TARGETS")
    return v if v is None or isinstance(v, (str, tuple)) else str(v)


def _soft_gpu_targets(r: Recipe, notes: list[str]) -> tuple[Recipe, str | tuple[str, ...] | None]:
    """Resolve GPU_TARGETS = "auto" if a GPU is there; else say so in ``notes``."""
    gpu_targets = _gpu_targets(r)
    if gpu_targets != "auto":
        return r, gpu_targets
    try:
        r = _recipe.resolve_gpu_targets(r, gpu.detect)
        return r, _gpu_targets(r)
    except InputError as exc:
        notes.append(f"GPU_TARGETS: {exc.message}; {exc.hint}")
        return r, "auto (unresolved)"


def _soft_commit(r: Recipe, offline: bool) -> tuple[str | None, str | None]:
    """(commit, why it is unresolved) for a git source; (None, None) for a tarball."""
    if not r.source.git:
        return None, None
    if offline:
        return None, "offline: not resolved"
    try:
        return resolve_commit(r), None
    except RocmbuildError as exc:
        return None, exc.message


def _soft_launcher(r: Recipe) -> str | None:
    """The launcher ``build`` would use (a named one missing from PATH: by its name)."""
    try:
        return pipeline.check_launcher(r)
    except RequirementError:
        return r.build.launcher


def _reproducible_note(repro: reproducible.Settings | None) -> str:
    if repro is None:
        return "reproducible = false: no prefix maps, no SOURCE_DATE_EPOCH"
    return ("reproducible: the source and build dirs map to '.' in CMAKE_C_FLAGS and CMAKE_CXX_FLAGS; "
            f"SOURCE_DATE_EPOCH from {repro.epoch_from}")


def _source_plan(r: Recipe, commit: str | None) -> SourcePlan:
    s = r.source
    return SourcePlan(url=s.url, ref=s.ref, commit=commit, resolved=commit is not None or bool(s.tarball),
                      subdir=s.subdir, sparse=tuple(s.sparse), cherry_pick=tuple(s.cherry_pick),
                      patches=tuple(str(p) for p in r.patch_files),
                      contains=tuple({k: v for k, v in asdict(f).items() if v not in (None, "")} for f in s.contains))


def build_plan(name: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides(),
               *, offline: bool = False, caches: CacheOptions = CacheOptions()) -> BuildPlan:
    """What ``build`` would run, changing nothing. Works offline and without ROCm: an unreachable
    remote leaves the ref unresolved, a GPU_TARGETS = "auto" with no GPU is shown unresolved, and
    every missing requirement is listed instead of raised."""
    notes: list[str] = []
    r, gpu_targets = _soft_gpu_targets(load_recipe(name, recipes_dirs, overrides, resolve_auto=False), notes)
    home = cache_home()
    commit, ref_error = _soft_commit(r, offline)
    inp = cache.inputs(r, commit=commit, home=home, remember=False)  # plan writes nothing
    key = cache.cache_key(inp) if (commit or r.source.tarball) else None
    src_dir = source.checkout_path(r, home) / (r.source.subdir or "")
    build_dir = home_layout.build_dir(home) / (key or "<key>")
    checks = requirement_checks(r)
    if ref_error:
        ref = f"ref '{r.source.ref}'" if r.source.ref else "the remote's default branch"
        notes.append(f"{ref} unresolved: {ref_error}")
    tw = tweak.for_recipe(r, commit, [sha for _, sha in inp.patches])
    repro = reproducible.planned(r.build, (source.checkout_path(r, home), src_dir, build_dir), inp.tools)
    flags = reproducible.flag_values(r.build, repro, os.environ)
    if not r.build.prebuilt:
        notes.append(_reproducible_note(repro))
    commands = {"configure": cmake.configure_argv(r.build, src_dir, build_dir, _soft_launcher(r), tw, flags),
                "build": cmake.build_argv(r.build, build_dir), "install": cmake.install_argv(build_dir)}
    if r.source.contains:
        notes.append("contains: " + "; ".join(f.name for f in r.source.contains)
                     + (" (searched in the artifact's files after the extraction: an archive without one is refused)"
                        if r.build.prebuilt else " (checked after the fetch, before configure: a source without one "
                        "is refused; then searched in the built libraries too)"))
    if r.build.prebuilt:
        commands = {}  # nothing runs: the archive's subtree is the install tree
        notes.append(f"prebuilt: '{r.source.subdir or '/'}' of {source.checkout_path(r, home)} is extracted "
                     "into the artifact; no configure, no compile")
    cached = bool(key and ((artifacts_dir(home) / key / "manifest.json").is_file()
                           or origin(cache.imported_dir(home) / key) is not None))  # looked at, never discarded
    would = substitute.WouldSubstitute()
    if key and not cached and not offline:
        would = substitute.would_substitute(key, caches)  # a manifest lookup per cache, no download
        notes += would.notes
    return BuildPlan(
        recipe=r.name, path=str(r.path), source=_source_plan(r, commit), gpu_targets=gpu_targets, substitute=would.url,
        signer=would.signer, unreachable=would.unreachable, commands=commands,
        env=dict(r.build.env),
        destdir=str(artifacts_dir(home) / f".tmp-{key or '<key>'}-<pid>" / "destdir"),
        cache_key=key, cached=cached,
        inputs=inp, requirements=checks, notes=tuple(notes),
    )
