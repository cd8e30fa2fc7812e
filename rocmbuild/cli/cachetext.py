"""The human text of ``cache list``, ``cache dir``, ``cache rm`` and ``log``; render.py registers
each function for its result type (:data:`RENDERERS`).

Decision: ``cache list`` tells builds of one recipe apart by what differs between them (a
``build:`` line: store/differs.py); ``-v`` shows everything each was built with."""

from __future__ import annotations

from rocmbuild import ui
from rocmbuild.store import differs
from rocmbuild.cli import textlayout
from rocmbuild.cli.textlayout import Renderers
from rocmbuild.cli.fleettext import size
from rocmbuild.cli.statetext import origin_text
from rocmbuild.names import safe_lines, safe_text
from rocmbuild.results import CacheDirResult, CacheListResult, CacheRmResult, LogResult, short_txn


_USE_WORDS = {  # what each role of cache list's "used by" means, in words (swap/knowntargets.py)
    "in-effect": "applied by txn {} and in effect (what it loads now)",
    "rollback": "applied by txn {}, in effect under a newer apply (`rollback` returns to it)",
    "redo": "applied by txn {}, undone by a rollback; `rocmbuild redo` re-applies it",
    "recovery": "txn {} was interrupted; recovery needs it",
}


def _cache_list(r: CacheListResult) -> str:
    lines = []
    apart = differs.told_apart([(a.info.recipe, a.info.build) for a in r.artifacts], verbose=ui.verbosity() > 0)
    for a, built in zip(r.artifacts, apart, strict=True):
        i = a.info
        lines.append(f"{i.key[:16]} {i.kind:8} {i.recipe or '?'} {i.version or '?'} "
                     f"commit {(i.commit or '-')[:12]}  {size(i.size)}  last used {i.last_used or 'never'}")
        lines += [f"  build: {built}"] if built else []
        if i.substituted:
            lines.append(f"  {origin_text(i.substituted)}")
        lines += [f"  used by {u.prefix or u.state_dir}: {_USE_WORDS.get(u.role, u.role).format(short_txn(u.txn))}"
                  for u in a.used_by]
    gone = sum(not t.target.exists for t in r.targets)
    lines.append(f"{len(r.artifacts)} artifact(s), {size(r.total_bytes)} in {r.cache}; "
                 f"{len(r.targets)} known target(s)" + (f" ({gone} no longer there)" if gone else ""))
    lines += [f"  cannot read {p} (a journal of {t.target.prefix or t.target.state_dir})"
              for t in r.targets for p in t.unreadable]
    return textlayout.lines(lines)


def _cache_dir(r: CacheDirResult) -> str:
    return safe_text(r.cache)  # like `pip cache dir`: the path alone (the state dir: --json, docs/cache.md)


def _cache_rm(r: CacheRmResult) -> str:
    lines = [f"removed artifact {c.key[:16] if c.key else ''} {c.path} ({size(c.bytes)})" for c in r.removed]
    lines += [f"kept {k.path}: {k.reason}" for k in r.kept]
    return textlayout.lines(lines)


def _log(r: LogResult) -> str:
    if r.followed:
        return ""  # printed as it came
    if r.text is None:
        return textlayout.lines(r.logs)
    return safe_lines(r.text.rstrip("\n"))


RENDERERS: Renderers = ((CacheListResult, _cache_list), (CacheDirResult, _cache_dir), (CacheRmResult, _cache_rm), (LogResult, _log))
