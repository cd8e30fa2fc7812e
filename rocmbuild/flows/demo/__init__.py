"""``rocmbuild demo``: the whole job on any machine, no ROCm and no GPU.

It builds the miniature MIOpen shipped in this package (data/miopen, recipe data/miopen-demo.toml)
into a scratch env whose ``torch`` is a clearly labelled stand-in loading its library the way
PyTorch does (scratch.py), then runs the real workflow as real processes, each printed as a user
would see it (steps.py): doctor, plan, apply, status, a rollback killed mid-swap by a failpoint
(``os._exit(137)``, as a SIGKILL), status, recover, rollback; and checks after each what must
hold: loaded versions, nothing changed by the read-only verbs, the applied state back after the
recovery and the stock env byte-identical at the end.

Decisions:
* The crash is a *rollback* killed mid-swap, so the order is the one users meet (apply first,
  then the accident): recovery must bring back the applied state exactly, and the final rollback
  the stock one.
* Everything lives in one scratch dir with its own ``ROCMBUILD_HOME``, removed at the end, also
  on Ctrl-C; with ``--keep-dir DIR`` nothing is removed and the result says where it is. A failed
  check keeps the dir too (the error names it), for the logs. Missing tools fail before
  anything is made.
"""

from __future__ import annotations

import shutil
import time

from rocmbuild import doctor, recipe, ui
from rocmbuild.proc import stop
from rocmbuild.errors import EXIT_INPUT, EXIT_OK
from rocmbuild.flows.demo import scratch
from rocmbuild.flows.demo.demostep import differs, run_step, same_as, snapshot, version_check
from rocmbuild.results import DemoCheck, DemoResult, DemoStep

RECIPE = scratch.RECIPE
NEW_VERSION = "3.5.1"


def demo(keep: str | None = None) -> DemoResult:
    scratch.check_tools()
    s = scratch.make_root(keep)
    start = time.monotonic()
    steps: list[DemoStep] = []
    failed = True
    try:
        ui.info(f"rocmbuild demo in {s.root} (ROCMBUILD_HOME={s.home}); every command below runs from there")
        scratch.prepare(s)
        _workflow(s, steps)
        failed = any(not st.ok for st in steps)
    except stop.Stop:
        failed = False  # interrupted: not a failure to keep for a report
        raise
    finally:
        if not s.kept and not failed:
            shutil.rmtree(s.root, ignore_errors=True)
    return DemoResult(tuple(steps), str(s.root), s.kept or failed, time.monotonic() - start)


def _workflow(s: scratch.Scratch, steps: list[DemoStep]) -> None:
    """The steps in order; the first that fails ends the demo (later ones would judge a wrong state)."""
    env, py, lib = s.env, s.python, s.library()
    stock = snapshot(env)
    doctor_code, doctor_checks = _doctor_expectation(s)
    applied: dict = {}
    crashed: dict = {}

    def after_apply():
        applied.update(snapshot(env))
        return [version_check(py, NEW_VERSION), differs(lib, stock, env, "torch/lib/libMIOpen.so is the new build")]

    def after_crash():
        crashed.update(snapshot(env))
        half = crashed != applied and crashed != stock
        return [DemoCheck("the kill left the env half rolled back (what recovery is for)", half,
                          "neither the applied nor the stock state" if half else "the env is in a whole state")]

    plan = [
        ("doctor", ["doctor", RECIPE, "--env", "env"], doctor_code, None,
         lambda: [*doctor_checks, version_check(py, scratch.STOCK_VERSION)]),
        ("plan", ["plan", RECIPE], 0, None, lambda: [same_as(env, stock, "plan changed nothing in the env")]),
        ("apply", ["apply", RECIPE, "--env", "env"], 0, None, after_apply),
        ("status", ["status", "--env", "env"], 0, None, lambda: [same_as(env, applied, "status changed nothing")]),
        ("crash", ["rollback", "--env", "env"], 137, {"ROCMBUILD_FAILPOINTS": "mid-swap"}, after_crash),
        ("status-after-crash", ["status", "--env", "env"], 0, None,
         lambda: [same_as(env, crashed, "status changed nothing (it only reports the unfinished rollback)")]),
        ("recover", ["recover", "--env", "env"], 0, None,
         lambda: [same_as(env, applied, "recover restored the applied env byte for byte"),
                  version_check(py, NEW_VERSION)]),
        ("rollback", ["rollback", "--env", "env"], 0, None,
         lambda: [same_as(env, stock, "rollback restored the stock env byte for byte"),
                  version_check(py, scratch.STOCK_VERSION)]),
    ]
    for name, args, expect, extra, checks in plan:
        step = run_step(name, args, s.root, expect=expect, extra=extra, checks=checks)
        steps.append(step)
        if not step.ok:
            return


def _doctor_expectation(s: scratch.Scratch) -> tuple[int, list[DemoCheck]]:
    """The exit code ``doctor`` must give here: 0, or 2 when ROCm (which the demo does not need)
    is missing; any other failed check is a failure of the demo."""
    bad = doctor.failed(doctor.run(recipe.load(str(s.root / RECIPE)), str(s.env), timeout=60))
    others = [c.name for c in bad if not c.name.startswith("ROCm")]
    rocm = [c.name for c in bad if c.name.startswith("ROCm")]
    detail = f"failed: {', '.join(others)}" if others else (
        f"only {', '.join(rocm)} failed: this machine has no ROCm, and the demo needs none" if rocm else "all passed")
    return (EXIT_INPUT if bad else EXIT_OK), [DemoCheck("doctor finds nothing missing that the demo needs",
                                                       not others, detail)]
