"""Orchestration of the verbs (the arrows of DESIGN.md's data flow), nothing else.

recipe.load -> overrides -> requirements -> (ls-remote) cache key -> cache hit, or
source.fetch -> build.build -> Artifact; ``apply RECIPE`` = that, then the transaction on the
target, which :mod:`rocmbuild.txnflow` orchestrates (with rollback, history, recover, status).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from rocmbuild import home as home_layout
from rocmbuild import runner, ui
from rocmbuild.build import builder, cache, cmake, source
from rocmbuild.build.artifact import Artifact
from rocmbuild.errors import InputError, RequirementError, RocmbuildError
from rocmbuild.home import artifacts_dir, cache_home
from rocmbuild import recipe as _recipe
from rocmbuild.recipe import Overrides, Recipe
from rocmbuild.target import gpu


def load_recipe(name: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides(),
                *, resolve_auto: bool = True) -> Recipe:
    """Load a recipe, apply command-line overrides and resolve ``GPU_TARGETS = "auto"``."""
    r = _recipe.apply_overrides(_recipe.load(name, recipes_dirs), overrides)
    if resolve_auto:
        r = _recipe.resolve_gpu_targets(r, gpu.detect)
    return r


def requirement_checks(r: Recipe) -> list[dict[str, Any]]:
    """The recipe's [requires] (and its launcher) as doctor-style checks: name/status/detail/fix."""
    from rocmbuild import doctor

    checks = [c.to_json() if hasattr(c, "to_json") else dict(c) for c in doctor.check_requirements(r)]
    launcher = builder.launcher_check(r)
    if launcher is not None:
        checks.append(launcher.to_json())
    return checks


def require(r: Recipe) -> None:
    """Raise RequirementError (exit 2) listing every missing requirement, before any fetch."""
    failed = [c for c in requirement_checks(r) if c["status"] == "fail"]
    if failed:
        lines = "\n".join(f"  - {c['name']}: {c['detail']}" for c in failed)
        fixes = "; ".join(c["fix"] for c in failed if c.get("fix"))
        raise RequirementError(
            f"recipe '{r.name}' needs what this machine does not have:\n{lines}",
            fixes or "install the missing programs; `rocmbuild doctor " + r.name + "` shows every check",
            details={"missing": failed},
        )


def resolve_commit(r: Recipe) -> str | None:
    """The commit the recipe's ref names now (None for tarball sources)."""
    if r.source.tarball:
        return None
    return source.resolve_ref(r)


def build_recipe(r: Recipe, before_build: Callable[[str | None], None] | None = None) -> Artifact:
    """Build (or find in the cache) the artifact for an already-loaded recipe.

    ``before_build(version)`` is called with the version read from the fetched source (or from
    the cached artifact) before anything is compiled; it may raise to stop."""
    require(r)
    home = cache_home()
    commit = resolve_commit(r)
    inp = cache.inputs(r, commit=commit, home=home)
    key = cache.cache_key(inp)
    hit = cache.lookup(key, home)
    if hit is not None:
        ui.info(f"{r.name}: cache hit {key[:16]} (no configure, no compile)")
        if before_build is not None:
            before_build(hit.manifest.version)
        return hit
    # hold the source lock across fetch + build: the work tree is shared per remote, and another
    # rocmbuild must not check out a different ref under our running compiler
    with source.source_lock(r, home=home):
        checkout = source.fetch(r, home=home, log=cache.log_path(home, key), locked=True)
        if checkout.commit != commit:
            # the ref moved between ls-remote and fetch: key the build on what was really fetched
            inp = cache.inputs(r, commit=checkout.commit, home=home)
            key = cache.cache_key(inp)
            hit = cache.lookup(key, home)
            if hit is not None:
                return hit
        if before_build is not None:
            before_build(checkout.version)
        return builder.build(r, checkout, home=home, key=key, inp=inp)


def build(name: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides()) -> Artifact:
    return build_recipe(load_recipe(name, recipes_dirs, overrides))


