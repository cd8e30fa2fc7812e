"""The human text of the fleet verbs (``config list``, ``key generate``, ``push``, ``cache list
--remote``); render.py registers each function for its result type (:data:`RENDERERS`)."""

from __future__ import annotations

import json

from rocmbuild.cli.textlayout import Renderers
from rocmbuild.names import recipe_version, safe_text
from rocmbuild.results import BuildPlan, ConfigListResult, KeyResult, PushResult, RemoteListResult


def size(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def would(plan: BuildPlan) -> str:
    """Where the artifact would come from, for ``plan`` and ``apply --dry-run``: cached locally,
    substituted from a binary cache (its key, its signer) or built here (and why not substituted,
    when a cache could not be reached)."""
    key = (plan.cache_key or "")[:16]
    if plan.cached:
        return "cached locally (build would do nothing)"
    if plan.substitute:
        signed = f"signed by {plan.signer}" if plan.signer else "UNSIGNED, allowed by --allow-unsigned"
        return f"would substitute from {plan.substitute} (key {key}, {signed})"
    if not plan.cache_key:
        return "would build (the key needs the commit)"
    if plan.unreachable:
        return f"would build ({', '.join(plan.unreachable)} unreachable)"
    return "would build"


def config_list(r: ConfigListResult) -> str:
    lines = []
    for s in r.settings:
        unset = s.value in (None, [])
        value = s.default or "(not set)" if unset else json.dumps(s.value) if not isinstance(s.value, str) else s.value
        lines.append(f"{s.name:18} {safe_text(value)}")
        lines.append(f"{'':18}   from {s.source or 'the default: no config file sets it'}")
    read = ", ".join(r.files) if r.files else "none"
    lines.append(f"files read: {read} (searched, in order: {', '.join(r.searched)}; later wins, flags win over all)")
    return "\n".join(lines)


def key_generate(r: KeyResult) -> str:
    return (f"{r.public_key}\n"
            f"secret key written to {r.secret_file} (mode 0600: keep it on the builder only)\n"
            f"trust it on each machine: [trust] public_keys = [\"{r.public_key}\"]")


def push(r: PushResult) -> str:
    what = f"{safe_text(recipe_version(r.recipe, r.version))} ({r.key[:16]})"
    if not r.uploaded:
        by = f"signed by {safe_text(r.held_by)}" if r.held_by else "unsigned"
        return f"{r.url} already has {what}, {by}: nothing uploaded"
    return f"pushed {what} to {r.url}: {size(r.size)}, sha256 {r.bundle_sha256}, signed by {r.signer}"


def remote_list(r: RemoteListResult) -> str:
    lines = []
    for a in r.artifacts:
        targets = ",".join(a.gpu_targets) if a.gpu_targets else "any GPU"
        signer = f"signed by {a.signer}" + (" (trusted)" if a.trusted else " (NOT trusted here)") if a.signer else "unsigned"
        lines.append(f"{a.key[:16]} {safe_text(a.recipe or '?')} {safe_text(a.version or '?')}  {targets}  "
                     f"{size(a.size)}  {signer}")
    lines.append(f"{len(r.artifacts)} artifact(s) in {r.url}")
    return "\n".join(lines)


RENDERERS: Renderers = ((ConfigListResult, config_list), (KeyResult, key_generate), (PushResult, push),
             (RemoteListResult, remote_list))
