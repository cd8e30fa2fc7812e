"""Build once, apply everywhere: export/import of artifacts, lock files, dry runs.

These compose the pieces of :mod:`rocmbuild.workflow` for unattended provisioning:

* ``export RECIPE|KEY -o FILE`` -- the artifact of a recipe (built or taken from the cache) or
  of a cache key (full, or a unique prefix of at least 8 hex digits), as a bundle with a sha256.
* ``apply --artifact FILE|URL`` -- import the bundle into the local cache (checked) and apply it
  with the same transaction and verification; no compiler, no source checkout needed.
* ``lock`` / ``--from-lock`` -- see :mod:`rocmbuild.lockfile`.
* ``apply --dry-run`` -- the build plan (as ``plan`` prints it) and, where the artifact is
  already at hand and the target can be probed, the exact file actions; nothing is built,
  fetched or changed. For ``--artifact`` the bundle is checked and unpacked into a temporary
  directory that is removed afterwards, so not even the cache changes.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from rocmbuild import ui
from rocmbuild.build import bundle, cache
from rocmbuild.build.artifact import Artifact
from rocmbuild.errors import InputError, RocmbuildError
from rocmbuild.flows import txnflow, workflow
from rocmbuild.home import artifacts_dir, cache_home
from rocmbuild.recipe import lockfile
from rocmbuild.recipe import Overrides

_HEX = re.compile(r"^[0-9a-f]{8,64}$")


def find_cached(key_prefix: str) -> Artifact | None:
    """The cached artifact whose key starts with ``key_prefix`` (None if not a key)."""
    if not _HEX.match(key_prefix):
        return None
    home = cache_home()
    adir = artifacts_dir(home)
    matches = sorted(p.name for p in adir.glob(f"{key_prefix}*") if p.is_dir()) if adir.is_dir() else []
    if len(matches) > 1:
        raise InputError(f"artifact key prefix {key_prefix} is ambiguous: {', '.join(m[:16] for m in matches)}",
                         "give more digits of the key")
    if not matches:
        return None
    art = cache.lookup(matches[0], home)
    if art is None:
        raise InputError(f"cached artifact {matches[0]} is damaged and was set aside", "build it again")
    return art


def export(what: str, out: str, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides()) -> dict[str, Any]:
    art = find_cached(what) or workflow.build(what, recipes_dirs, overrides)
    info = bundle.export(art, Path(out))
    ui.info(f"exported {info.recipe} {info.version or ''} ({info.key[:16]}) to {info.file}")
    return info.to_json()


def lock(name: str, out: str | None, recipes_dirs: Sequence[str] = (), overrides: Overrides = Overrides()) -> dict[str, Any]:
    r = workflow.load_recipe(name, recipes_dirs, overrides, resolve_auto=False)
    commit = workflow.resolve_commit(r)
    data = lockfile.create(name, recipes_dirs, overrides, commit)
    path = Path(out) if out else Path.cwd() / f"{data.recipe}.lock.json"
    lockfile.write(data, path)
    ui.info(f"locked {data.recipe} at {commit or 'its tarball'} in {path}")
    return {"lock_file": str(path), "lock": data.to_json()}


def from_lock(path: str, recipes_dirs: Sequence[str] = ()) -> tuple[str, Overrides]:
    name, ov, data = lockfile.load(path, recipes_dirs)
    ui.info(f"using lock {path}: {data.recipe} at {data.commit or 'tarball'}")
    return name, ov


def apply_bundle(src: str, *, sha256: str | None = None, **apply_kw: Any) -> dict[str, Any]:
    art = bundle.import_bundle(src, home=cache_home(), sha256=sha256)
    return txnflow.apply_artifact(art, **apply_kw)


def dry_run(*, recipe: str | None, artifact: str | None, sha256: str | None, recipes_dirs: Sequence[str],
            overrides: Overrides, env: str | None, python: str | None, allow_outside_prefix: bool,
            probe_timeout: float) -> dict[str, Any]:
    """What ``apply`` would do, changing nothing (see the module docstring)."""
    out: dict[str, Any] = {"dry_run": True}
    tmp = None
    art = None
    try:
        if artifact is not None:
            tmp = Path(tempfile.mkdtemp(prefix="rocmbuild-dry-run-"))
            art = bundle.import_bundle(artifact, home=tmp, sha256=sha256)
            out["artifact"] = {"key": art.key, "recipe": art.manifest.recipe, "version": art.manifest.version}
        else:
            assert recipe is not None
            bp = workflow.build_plan(recipe, recipes_dirs, overrides)
            out["build"] = bp
            if bp["cache"]["cached"]:
                art = cache.lookup(bp["cache"]["key"], cache_home())
        if art is not None:
            try:
                out["target_plan"] = txnflow.plan_artifact(art, env=env, python=python,
                                                            allow_outside_prefix=allow_outside_prefix,
                                                            probe_timeout=probe_timeout)
            except RocmbuildError as exc:
                out["target_plan"] = None
                out["target_error"] = exc.to_json()
                out["_refusal"] = exc  # the CLI exits with apply's code for this refusal
        else:
            out["target_plan"] = None
            out["target_note"] = "the artifact is not built yet: the file actions are known after the build"
        out["already_applied"] = bool(out["target_plan"] and out["target_plan"]["already_applied"])
        return out
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def render_dry_run(d: dict[str, Any]) -> str:
    lines = ["dry run: nothing is fetched, built or changed"]
    if "build" in d:
        lines.append(workflow.render_build_plan(d["build"]))
    if "artifact" in d:
        a = d["artifact"]
        lines.append(f"artifact {a['recipe']} {a['version'] or ''} ({a['key'][:16]}), bundle checked")
    if d.get("target_plan"):
        lines.append(d["target_plan"]["text"])
    elif d.get("target_error"):
        lines.append(f"target: {d['target_error']['message']}")
        if d["target_error"].get("hint"):
            lines.append(f"  hint: {d['target_error']['hint']}")
    elif d.get("target_note"):
        lines.append(f"target: {d['target_note']}")
    return "\n".join(lines)