def build_plan(name: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides(),
               *, offline: bool = False) -> dict[str, Any]:
    """What ``build`` would run, changing nothing. Works offline and without ROCm: an unreachable
    remote leaves the ref unresolved, a GPU_TARGETS = "auto" with no GPU is shown unresolved, and
    every missing requirement is listed instead of raised."""
    r = load_recipe(name, recipes_dirs, overrides, resolve_auto=False)
    notes: list[str] = []
    gpu_targets = r.build.define("GPU_TARGETS")
    if gpu_targets == "auto":
        try:
            r = _recipe.resolve_gpu_targets(r, gpu.detect)
            gpu_targets = r.build.define("GPU_TARGETS")
        except InputError as exc:
            notes.append(f"GPU_TARGETS: {exc.message}; {exc.hint}")
            gpu_targets = "auto (unresolved)"
    home = cache_home()
    commit, ref_error = None, None
    if r.source.git:
        if offline:
            ref_error = "offline: not resolved"
        else:
            try:
                commit = resolve_commit(r)
            except RocmbuildError as exc:
                ref_error = exc.message
    inp = cache.inputs(r, commit=commit, home=home)
    key = cache.cache_key(inp) if (commit or r.source.tarball) else None
    cached = bool(key and (artifacts_dir(home) / key / "manifest.json").is_file())
    src_dir = source.checkout_path(r, home) / (r.source.subdir or "")
    build_dir = home_layout.build_dir(home) / (key or "<key>")
    destdir = artifacts_dir(home) / f".tmp-{key or '<key>'}-<pid>" / "destdir"
    checks = requirement_checks(r)
    missing = [c for c in checks if c["status"] == "fail"]
    if ref_error:
        notes.append(f"ref '{r.source.ref}' unresolved: {ref_error}")
    return {
        "recipe": r.name,
        "path": str(r.path),
        "source": {
            "url": r.source.url,
            "ref": r.source.ref,
            "commit": commit,
            "resolved": commit is not None or bool(r.source.tarball),
            "subdir": r.source.subdir,
            "sparse": list(r.source.sparse),
            "cherry_pick": list(r.source.cherry_pick),
            "patches": [str(p) for p in r.patch_files],
        },
        "gpu_targets": gpu_targets,
        "commands": {
            "configure": cmake.configure_argv(r.build, src_dir, build_dir, r.build.launcher),
            "build": cmake.build_argv(r.build, build_dir),
            "install": cmake.install_argv(build_dir),
        },
        "env": {**dict(r.build.env)},
        "install_env": {"DESTDIR": str(destdir)},
        "cache": {"key": key, "cached": cached, "inputs": inp.to_json()},
        "requirements": checks,
        "missing": missing,
        "notes": notes,
    }


def render_build_plan(plan: dict[str, Any]) -> str:
    s = plan["source"]
    lines = [f"plan for {plan['recipe']} ({plan['path']})"]
    commit = s["commit"] or ("tarball" if s["resolved"] else "UNRESOLVED")
    lines.append(f"  source   {s['url']} @ {s['ref'] or '-'} -> {commit}")
    if s["subdir"]:
        lines.append(f"  sparse   {', '.join([s['subdir'], *s['sparse']])}")
    for c in s["cherry_pick"]:
        lines.append(f"  cherry-pick {c}")
    for p in s["patches"]:
        lines.append(f"  patch    {p}")
    if plan["gpu_targets"] is not None:
        lines.append(f"  GPU_TARGETS {plan['gpu_targets']}")
    env = " ".join(f"{k}={v}" for k, v in plan["env"].items())
    for step in ("configure", "build", "install"):
        prefix = ("DESTDIR=" + plan["install_env"]["DESTDIR"] + " ") if step == "install" else ""
        lines.append(f"  {step:10}{(env + ' ') if env else ''}{prefix}{runner.display(plan['commands'][step])}")
    cache = plan["cache"]
    state_ = "cached (build would do nothing)" if cache["cached"] else ("not cached" if cache["key"] else "key needs the commit")
    lines.append(f"  cache    {cache['key'] or '-'}: {state_}")
    tools = cache["inputs"]["tools"]
    lines.append(f"  tools    {tools['cmake']}; {tools['cc']}; {tools['cxx']}")
    for c in plan["missing"]:
        lines.append(f"  MISSING  {c['name']}: {c['detail']}" + (f" ({c['fix']})" if c.get("fix") else ""))
    for n in plan["notes"]:
        lines.append(f"  note     {n}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# apply a recipe: build (cached), then the transaction (rocmbuild.txnflow)


def apply(name: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides(), **kw: Any) -> dict[str, Any]:
    """``rocmbuild apply``: find the target, build (cached) then :func:`apply_artifact`.

    The target is probed *before* the build, and the version read from the fetched source is
    checked against the torch's compile-time MIOpen before anything is compiled: a torch built
    against MIOpen 3.5 learns in seconds, not after an hour-long build, that it cannot load
    develop's 3.6 (exit 2, nothing built or changed)."""
    from rocmbuild.flows.txnflow import _compat_refusal, _recover_prefix, apply_artifact
    from rocmbuild.target import probe, target

    r = load_recipe(name, recipes_dirs, overrides)
    prefix, _py = target.resolve(kw.get("env"), kw.get("python"))
    recovered = _recover_prefix(prefix, wait=kw.get("wait", False))  # never probe a half-swapped target
    t = target.discover(kw.get("env"), kw.get("python"), timeout=kw.get("probe_timeout", 300.0))

    def check_source(version: str | None) -> None:
        if version:
            check = probe.compatible(version, t.report, r.verify.encoding)
            if not check.ok:
                raise _compat_refusal(check, t.report, r.verify.encoding)

    art = build_recipe(r, before_build=check_source)
    # a cache hit took seconds: the target probed above is still current; after a build, probe again
    result = apply_artifact(art, target_hint=t if art.cached and not recovered else None, **kw)
    result["recovered"] = recovered + result.get("recovered", [])
    return result
