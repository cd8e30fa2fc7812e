"""What tells two builds of one recipe apart, read from each artifact's manifest (its ``inputs``,
the very data its cache key hashes).

Decisions:
* The facts of a build (:func:`facts`): each CMake define (``-DNAME=VALUE``; ``GPU_TARGETS`` is
  one), the build type, each ``[build] env`` variable, the patches (name and the first 8 hex of
  their sha256: a patch edited under the same name differs), cherry-picks, the tarball's sha256,
  the install prefix and the tools' ``--version`` lines. The commit is shown beside the recipe
  already, so it is not a fact here.
* In a list (``cache list``, ``history``, ``status``) a build is told apart by the facts that
  are not the same for every build of its recipe in that list (:func:`differing`): a fact one
  build has and another lacks reads ``-DNAME unset``. ``-v`` shows every fact.
* A manifest without ``inputs`` (an old or unreadable one) has no facts: nothing is claimed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

UNSET = None


def _value(v: Any) -> str:
    return ";".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def facts(inputs: Mapping[str, Any] | None) -> dict[str, str]:
    """label -> value of one build's inputs (module notes), in a stable order."""
    if not isinstance(inputs, Mapping):
        return {}
    out: dict[str, str] = {}
    for pair in inputs.get("defines") or ():
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            out[f"-D{pair[0]}"] = _value(pair[1])
    if inputs.get("build_type"):
        out["build type"] = str(inputs["build_type"])
    for pair in inputs.get("env") or ():
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            out[f"env {pair[0]}"] = str(pair[1])
    patches = [f"{p.get('name')}@{str(p.get('sha256'))[:8]}" for p in inputs.get("patches") or () if isinstance(p, dict)]
    if patches:
        out["patches"] = ", ".join(patches)
    if inputs.get("cherry_pick"):
        out["cherry-pick"] = ", ".join(str(c)[:12] for c in inputs["cherry_pick"])
    if inputs.get("tarball_sha256"):
        out["tarball"] = str(inputs["tarball_sha256"])[:16]
    if inputs.get("install_prefix"):
        out["install prefix"] = str(inputs["install_prefix"])
    raw = inputs.get("tools")
    tools: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    for name in ("cmake", "cc", "cxx"):
        if tools.get(name):
            out[name.replace("cxx", "c++")] = str(tools[name])
    return out


def differing(group: Sequence[Mapping[str, str]]) -> list[dict[str, str | None]]:
    """For each build of one recipe (its facts), the facts that are not the same in all of them
    (None: this build lacks a fact another has)."""
    labels = list(dict.fromkeys(k for f in group for k in f))
    varied = [k for k in labels if len({f.get(k) for f in group}) > 1]
    return [{k: f.get(k) for k in varied} for f in group]


def short(f: Mapping[str, str | None]) -> str:
    """One line: ``-DMIOPEN_USE_COMPOSABLEKERNEL=OFF, build type Debug, patches fix.patch@1a2b3c4d``."""
    out = []
    for k, v in f.items():
        if v is UNSET:
            out.append(f"{k} unset")
        elif k.startswith("-D") or k.startswith("env "):
            out.append(f"{k.removeprefix('env ')}={v}")
        else:
            out.append(f"{k} {v}")
    return ", ".join(out)


def told_apart(items: Sequence[tuple[str | None, Mapping[str, str]]], *, verbose: bool = False) -> list[str]:
    """For (recipe, facts) in a list: the short text that tells each apart from the other builds of
    its recipe there ("" when nothing does, or it is the only one); ``verbose``: every fact."""
    if verbose:
        return [short(f) for _, f in items]
    out = [""] * len(items)
    by_recipe: dict[str | None, list[int]] = {}
    for i, (recipe, f) in enumerate(items):
        if f:
            by_recipe.setdefault(recipe, []).append(i)
    for idx in by_recipe.values():
        if len(idx) > 1:
            for i, d in zip(idx, differing([items[i][1] for i in idx]), strict=True):
                out[i] = short(d)
    return out


def of_artifact(path: str | Path | None) -> dict[str, str]:
    """The facts of the artifact at ``path`` (its manifest); {} when it is gone or unreadable."""
    from rocmbuild.store.manifest import MANIFEST, read_manifest
    from rocmbuild.errors import RocmbuildError

    if not path:
        return {}
    try:
        return facts(read_manifest(Path(path) / MANIFEST).inputs)
    except (OSError, RocmbuildError):
        return {}


def cached(home: Path, recipe: str) -> list[tuple[str, dict[str, str]]]:
    """(key, facts) of every artifact of ``recipe`` in the cache at ``home`` (manifests only)."""
    from rocmbuild.store.cache import entries
    from rocmbuild.store.manifest import MANIFEST, read_manifest
    from rocmbuild.errors import RocmbuildError

    out = []
    for p in entries(home):
        try:
            m = read_manifest(p / MANIFEST)
        except (OSError, RocmbuildError):
            continue
        if m.recipe == recipe:
            out.append((p.name, facts(m.inputs)))
    return out


def of_key(home: Path, key: object) -> dict[str, str]:
    """The facts of the cached artifact ``key`` (built, else imported); {} when it is not a key
    (a history line is read from a file others may write) or not in the cache. Read only."""
    import re

    from rocmbuild.store.cache import imported_dir
    from rocmbuild.home import artifacts_dir

    if not isinstance(key, str) or not re.fullmatch(r"[0-9a-f]{64}", key):
        return {}
    return of_artifact(artifacts_dir(home) / key) or of_artifact(imported_dir(home) / key)
