"""Presentation: verb results as JSON-ready dicts and as the text a person reads.

Kept apart from ``cli.py`` (argument parsing and exit codes) and from the modules that do the
work, so every verb's output can change without touching either.
"""

from __future__ import annotations

from typing import Any


def build_data(art) -> dict[str, Any]:
    m = art.manifest
    return {
        "cached": art.cached,
        "artifact": str(art.path),
        "key": m.key,
        "recipe": m.recipe,
        "commit": m.commit,
        "version": m.version,
        "libraries": [{"name": lib.name, "file": lib.file, "soname": lib.soname, "chain": list(lib.chain)}
                      for lib in m.libraries],
    }


def build(data: dict[str, Any]) -> str:
    verb = "cached (no configure, no compile)" if data["cached"] else "built"
    text = f"{data['recipe']} {data['version'] or ''} @ {(data['commit'] or '')[:12]}: {verb}\nartifact: {data['artifact']}"
    for lib in data["libraries"]:
        text += f"\n  {lib['name']}: {' -> '.join(lib['chain'])} (SONAME {lib['soname']})"
    return text


def status_data(target) -> dict[str, Any]:
    """status as a dict (other parts of status, e.g. what rocmbuild changed, are added by key)."""
    from pathlib import Path

    from rocmbuild.target.versions import decode_version

    r = target.report
    libs = []
    for lib in r.libraries:
        version = None
        if lib.kind in ("miopen", "cudnn") and r.backend in (None, lib.kind):
            n = r.effective_version_int(lib.kind)
            version = str(decode_version(n, lib.kind)) if n is not None else None
        libs.append({**lib.to_json(), "inside_prefix": target.inside_prefix(lib.path),
                     "layout": target.layout_of(lib), "version": version,
                     "links": [str(x) for x in target.links_to(Path(lib.path))]})
    fmt = (lambda t: ".".join(map(str, t)) if t else None)
    return {
        "target": target.to_json(),
        "torch": {"version": r.torch_version, "hip": r.hip, "cuda": r.cuda, "backend": r.backend,
                  "cudnn_available": r.cudnn_available, "cuda_available": r.cuda_available,
                  "version_int": r.version_int, "version_error": r.version_error,
                  "version_int_retry": r.version_int_retry, "runtime_version": fmt(r.runtime_version),
                  "compile_version": fmt(r.compile_version), "python": r.python,
                  "python_version": r.python_version},
        "libraries": libs,
        "probe_errors": r.errors,
    }


def status(data: dict[str, Any]) -> str:
    t, tv = data["target"], data["torch"]
    build = f"ROCm {tv['hip']}" if tv["hip"] else (f"CUDA {tv['cuda']}" if tv["cuda"] else "CPU-only (no MIOpen/cuDNN)")
    lines = [f"target: {t['prefix']} (python {t['python']}, {tv['python_version']})",
             f"torch {tv['version']}: {build}; compiled against {tv['compile_version'] or '-'}, "
             f"runtime {tv['runtime_version'] or '-'}, cudnn.version() = "
             + (f"raises {tv['version_error']} (then {tv['version_int_retry']})" if tv["version_error"]
                else str(tv["version_int"]))]
    for lib in data["libraries"] or []:
        where = "inside the prefix" if lib["inside_prefix"] else "OUTSIDE the prefix"
        links = f" via {', '.join(lib['links'])}" if lib["links"] else ""
        lines.append(f"  {lib['kind']:6} {lib['path']}{' (deleted)' if lib['deleted'] else ''}"
                     f"{' ' + lib['version'] if lib['version'] else ''}: {lib['layout']}, {where}{links}; "
                     f"device {lib['device']} inode {lib['inode']}" + (f" sha256 {lib['sha256']}" if lib["sha256"] else ""))
    if not data["libraries"]:
        lines.append("  no libMIOpen/libamdhip64/libcudnn loaded")
    return "\n".join(lines)


def apply(data: dict) -> str:
    p = data["plan"]
    if data.get("already_applied"):
        return f"already applied: {p['recipe']} ({p['version_after'] or '?'}) is in place in {p['prefix']}; nothing changed"
    lines = [f"applied {data['txn']}: {p['recipe']} {p['version_before'] or '?'} -> {p['version_after'] or '?'} "
             f"in {p['prefix']} ({p['layout']} layout)"]
    lines += [f"  {a['path']}" for a in p["actions"] if not a["done"]]
    lines += [f"  note: {n}" for n in p["notes"]]
    for pr in data.get("pruned") or []:
        lines.append(f"  pruned the backups of {pr['id']} ({pr['freed_bytes']} bytes)")
    verdict = data.get("verdict") or {}
    passed = [c["name"] for c in verdict.get("checks", []) if c.get("ok") and not c.get("skipped")]
    if passed:
        lines.append(f"verified: {', '.join(passed)}")
    lines.append("undo with: rocmbuild rollback" + (f" --env {p['prefix']}" if p["prefix"] else ""))
    return "\n".join(lines)


def rollback(data: dict[str, Any]) -> str:
    p = data["plan"]
    text = [f"rolled back {', '.join(data['undoes'])} as {data['txn']}: {p['version_before'] or '?'} -> "
            f"{p['version_after'] or '?'} in {p['prefix']}"]
    text += [f"  {a['path']}" for a in p["actions"] if not a["done"]]
    text += [f"  {n}" for n in data.get("forced_drift") or []]
    return "\n".join(text)


def recover(data: dict[str, Any]) -> str:
    if not data["recovered"]:
        return f"nothing to recover in {data['prefix']}"
    return "\n".join(f"recovered {r['verb']} {r['id']} (stopped at '{r['interrupted_at']}'): rolled back"
                     + ("" if r["restored"].get("ok") else " -- WARNING: the old state did not verify")
                     for r in data["recovered"])
