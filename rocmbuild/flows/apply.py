"""Apply a recipe, a lock file or a bundle to a target: one story, and a dry run is that story
stopped before its first write.

    source: recipe loaded | lock read (-> its recipe) | bundle imported into the cache
    target: resolved -> recovered (each state dir under its lock) -> discovered (probed), while
            the recipe's ref is resolved in a thread (``build.Resolving``: git ls-remote)
    recipe: built (cached), refusing before anything is compiled a source version this torch
            cannot load; after a real build the target is probed again only if what decides what
            loads changed meanwhile (an hour may have passed: ``target_fingerprint``)
    plan:   refuse an artifact the torch cannot load -> plan the swap (pure)   <- a dry run stops here
    swap:   preflight -> already applied? -> lock -> recovery guard, re-plan -> transaction

Decisions (docs/json.md fixes what the result holds):
* "Already applied" writes nothing at all in the target: no journal, no backup, no history line,
  not even the lock file's pid. It takes a *shared* flock on the existing lock file, which still
  excludes a concurrent apply (exit 5). The probe that found the library in place is the
  verification; only ``--smoke`` costs a second probe.
* A dry run changes nothing, not even the cache: a bundle is checked where it lies without being
  extracted (a URL is downloaded into a temporary directory removed afterwards; the plan's files
  are then the manifest's), a recipe is only planned (its artifact is used when cached). It
  does not recover, lock or preflight (each of those writes). What the real apply would refuse is
  reported as ``target_error`` and exits with the same code.
* The GPU architecture is checked first (``guards.gpu_arch``): a recipe's targets before it is
  built, a bundle's recorded ones after its import, both before the target is recovered or
  probed; the result carries the verdict (``gpu_arch``), the dry run too.
* Every apply (also "already applied") records the target in the state home (``known-targets/``) and the
  artifact's use, so ``cache gc`` keeps what the target needs; a dry run records nothing.
* One probe before, one after: the plan's probe and the verification probe are all an apply
  starts of the target's Python (the unactivated probe beside the first only when the activation
  sets a variable that decides what loads). A real build does not re-probe a target whose
  ``target_fingerprint`` (the interpreter, torch's package and lib dirs, every library the probe
  saw loaded and its directory, the conda activation scripts: identity, size, mtime, ctime) is
  unchanged: the probe's answer is proven unchanged. Under the lock the libraries are checked again
  (a change re-probes), as before.
* The bundle and lock-file modules (``store.bundle`` and its tar reader, ``flows.export``) are
  imported by the source that needs them: an apply of a cached recipe never loads them (start-up,
  tests/unit/test_startup_imports.py).
* ``--allow-outside-prefix``: the state lives in the state home's targets/<hash>/ (home.state_home) with a target.json
  naming the prefix, so history/recover/rollback given only --env find it again.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Union

from rocmbuild import progress, ui
from rocmbuild.store import cache
from rocmbuild.store.artifact import Artifact
from rocmbuild.store.provenance import origin
from rocmbuild.names import recipe_version
from rocmbuild.errors import RocmbuildError, VerifyError
from rocmbuild.flows import build, guards
from rocmbuild.flows.substitute import CacheOptions
from rocmbuild.home import cache_home, state_home
from rocmbuild.fs.locks import LockWait
from rocmbuild.recipe import Overrides, Recipe, arch
from rocmbuild.results import ApplyResult, BuildPlan, BundleSummary, DryRunResult, TargetPlan
from rocmbuild.swap import plan as _plan
from rocmbuild.swap import knowntargets, statedir
from rocmbuild.swap.pathstate import FsObserver, PathState
from rocmbuild import swap as _txn
from rocmbuild.environment import probe, target
from rocmbuild.environment import verify as verify_mod
from rocmbuild.environment.target import Target

NOT_BUILT_NOTE = "the artifact is not built yet: the file actions are known after the build"


@dataclass(frozen=True)
class RecipeSource:
    name: str
    recipes_dirs: tuple[str, ...] = ()
    overrides: Overrides = Overrides()


@dataclass(frozen=True)
class LockSource:
    """A lock file from ``rocmbuild lock``: its recipe, with every override it pins."""

    path: str
    recipes_dirs: tuple[str, ...] = ()

    def recipe(self) -> RecipeSource:
        from rocmbuild.flows import export

        name, overrides = export.from_lock(self.path, self.recipes_dirs)
        return RecipeSource(name, self.recipes_dirs, overrides)


@dataclass(frozen=True)
class BundleSource:
    """A bundle from ``rocmbuild export`` (a file or URL), checked against its sha256."""

    location: str
    sha256: str | None = None


Source = Union[RecipeSource, LockSource, BundleSource]


@dataclass(frozen=True)
class TargetSpec:
    env: str | None = None
    python: str | None = None


@dataclass(frozen=True)
class ApplyOptions:
    expect: str | None = None  # the version verification must find (default: the artifact's)
    smoke: bool = False
    wait: bool | LockWait = False  # the lock policy (LockWait: --wait, --wait-timeout) for every lock
    keep: int = 5
    allow_outside_prefix: bool = False
    probe_timeout: float = 300.0
    dry_run: bool = False
    allow_other_arch: bool = False  # apply an artifact built for other GPUs than this machine's (warned)
    caches: CacheOptions = CacheOptions()  # substitution from binary caches (a recipe or lock file)
    move_strays: bool = False  # move stray libMIOpen.so* files into the transaction's backups (swap.strays)


def apply(source: Source, where: TargetSpec, options: ApplyOptions = ApplyOptions()) -> ApplyResult | DryRunResult:
    """``rocmbuild apply`` (see the module notes for the order of the steps); the result says how
    long it took and which build log this run wrote (a recipe that was built)."""
    start = time.monotonic()
    if isinstance(source, LockSource):
        source = source.recipe()
    if options.dry_run:
        return replace(_dry_run(source, where, options), duration_s=time.monotonic() - start)
    recipe: Recipe | None = None
    art: Artifact | None = None
    if isinstance(source, RecipeSource):  # a recipe: its targets before it is built
        recipe = build.load_recipe(source.name, source.recipes_dirs, source.overrides)
        targets, encoding = arch.build_targets(recipe.build.defines), recipe.verify.encoding
    else:
        from rocmbuild.store import bundle

        art = bundle.import_bundle(source.location, home=cache_home(), sha256=source.sha256)
        targets, encoding = art.manifest.gpu_targets, art.manifest.encoding
    gpu_arch = guards.refuse_other_arch(targets, encoding, allow_other_arch=options.allow_other_arch)
    prefix, python = target.resolve(where.env, where.python, check=False)  # probed below
    recovered = tuple(guards.recover_prefix(prefix, wait=options.wait))  # never probe a half-swapped target
    # the recipe's ref is resolved (git ls-remote) while the target is probed: neither waits on the other
    resolving = build.Resolving(recipe, offline=options.caches.offline) if recipe is not None else None
    try:
        t = target.discover_at(prefix, python, timeout=options.probe_timeout)
        log = None
        if recipe is not None:
            seen = target_fingerprint(t)
            art = build.build_recipe(recipe, before_build=_source_check(recipe, t), wait=options.wait,
                                     caches=options.caches, resolving=resolving)
            log = build.log_of(art)
            if not art.cached and target_fingerprint(t) != seen:  # changed during the build: probe again
                t = target.discover_at(prefix, python, timeout=options.probe_timeout)
    finally:
        if resolving is not None:
            resolving.stop()  # the probe failed (its error is the one reported), or a stop: no git outlives it
    assert art is not None
    return replace(_swap(art, t, recovered, options), gpu_arch=gpu_arch, duration_s=time.monotonic() - start, log=log,
                   substituted=origin(art.path))


def target_fingerprint(t: Target) -> tuple:
    """What decides what the target's probe finds, as file identities (dev, inode, size, mtime,
    ctime; None when missing): equal before and after a build means the probe's answer holds."""
    paths = [Path(t.python), t.prefix / "etc" / "conda" / "activate.d"]
    torch_file = t.report.torch_file
    if torch_file:
        paths += [Path(torch_file).parent, Path(torch_file).parent / "lib"]
    for lib in t.report.libraries:
        paths += [Path(lib.path), Path(lib.path).parent]
    return tuple((str(p), _identity(p)) for p in paths)


