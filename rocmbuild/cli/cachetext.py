"""The human text of ``cache dir``, ``cache rm`` and ``log``; render.py registers each function
for its result type (:data:`RENDERERS`)."""

from __future__ import annotations

from rocmbuild.cli import layout
from rocmbuild.cli.fleettext import size
from rocmbuild.names import safe_lines, safe_text
from rocmbuild.results import CacheDirResult, CacheRmResult, LogResult


def _cache_dir(r: CacheDirResult) -> str:
    return safe_text(r.cache)  # like `pip cache dir`: the path alone (the state dir: --json, docs/cache.md)


def _cache_rm(r: CacheRmResult) -> str:
    lines = [f"removed artifact {c.key[:16] if c.key else ''} {c.path} ({size(c.bytes)})" for c in r.removed]
    lines += [f"kept {k.path}: {k.reason}" for k in r.kept]
    return layout.lines(lines)


def _log(r: LogResult) -> str:
    if r.followed:
        return ""  # printed as it came
    if r.text is None:
        return layout.lines(r.logs)
    return safe_lines(r.text.rstrip("\n"))


RENDERERS = ((CacheDirResult, _cache_dir), (CacheRmResult, _cache_rm), (LogResult, _log))
