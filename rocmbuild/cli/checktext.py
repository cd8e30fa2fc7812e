"""The human text of ``build --check``; render.py registers it for its result type (:data:`RENDERERS`)."""

from __future__ import annotations

from rocmbuild.builder.rebuild import Difference
from rocmbuild.cli import textlayout
from rocmbuild.cli.textlayout import Renderers
from rocmbuild.results import CheckResult


def _side(e) -> str:
    if e is None:
        return "absent"
    return f"link -> {e.target}" if e.type == "link" else f"sha256 {e.sha256}, {e.size} bytes"


def _difference(d: Difference) -> list[str]:
    return [f"  {d.path}", f"    cached:  {_side(d.cached)}", f"    rebuilt: {_side(d.rebuilt)}"]


def check(r: CheckResult) -> str:
    verdict = (f"the rebuild is identical to the cached artifact ({r.compared} files)" if r.identical
               else f"{len(r.differences)} of {r.compared} files differ from the cached artifact")
    out = [f"{r.recipe} ({textlayout.short(r.key)}): {verdict}"]
    for d in r.differences:
        out += _difference(d)
    out += [f"artifact: {r.artifact}", f"log: {r.log}"]
    return textlayout.lines(out)  # the files' sha256 in full (the key: 16 digits)


RENDERERS: Renderers = ((CheckResult, check),)