def _identity(path: Path) -> tuple[int, int, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _source_check(r: Recipe, t: Target):
    """``before_build``: a torch built against MIOpen 3.5 learns in seconds, not after an hour-long
    build, that it cannot load develop's 3.6 (exit 2, nothing built or changed)."""

    def check(version: str | None) -> None:
        if version:
            c = verify_mod.compatible(version, t.report, r.verify.encoding)
            if not c.ok:
                raise guards.compat_refusal(c, t.report, r.verify.encoding)

    return check


def _plan_on(art: Artifact, t: Target, options: ApplyOptions,
             observer: FsObserver | None = None) -> tuple[_plan.TargetFacts, _plan.Plan]:
    """Refuse an artifact that cannot load under the target's torch, then plan the swap (pure)."""
    m = art.manifest
    if m.encoding and m.libraries:
        verify_mod.choose(t.report, m.libraries[0].name, m.encoding)  # a MIOpen for a CUDA torch: refused
    version = m.version or m.expect_version  # a prebuilt set reads no version file: its recipe names it
    if version and m.encoding:
        check = verify_mod.compatible(version, t.report, m.encoding)
        if not check.ok:
            raise guards.compat_refusal(check, t.report, m.encoding)
    else:
        ui.warn("the artifact records no version: compatibility is only checked after the swap")
    rt = t.report.runtime(m.encoding)
    facts = _plan.facts_from(t, [lib.name for lib in m.libraries], str(rt) if rt is not None else None)
    sdir = _plan.state_dir_of(facts, [lib.name for lib in m.libraries])
    if sdir is not None and sdir.is_dir():  # what rocmbuild placed: recognised without hashing
        facts = replace(facts, placed=_txn.placed(sdir))
    the_plan = _replan(art, facts, options, observer)
    guards.refuse_needed(art, t, Path(the_plan.libdir))  # DT_NEEDED: libamdhip64.so.7 into a ROCm 6 torch
    return facts, the_plan


def _replan(art: Artifact, facts: _plan.TargetFacts, options: ApplyOptions,
            observer: FsObserver | None = None) -> _plan.Plan:
    return _plan.make(art, facts, allow_outside_prefix=options.allow_outside_prefix, expect=options.expect,
                      observer=observer, move_strays=options.move_strays)


# --------------------------------------------------------------------------------------------
# the swap


def _swap(art: Artifact, t: Target, recovered: tuple, options: ApplyOptions) -> ApplyResult:
    m = art.manifest
    facts, the_plan = _plan_on(art, t, options)
    copy_bytes = guards.preflight(the_plan, art)
    options = replace(options, smoke=options.smoke or bool(m.smoke))  # the recipe's [verify] smoke
    verify = guards.verifier(t.python, timeout=options.probe_timeout, smoke=options.smoke,
                             env=t.activation.extras())
    sdir = Path(the_plan.state_dir)
    if the_plan.already_applied:
        with statedir.TargetLock(sdir, wait=options.wait, shared=True):
            if _replan(art, facts, options).already_applied:
                return _already(art, t, the_plan, verify, recovered, options)
        # changed between the probe and the lock: take the full path below
    if the_plan.outside:
        statedir.register_outside_target(sdir, Path(the_plan.prefix), Path(the_plan.libdir))
    with statedir.TargetLock(sdir, wait=options.wait):
        _remember(art, the_plan)
        raced = tuple(_txn.recover(sdir, verify_restored=verify)) if _txn.needs_recovery(sdir) else ()
        recovered += raced
        stem = m.libraries[0].name if m.libraries else probe.BACKEND_LIBRARY.get(t.report.backend or "", "libMIOpen")
        moved = [lib for lib in t.report.named(stem) if not lib.same_file(lib.path)]
        if raced or moved:
            t = target.discover_at(t.prefix, t.python, timeout=options.probe_timeout)  # it changed while we waited
            facts, the_plan = _plan_on(art, t, options)
        else:
            the_plan = _replan(art, facts, options)
        if the_plan.already_applied:
            return _already(art, t, the_plan, verify, recovered, options)
        ui.info(f"applying {recipe_version(m.recipe, m.version)} to {the_plan.prefix} ({len(the_plan.pending)} path(s))")
        with progress.phase("swap", f"swapping {len(the_plan.pending)} path(s) in {the_plan.prefix}"):
            out = _txn.execute(the_plan, verify=verify, verify_restored=verify, keep=options.keep,
                               meta={"python": str(t.python), "artifact_path": str(art.path)})
    return ApplyResult(the_plan, already_applied=False, txn=out.id, verdict=out.verdict, artifact=str(art.path),
                       recovered=recovered, pruned=tuple(out.pruned), copy_bytes=copy_bytes)


def _remember(art: Artifact, the_plan: _plan.Plan) -> None:
    """The home's record of this target and of this use of the artifact (for ``cache list``/``gc``);
    written in the home, never in the target."""
    state = state_home()
    try:
        knowntargets.register(state, Path(the_plan.state_dir), Path(the_plan.prefix))
    except OSError as exc:
        ui.warn(f"could not record this target in {state} ({exc.strerror or exc}): `cache gc` will not know it")
    build.used(art, cache_home())


def _already(art: Artifact, t: Target, the_plan: _plan.Plan, verify, recovered: tuple,
             options: ApplyOptions) -> ApplyResult:
    """The provisioning fast path: exactly this build is in place; verify it, write nothing."""
    exp = _txn.expectation_after(the_plan)
    if options.smoke:
        verdict = verify(exp)
    else:
        verdict = verify_mod.judge(t.report, library=exp.library_name, encoding=exp.encoding, expect=exp.version,
                              expected_file=exp.expected_files(),
                              links=() if exp.restored else tuple(Path(x) for x in exp.links))
    if not verdict.ok:
        fails = [{"name": c.name, "expected": c.expected, "found": c.found, "message": c.message}
                 for c in verdict.failures()]
        raise VerifyError(
            "the artifact is already in place, but verification fails:\n" + "\n".join(
                f"  - {f['name']}: expected {f['expected']}, found {f['found']}" for f in fails),
            "nothing was changed; `rocmbuild status` shows what the environment loads",
            details={"failures": fails, "verdict": verdict.to_json()})
    _remember(art, the_plan)
    return ApplyResult(the_plan, already_applied=True, txn=None, verdict=verdict, artifact=str(art.path),
                       recovered=recovered, pruned=())


# --------------------------------------------------------------------------------------------
# the dry run: the same story, stopped before the first write


@contextmanager
def _dry_artifact(source: RecipeSource | BundleSource, options: ApplyOptions) -> Iterator[tuple[Artifact | None, BuildPlan | None,
                                                                         BundleSummary | None]]:
    """(the artifact if at hand, the build plan, the bundle checked) without changing the cache."""
    from rocmbuild.store import bundle

    if isinstance(source, RecipeSource):
        bp = build.build_plan(source.name, source.recipes_dirs, source.overrides,
                              offline=options.caches.offline, caches=options.caches)
        hit = cache.lookup(bp.cache_key, cache_home()) if bp.cached and bp.cache_key is not None else None
        yield hit, bp, None
        return
    if not bundle.is_url(source.location):  # read in place: nothing extracted, no temp dir
        art = bundle.inspect(source.location, home=cache_home(), sha256=source.sha256)
        yield art, None, BundleSummary(art.key, art.manifest.recipe, art.manifest.version, art.manifest.gpu_targets)
        return
    tmp = Path(tempfile.mkdtemp(prefix="rocmbuild-dry-run-"))  # only the download lands here
    try:
        art = bundle.inspect(source.location, home=tmp, sha256=source.sha256)
        yield art, None, BundleSummary(art.key, art.manifest.recipe, art.manifest.version, art.manifest.gpu_targets)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _BundleObserver(FsObserver):
    """The filesystem, except that the files of a bundle read in place (not extracted) are what
    its manifest says they are."""

    def __init__(self, art: Artifact) -> None:
        self.art = art

    def _entry(self, path: Path):
        tree = self.art.tree
        return self.art.manifest.file(path.relative_to(tree).as_posix()) if tree in path.parents else None

    def state(self, path: Path) -> PathState:
        f = self._entry(path)
        if f is None:
            return super().state(path)
        return PathState("link", target=f.target) if f.type == "link" else PathState(
            "file", size=f.size, mtime_ns=f.mtime_ns, mode=f.mode)

    def sha256(self, path: Path) -> str:
        f = self._entry(path)
        if f is None:
            return super().sha256(path)
        return f.sha256 or ""


def _dry_arch(source: RecipeSource | BundleSource, art: Artifact | None, options: ApplyOptions):
    """The GPU verdict of the real apply: the artifact's targets, or (not built yet) the recipe's,
    its ``GPU_TARGETS = "auto"`` standing for this machine's GPUs."""
    from rocmbuild.environment import gpu

    host = tuple(gpu.detect())
    if art is not None:
        targets, encoding = art.manifest.gpu_targets, art.manifest.encoding
    else:
        assert isinstance(source, RecipeSource)
        r = build.load_recipe(source.name, source.recipes_dirs, source.overrides, resolve_auto=False)
        targets, encoding = arch.build_targets(r.build.defines, auto=host), r.verify.encoding
    return guards.gpu_arch(targets, encoding, allow_other_arch=options.allow_other_arch, host=host)


def _dry_run(source: RecipeSource | BundleSource, where: TargetSpec, options: ApplyOptions) -> DryRunResult:
    with _dry_artifact(source, options) as (art, bp, summary):
        gpu_arch = _dry_arch(source, art, options)
        refusal = guards.arch_refusal(gpu_arch) if gpu_arch.refused else None
        if art is None:
            signed = f"signed by {bp.signer}" if bp is not None and bp.signer else "unsigned"
            note = (f"would substitute from {bp.substitute} (key {(bp.cache_key or '')[:16]}, {signed}): "
                    "the file actions are known after the download" if bp is not None and bp.substitute
                    else NOT_BUILT_NOTE)
            return DryRunResult(build=bp, target_note=note, target_error=refusal, gpu_arch=gpu_arch)
        if refusal is not None:
            return DryRunResult(build=bp, artifact=summary, target_error=refusal, gpu_arch=gpu_arch)
        try:
            prefix, python = target.resolve(where.env, where.python)
            guards.refuse_unreadable(prefix)  # what the real apply would refuse first
            t = target.discover_at(prefix, python, timeout=options.probe_timeout)
            obs = _BundleObserver(art) if isinstance(source, BundleSource) else None  # read in place
            _facts, the_plan = _plan_on(art, t, replace(options, expect=None), obs)  # planned without --expect
        except RocmbuildError as exc:
            return DryRunResult(build=bp, artifact=summary, target_error=exc, gpu_arch=gpu_arch)
        m = art.manifest
        version = m.version or m.expect_version
        check = verify_mod.compatible(version, t.report, m.encoding) if version and m.encoding else None
        return DryRunResult(build=bp, artifact=summary, target_plan=TargetPlan(the_plan, check, version), gpu_arch=gpu_arch)
