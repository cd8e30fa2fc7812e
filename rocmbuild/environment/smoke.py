"""Judging the smoke suite the probe ran (``_probe.py --smoke``): one check per suite check.

Decisions: the BatchNorm2d check keeps the name ``smoke`` (the check recipes' ``[verify] smoke =
"batchnorm"`` named first); every other one is ``smoke: NAME``. A report without a suite (an older
probe, or none run) gives one ``smoke`` check saying why. A check the torch cannot run (the probe's
``cannot_run``: an API it lacks) is skipped, like one without a GPU, and says so: a stand-in or
broken torch is not the library's fault.
"""

from __future__ import annotations

from rocmbuild.environment.probe import ProbeReport, SmokeCheck, SmokeResult
from rocmbuild.results.verdict import Check


def check_smoke(report: ProbeReport) -> list[Check]:
    """7. each check of the smoke suite passed; skipped (no GPU) is not a failure but is never
    reported as passed. The BatchNorm2d check keeps the name ``smoke``; the others are ``smoke: NAME``."""
    suite = report.smoke or SmokeResult("")
    items = suite.checks or (SmokeCheck("batchnorm", suite.status, suite.reason),)  # no suite ran: one check saying why
    return [_smoke_check(c, suite) for c in items]


def _smoke_check(c: SmokeCheck, suite: SmokeResult) -> Check:
    name = "smoke" if c.name == "batchnorm" else f"smoke: {c.name}"
    status, reason = c.status, c.reason
    expected = SMOKE_EXPECTED.get(c.name, "passes")
    where = f" on {suite.device}" if suite.device else ""
    if status == "passed":
        node = suite.node if c.name == "batchnorm" and not reason else None
        return Check(name, True, expected, f"passed{where}" + (f" (node {node})" if node else "")
                     + (f": {reason}" if reason else ""))
    if status == "skipped" and c.cannot_run:
        return Check(name, True, expected, f"skipped: {reason}", CANNOT_RUN, skipped=True)
    if status == "skipped":
        return Check(name, True, expected, f"skipped: {reason or 'no GPU'}",
                     "not run: the smoke suite needs a GPU (or ROCMBUILD_SMOKE_DEVICE=cpu); nothing was proven by it",
                     skipped=True)
    return Check(name, False, expected, f"{status or 'not run'}{where}: {reason or 'the probe returned no smoke result'}",
                 "the library loads but computes wrong results or crashes on this device")


CANNOT_RUN = ("not run: this torch lacks what the check calls (the `rocmbuild demo` stand-in torch is not PyTorch); "
              "nothing was proven by it, and nothing is said against the library")

SMOKE_EXPECTED = {
    "install": "torch imports and cudnn.version() returns an integer",
    "device": "device properties (name, memory, multiprocessors, architecture)",
    "matmul": "1000x1000 matmul on the device matches the CPU",
    "mlp": "Linear-ReLU-Linear forward matches the CPU",
    "memory": "5 allocations then empty_cache return to the baseline",
    "batchnorm": "BatchNorm2d fwd+bwd on GPU matches CPU",
    "training": "3 training steps of Conv-BatchNorm-SiLU match the CPU",
}
