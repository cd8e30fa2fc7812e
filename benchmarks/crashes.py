#!/usr/bin/env python3
"""Crash campaign: SIGKILL `rocmbuild apply`, `rollback` and `recover` at random moments, recover,
and check that the target is wholly its old or wholly its new state, byte for byte.

    python benchmarks/crashes.py --runs N [--seed S] [--jobs J] [--only K ...] [--keep-dir]

Each run is one real ``python -m rocmbuild VERB`` process (this checkout on ``PYTHONPATH``, its own
session), SIGKILLed -- the process itself, not its group: its supervisor and probe must go by
themselves -- then ``rocmbuild recover``, then the invariant (docs/testing.md, "Crash campaign"):

* every file under the target's ``lib`` and ``share`` dirs (sha256, mode) and every link text is
  wholly the old snapshot or wholly the new one (both taken before the campaign);
* ``rocmbuild status --json`` agrees: nothing unfinished, unreadable or drifted, and the version
  torch loads and the version in effect are the old or the new one, as the bytes are;
* no temp name (``.rocmbuild-new-``, ``.rocmbuild-old-``, ``.part``) is left there, and no process
  of the run is left (its process group and session are empty, and no live process carries the
  run's marker in its environment);
* a recovery that rolled a transaction back left the state before it;
* a following ``apply`` then ``rollback`` both exit 0 and end in the new, then the old state (this
  is also how a target is restored between runs: through rocmbuild itself).

Where the kill lands: runs cycle through apply, rollback, recover; every other cycle is *aimed*.
An aimed apply or rollback runs with ``ROCMBUILD_PAUSEPOINTS=after-backup`` and
``ROCMBUILD_PAUSE_SECONDS=0``: a pause of zero seconds, so nothing waits, only the line
``rocmbuild: pausepoint after-backup`` marks the instant before the first rename; the campaign
kills a random delay after that line, uniform in [0, W], W the time from that line to the
``after-swap`` one measured in a first, timed run. An aimed recover does the same from the
``mid-rollback`` line (after the first revert of several) over the rest of the reverts. A random
kill is uniform over the whole duration of the verb measured in the timed run. A recover run first
leaves an interrupted apply or rollback behind with a failpoint (``ROCMBUILD_FAILPOINTS``).

The killed commands and the timed runs are ``python -m rocmbuild`` processes; the preparations and
the checks are forked from a per-lane fork server that has imported the CLI once (``FORK_SERVER``;
``--plain`` turns it off), which more than halves the campaign's CPU time.

Every decision of run K comes from ``random.Random(f"{seed}/{K}")``, so ``--seed S --only K``
repeats run K's choices (the timing of a real process is never exactly repeatable). ``--jobs``
runs that many lanes at once, each with its own target envs (conda and wheel layouts) and the
one shared artifact cache, which is built once from the fixture project (tests/support).
Output: one line per run, then ``tried N, broken B`` and each break; exit 1 if any break.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._crash_procs import LOCAL, Broken, ForkServer, Started, must, no_process_left  # noqa: E402
from benchmarks._crash_world import LAYOUTS, Target, Timing, World, build_world, calibrate  # noqa: E402

VERBS = ("apply", "rollback", "recover")
# failpoints that leave an interrupted transaction for a recover run; the aimed ones have swapped
# paths, so the recovery has reverts to do (and passes the mid-rollback pausepoint)
PREP_POINTS = ("after-journal", "after-stage", "after-backup", "mid-swap", "after-swap", "after-verify",
               "after-commit")
PREP_AIMED = ("mid-swap", "after-swap", "after-verify")
# the aimed window of each verb: from the pausepoint line to the end of the window
WINDOWS = {"apply": ("after-backup", "after-swap"), "rollback": ("after-backup", "after-swap"),
           "recover": ("mid-rollback", None)}
PRINT = threading.Lock()


# --------------------------------------------------------------------------------------------
# one run


@dataclass(frozen=True)
class Choice:
    run: int
    verb: str
    aimed: bool
    layout: str
    frac: float  # where in the window (aimed) or the whole run (random) the kill lands, 0..1
    prep: tuple[str, str] | None  # recover runs: (the verb left interrupted, at which failpoint)

    def describe(self) -> str:
        how = "aimed " if self.aimed else "random"
        prep = f" of {self.prep[0]}@{self.prep[1]}" if self.prep else ""
        return f"{self.layout:5} {self.verb}{prep} {how}".rstrip()


def choose(seed: int, run: int) -> Choice:
    """Run ``run``'s decisions, from its own generator: the verb and aimed/random cycle (apply,
    rollback, recover; aimed, then random), the rest at random."""
    rng = random.Random(f"{seed}/{run}")
    verb, aimed = VERBS[(run - 1) % 3], ((run - 1) // 3) % 2 == 0
    layout, frac = rng.choice(LAYOUTS), rng.random()
    prep = (rng.choice(("apply", "rollback")), rng.choice(PREP_AIMED if aimed else PREP_POINTS)) \
        if verb == "recover" else None
    return Choice(run, verb, aimed, layout, frac, prep)


@dataclass
class Result:
    choice: Choice
    lane: int
    landed: str = ""
    story: str = ""
    problem: str | None = None
    seconds: float = 0.0
    phases: list[tuple[str, float]] = field(default_factory=list)

    def phase(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.phases.append((name, now - since))
        return now


def _other(state: str) -> str:
    return "new" if state == "old" else "old"


def _prepare(c: Choice, t: Target, marker: str) -> tuple[str, str]:
    """Bring the target to where run ``c`` starts: (its state now, the state a recovery must give)."""
    start = "old"
    if c.verb == "rollback" or (c.prep and c.prep[0] == "rollback"):
        t.apply(marker)
        start = "new"
    if c.prep is None:
        return start, start
    verb, point = c.prep
    must(t.args(verb), t.world.run_env(marker, ROCMBUILD_FAILPOINTS=point), want=137)
    return start, (_other(start) if point == "after-commit" else start)  # committed: the recovery keeps it


def _kill(c: Choice, t: Target, timing: Timing, marker: str) -> tuple[Started, str]:
    """Start the verb and SIGKILL it at the chosen moment: (the run, what happened)."""
    extra = {}
    if c.aimed:
        extra = {"ROCMBUILD_PAUSEPOINTS": WINDOWS[c.verb][0], "ROCMBUILD_PAUSE_SECONDS": "0"}
    s = Started(t.args(c.verb), t.world.run_env(marker, **extra))
    if c.aimed:
        mark = s.pump(s.t0 + 120, marker=f"pausepoint {WINDOWS[c.verb][0]}")
        if mark is None:
            s.finish()
            return s, f"ended (exit {s.proc.returncode}) before the {WINDOWS[c.verb][0]} mark"
        when, what = mark + c.frac * timing.window[c.verb], f"after {WINDOWS[c.verb][0]}"
    else:
        mark, when, what = s.t0, s.t0 + c.frac * timing.total[c.verb], "after the start"
    s.pump(when)
    at = time.monotonic()
    killed = s.kill()
    s.finish()
    if not killed:
        return s, f"ended (exit {s.proc.returncode}) before the kill"
    return s, f"killed {(at - mark) * 1000:.0f} ms {what}"


def one_run(c: Choice, t: Target, timing: Timing, lane: int) -> Result:
    r = Result(c, lane)
    t0 = time.monotonic()
    marker = uuid.uuid4().hex
    try:
        start, must_be = _prepare(c, t, marker)
        at = r.phase("prepare", t0)
        s, r.story = _kill(c, t, timing, marker)
        if not s.killed and s.proc.returncode != 0:
            raise Broken(f"`rocmbuild {c.verb}` exited {s.proc.returncode} without being killed:\n      {s.tail()}")
        at = r.phase("kill", at)
        no_process_left(s.proc.pid, marker)
        at = r.phase("reaped", at)
        rec = must(["recover", "--env", t.prefix], t.world.run_env(marker)).get("recovered") or []
        at = r.phase("recover", at)
        r.landed = ", ".join(f"{x['verb']}@{x['interrupted_at']}" for x in rec) or "nothing to recover"
        r.story += f" -> {r.landed}"
        state = t.state()
        r.story += f" -> {state}"
        if c.verb == "recover" and state != must_be:
            raise Broken(f"recovery left the {state} state; the interrupted {c.prep[0]} should have "  # type: ignore[index]
                         f"left the {must_be} one")
        if c.verb != "recover" and any(x["verb"] == c.verb for x in rec) and state != start:
            raise Broken(f"recovery rolled the {c.verb} back but left the {state} state, not the {start} one")
        t.status_agrees(state, marker)
        at = r.phase("status", at)
        t.apply(marker)
        if (after := t.state()) != "new":
            raise Broken(f"the following apply left the {after} state")
        t.rollback(marker)
        if (after := t.state()) != "old":
            raise Broken(f"the following rollback left the {after} state")
        r.phase("apply+rollback", at)
    except Broken as exc:
        r.problem = str(exc)
    except Exception as exc:  # noqa: BLE001 -- a long campaign goes on; the run counts as broken, with its seed
        r.problem = f"unexpected {type(exc).__name__}: {exc}"
    r.seconds = time.monotonic() - t0
    return r


# --------------------------------------------------------------------------------------------
# lanes and the campaign


def say(text: str) -> None:
    with PRINT:
        print(text, flush=True)


def lane(world: World, i: int, runs: list[int], seed: int, total: int, verbose: bool, plain: bool) -> list[Result]:
    """One lane: its own targets (one per layout), its own timed runs, then its share of the runs.
    A run that breaks gets the target replaced by a fresh env, so one break does not cascade."""
    d = world.base / f"lane-{i}"
    if not plain:
        LOCAL.server = ForkServer(world.env, d / "fork-server")
    try:
        return _lane(world, i, d, runs, seed, total, verbose)
    finally:
        if not plain:
            LOCAL.server.close()
            LOCAL.server = None


def _lane(world: World, i: int, d: Path, runs: list[int], seed: int, total: int, verbose: bool) -> list[Result]:
    targets = {layout: Target(world, d, layout) for layout in LAYOUTS}
    timing = calibrate(targets["conda"])
    say(f"lane {i}: timed runs: " + ", ".join(
        f"{v} {timing.total[v]:.2f} s (window {timing.window[v] * 1000:.1f} ms)" for v in VERBS))
    results = []
    for run in runs:
        c = choose(seed, run)
        r = one_run(c, targets[c.layout], timing, i)
        results.append(r)
        head = f"run {run:>3}/{total} lane {i} {c.describe():32}"
        if verbose:
            head = f"{head} [{', '.join(f'{n} {s:.1f}' for n, s in r.phases)}]"
        if r.problem is None:
            say(f"{head} {r.story}: ok ({r.seconds:.1f} s)")
        else:
            say(f"{head} {r.story}: BROKEN: {r.problem}")
            targets[c.layout].fresh()
    return results


def report(results: list[Result], seed: int, jobs: int, seconds: float) -> int:
    broken = [r for r in results if r.problem is not None]
    killed = Counter(r.landed for r in results if r.landed and "killed" in r.story)
    print()
    print("where the kills landed (what the next recover found): "
          + ", ".join(f"{k} {n}" for k, n in sorted(killed.items(), key=lambda kv: -kv[1])))
    print(f"tried {len(results)}, broken {len(broken)} (seed {seed}, {jobs} lane(s), {seconds:.0f} s)")
    for r in broken:
        print(f"  run {r.choice.run} (seed {seed}; again: python benchmarks/crashes.py --seed {seed} "
              f"--only {r.choice.run}): {r.choice.describe()}, {r.story}: {r.problem}")
    return 1 if broken else 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="how many runs (default 30)")
    ap.add_argument("--seed", type=int, default=None, help="the campaign's seed (default: a random one, printed)")
    ap.add_argument("--jobs", type=int, default=2, help="lanes run at once, each with its own targets (default 2)")
    ap.add_argument("--only", type=int, action="append", default=[], metavar="K",
                    help="run only run K of this seed (repeatable): to repeat a break")
    ap.add_argument("--dir", type=Path, default=None, help="where to work (default: a temp dir)")
    ap.add_argument("--plain", action="store_true",
                    help="run every command as `python -m rocmbuild` (no fork server for the checks): slower")
    ap.add_argument("-v", "--verbose", action="store_true", help="say how long each phase of a run took")
    ap.add_argument("--keep-dir", action="store_true", help="keep the work dir (the targets, ROCMBUILD_HOME)")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.jobs < 1:
        ap.error("--runs and --jobs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    runs = sorted(set(args.only)) or list(range(1, args.runs + 1))
    jobs = min(args.jobs, len(runs))
    base = Path(tempfile.mkdtemp(prefix="rocmbuild-crashes-", dir=args.dir))
    started = time.monotonic()
    print(f"crash campaign: seed {seed}, {len(runs)} run(s), {jobs} lane(s), working in {base}", flush=True)
    try:
        world = build_world(base)
        print(f"world built in {time.monotonic() - started:.1f} s", flush=True)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(lane, world, i, runs[i::jobs], seed, max(runs), args.verbose, args.plain) for i in range(jobs)]
            results = [r for f in futures for r in f.result()]
    except Broken as exc:  # the world or a lane's set-up failed: no campaign to speak of
        print(f"cannot run the campaign: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep_dir:
            shutil.rmtree(base, ignore_errors=True)
    results.sort(key=lambda r: r.choice.run)
    return report(results, seed, jobs, time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
