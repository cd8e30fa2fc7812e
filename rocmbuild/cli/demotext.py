"""The text of ``rocmbuild demo`` (registered by render.py): its steps, the verdict, and, for a
kept scratch dir (``--keep-dir DIR``), the commands that go on there with the demo's own cache
home (its state, artifacts and the recipe live in DIR, not in the user's cache)."""

from __future__ import annotations

import shlex

from rocmbuild.cli import textlayout
from rocmbuild.cli.textlayout import Renderers
from rocmbuild.results import DemoResult


def _demo(r: DemoResult) -> str:
    lines = [f"  {'ok  ' if s.ok else 'FAIL'} {s.name:20} exit {s.exit_code:<3} {s.seconds:5.1f} s  "
             f"{''.join(f'{k}={v} ' for k, v in s.env)}{' '.join(s.command)}"
             for s in r.steps]
    where = f"kept in {r.scratch}" if r.kept else f"{r.scratch} removed"
    verdict = "demo passed" if r.error is None else f"demo FAILED at {r.failed.name if r.failed else '?'}"
    return textlayout.lines(["demo steps:", *lines, f"{verdict} in {r.seconds:.1f} s; {where}", *next_commands(r)])


def next_commands(r: DemoResult) -> list[str]:
    """How to go on in a kept scratch dir: its cache home, then what to try."""
    if not r.kept:
        return []
    d = shlex.quote(r.scratch)
    return ["to go on there (the demo's own cache home, not yours):",
            f"  cd {d} && export ROCMBUILD_HOME={shlex.quote(r.scratch + '/home')}",
            "  rocmbuild status --env env          # what torch loads, what is in effect",
            "  rocmbuild apply miopen-demo.toml --env env && rocmbuild history --env env",
            "  rocmbuild rollback --env env        # and `rocmbuild redo --env env`"]


RENDERERS: Renderers = [(DemoResult, _demo)]
