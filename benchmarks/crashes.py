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
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
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

from benchmarks._common import (  # noqa: E402
    ROOT, build_library, make_env, make_monorepo, snapshot, write_fixture_recipe,
)

OLD, NEW = "3.5.0", "3.5.1"  # the env's stock libMIOpen, the artifact's
VERBS = ("apply", "rollback", "recover")
LAYOUTS = ("conda", "wheel")
TEMP_MARKS = (".rocmbuild-new-", ".rocmbuild-old-", ".part")
RUN_MARKER = "ROCMBUILD_CRASH_RUN"
# failpoints that leave an interrupted transaction for a recover run; the aimed ones have swapped
# paths, so the recovery has reverts to do (and passes the mid-rollback pausepoint)
PREP_POINTS = ("after-journal", "after-stage", "after-backup", "mid-swap", "after-swap", "after-verify",
               "after-commit")
PREP_AIMED = ("mid-swap", "after-swap", "after-verify")
# the aimed window of each verb: from the pausepoint line to the end of the window
WINDOWS = {"apply": ("after-backup", "after-swap"), "rollback": ("after-backup", "after-swap"),
           "recover": ("mid-rollback", None)}
CLEAN = ("ROCMBUILD_FAILPOINTS", "ROCMBUILD_PAUSEPOINTS", "ROCMBUILD_PAUSE_SECONDS", "CONDA_PREFIX", "VIRTUAL_ENV")
PRINT = threading.Lock()


class Broken(Exception):
    """The invariant does not hold; the message says how."""


# --------------------------------------------------------------------------------------------
# rocmbuild as a real process


class Started:
    """``python -m rocmbuild ARGS`` started in its own session; its output read as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.argv = [sys.executable, "-m", "rocmbuild", *map(str, args)]
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd=str(ROOT), start_new_session=True)
        self.out, self.err = b"", b""
        self.lines: list[tuple[float, str]] = []  # (seconds since start, stderr line)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.sel.register(self.proc.stderr, selectors.EVENT_READ)
        self.killed = False

    def pump(self, until: float, marker: str | None = None) -> float | None:
        """Read until the monotonic time ``until``, or the stderr line holding ``marker`` (returns
        when it came, monotonic), or both pipes closed (None)."""
        while True:
            if marker is not None:
                for t, line in self.lines:
                    if marker in line:
                        return self.t0 + t
            now = time.monotonic()
            if now >= until or not self.sel.get_map():
                return None
            for key, _ in self.sel.select(until - now):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    self.sel.unregister(key.fileobj)
                elif key.fileobj is self.proc.stdout:
                    self.out += chunk
                else:
                    self._stderr(chunk)

    def _stderr(self, chunk: bytes) -> None:
        at = time.monotonic() - self.t0
        done = self.err.count(b"\n")
        self.err += chunk
        for line in self.err.split(b"\n")[done:-1]:
            self.lines.append((at, line.decode(errors="replace")))

    def kill(self) -> bool:
        """SIGKILL the rocmbuild process (not its group). False when it had already exited."""
        if self.proc.poll() is not None:
            return False
        os.kill(self.proc.pid, signal.SIGKILL)
        self.killed = True
        return True

    def finish(self, timeout: float = 120) -> int:
        """Read to the end, wait; on a timeout kill the group and raise."""
        self.pump(time.monotonic() + timeout)
        try:
            return self.proc.wait(timeout=max(1.0, timeout / 4))
        except subprocess.TimeoutExpired:
            kill_group(self.proc.pid)
            self.proc.wait()
            raise Broken(f"`rocmbuild {' '.join(self.argv[3:5])}` did not end within {timeout:.0f} s") from None
        finally:
            self.sel.close()

    def seconds(self) -> float:
        return time.monotonic() - self.t0

    def tail(self, n: int = 6) -> str:
        return _tail(self.err.decode(errors="replace"), n)


# The checks and preparations (not the killed commands, not the timed runs) go through a fork
# server per lane: a `python -c` with this checkout on PYTHONPATH that has imported rocmbuild's CLI
# once and forks one child per command -- its own session, its own stdout/stderr files, the
# command's environment and argv, then `rocmbuild.cli.app.main` as `python -m rocmbuild` calls it.
# The child is a real process doing the command's whole work; only the interpreter start-up and
# the imports (about 0.75 s of CPU of a 1-2 s command here) are not repeated. `--plain` turns it off.
FORK_SERVER = r"""
import json, os, sys
import rocmbuild.cli.app
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            for fd, path in ((1, req["out"]), (2, req["err"])):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(f, fd)
                os.close(f)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            os.environ.clear()
            os.environ.update(req["env"])
            os.chdir(req["cwd"])
            sys.argv = ["rocmbuild", *req["args"]]
            code = rocmbuild.cli.app.main(req["args"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    sys.stdout.write(json.dumps({"pid": pid}) + "\n")
    sys.stdout.flush()
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
    sys.stdout.flush()
"""
LOCAL = threading.local()  # .server: this lane's ForkServer


class ForkServer:
    def __init__(self, env: dict[str, str], scratch: Path) -> None:
        self.scratch = scratch
        scratch.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-c", FORK_SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=str(ROOT), start_new_session=True,
                                     text=True)

    def _reply(self, timeout: float, child: int | None) -> dict:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                if child is not None:
                    kill_group(child)
                raise Broken(f"a command run by the fork server did not end within {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            raise Broken("the fork server died")
        return json.loads(line)

    def run(self, args: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of ``rocmbuild ARGS`` forked from the server."""
        out, err = self.scratch / "out", self.scratch / "err"
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"args": list(map(str, args)), "env": env, "cwd": str(ROOT),
                                          "out": str(out), "err": str(err)}) + "\n")
        self.proc.stdin.flush()
        pid = self._reply(30, None)["pid"]
        rc = self._reply(timeout, pid)["rc"]
        return rc, out.read_text(errors="replace"), err.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill_group(self.proc.pid)
            self.proc.wait()


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def rb(args: list[str], env: dict[str, str], timeout: float = 120) -> tuple[int, dict | None, str]:
    """Run to the end (through this lane's fork server, if it has one): (exit code, the --json
    object or None, stderr)."""
    server = getattr(LOCAL, "server", None)
    if server is not None:
        rc, text, err = server.run(args, env, timeout)
    else:
        s = Started(args, env)
        rc = s.finish(timeout)
        text, err = s.out.decode(errors="replace"), s.err.decode(errors="replace")
    try:
        data = json.loads(text) if text.strip() else None
    except ValueError:
        data = None
    return rc, data, err


def _tail(err: str, n: int = 6) -> str:
    return "\n      ".join(err.strip().splitlines()[-n:])


def must(args: list[str], env: dict[str, str], want: int = 0) -> dict:
    rc, data, err = rb([*args, "--json"], env)
    if rc != want:
        raise Broken(f"`rocmbuild {' '.join(map(str, args[:1]))}` exited {rc}, expected {want}:\n      {_tail(err)}")
    return data or {}


# --------------------------------------------------------------------------------------------
# processes left behind (read from /proc)


def _proc_ids(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, session) of a live process, None when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = text[text.rindex(")") + 2:].split()
    return f[0], int(f[2]), int(f[3])


def _carries(pid: int, tag: bytes) -> bool:
    try:
        return tag in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def left_of(pid: int, marker: str) -> list[int]:
    """Live processes in ``pid``'s process group or session, or carrying ``RUN_MARKER=marker``."""
    tag = f"{RUN_MARKER}={marker}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        ids = _proc_ids(int(d.name))
        if ids is None or ids[0] in "ZX":
            continue
        if pid in (ids[1], ids[2]) or _carries(int(d.name), tag):
            found.append(int(d.name))
    return found


def no_process_left(pid: int, marker: str, grace: float = 10.0) -> None:
    """The run's processes end within ``grace`` seconds (rocmbuild's supervisor needs its own grace
    to end a command: TERM, 3 s, KILL); those still there are named, then killed."""
    deadline = time.monotonic() + grace
    while (left := left_of(pid, marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        names = []
        for p in left:
            try:
                names.append(f"{p}: " + Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
            except OSError:
                names.append(str(p))
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        raise Broken(f"{len(left)} process(es) of the run still there {grace:.0f} s after the kill: "
                     + "; ".join(names))


# --------------------------------------------------------------------------------------------
# the world (built once) and the targets (one per lane and layout)


@dataclass
class World:
    base: Path
    recipe: Path
    stock: Path  # the lib dir of the stock libMIOpen 3.5.0 build
    env: dict[str, str]  # the environment of every rocmbuild process

    def run_env(self, marker: str, **extra: str) -> dict[str, str]:
        return dict(self.env, **{RUN_MARKER: marker}, **extra)


def build_world(base: Path) -> World:
    """The fixture monorepo, the ``mini`` recipe (3.5.1) built into a fresh ``ROCMBUILD_HOME`` by
    ``rocmbuild build``, and the stock 3.5.0 library the target envs start with."""
    repo = make_monorepo(base / "rocm-libraries")
    recipe = write_fixture_recipe(base / "recipes", "mini", url=repo.url, ref="rocm-7.1.0", jobs=2)
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env.update(ROCMBUILD_HOME=str(base / "home"), XDG_CONFIG_HOME=str(base / "xdg-config"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    world = World(base, Path(recipe), build_library(OLD, base / "stock"), env)
    must(["build", world.recipe], world.run_env("build"))
    return world


@dataclass
class Target:
    """One fake-torch env and its two states: ``old`` (stock) and ``new`` (``mini`` applied)."""
    world: World
    dir: Path
    layout: str
    prefix: Path = field(init=False)
    timed: tuple[Started, Started] | None = field(init=False)
    old: dict = field(init=False)
    new: dict = field(init=False)

    def __post_init__(self) -> None:
        self.timed = self.fresh(timed=self.layout == "conda")  # type: ignore[assignment]

    def fresh(self, timed: bool = False) -> tuple[Started, Started] | None:
        """A new env (after a break, the old one is set aside) and its old and new snapshots, taken
        around an apply and a rollback; ``timed``: those are real `python -m rocmbuild` runs with
        the marks of :func:`calibrate`, and are returned."""
        n = len(list(self.dir.glob(f"{self.layout}-*")))
        env = make_env(self.dir / f"{self.layout}-{n}", layout=self.layout, lib_dir=self.world.stock,
                       compile_version=NEW)
        self.prefix = Path(env.prefix)
        self.old = snapshot(self.prefix)
        marks = {"ROCMBUILD_PAUSEPOINTS": "after-backup,after-swap"}
        applied = _timed(self, "apply", marks) if timed else self.apply("setup")
        self.new = snapshot(self.prefix)
        if self.new == self.old:
            raise Broken(f"apply changed nothing in {self.prefix}")
        rolled = _timed(self, "rollback", marks) if timed else self.rollback("setup")
        if snapshot(self.prefix) != self.old:
            raise Broken(f"apply + rollback did not restore {self.prefix}")
        return (applied, rolled) if timed else None  # type: ignore[return-value]

    def args(self, verb: str) -> list[str]:
        return [verb, *([self.world.recipe] if verb == "apply" else []), "--env", self.prefix]

    def apply(self, marker: str, **extra: str) -> dict:
        return must(self.args("apply"), self.world.run_env(marker, **extra))

    def rollback(self, marker: str, **extra: str) -> dict:
        return must(self.args("rollback"), self.world.run_env(marker, **extra))

    def state(self) -> str:
        """"old" or "new"; Broken (saying which paths are which) when it is neither, or temps are left."""
        snap = snapshot(self.prefix)
        temps = sorted(k for k in snap if any(m in Path(k).name for m in TEMP_MARKS))
        if temps:
            raise Broken(f"temp files left: {', '.join(temps)}")
        if snap == self.old:
            return "old"
        if snap == self.new:
            return "new"
        which = []
        for k in sorted(set(self.old) | set(self.new) | set(snap)):
            if self.old.get(k) == self.new.get(k) == snap.get(k):
                continue
            now = snap.get(k)
            label = "old" if now == self.old.get(k) else "new" if now == self.new.get(k) else "neither"
            which.append(f"{k} is {label}" + (" (absent)" if now is None else ""))
        raise Broken("wholly neither old nor new: " + "; ".join(which))

    def status_agrees(self, state: str, marker: str) -> None:
        """`status --json` says the same as the bytes: nothing pending, the loaded and in-effect version."""
        s = must(["status", "--env", self.prefix], self.world.run_env(marker))
        ch, want = s.get("changes", {}), (NEW if state == "new" else OLD)
        wrong = [f"{k}: {ch[k]}" for k in ("unfinished", "unreadable", "drift") if ch.get(k)]
        loaded = (s.get("torch") or {}).get("runtime_version")
        if loaded != want:
            wrong.append(f"torch loads {loaded}")
        wrong += [f"library {lib.get('path')} is {lib.get('version')}" for lib in s.get("libraries", [])
                  if lib.get("version") != want]
        in_effect = ch.get("in_effect") or []
        effect = in_effect[-1].get("version_after") if in_effect else OLD
        if effect != want:
            wrong.append(f"the version in effect is {effect} ({in_effect[-1].get('verb')} "
                         f"{in_effect[-1].get('id')})")
        if wrong:
            raise Broken(f"the bytes are {state} ({want}) but status says: " + "; ".join(wrong))


# --------------------------------------------------------------------------------------------
# timing: a first, timed run of each verb


@dataclass
class Timing:
    total: dict[str, float]  # verb -> seconds from start to exit
    window: dict[str, float]  # verb -> seconds from its window's pausepoint line to the window's end


def _line_at(s: Started, text: str) -> tuple[int, float]:
    for i, (t, line) in enumerate(s.lines):
        if text in line:
            return i, t
    raise Broken(f"the timed run of `rocmbuild {s.argv[3]}` never printed {text!r}:\n      {s.tail()}")


def _timed(t: Target, verb: str, extra: dict[str, str], *flags: str) -> Started:
    s = Started([*t.args(verb), *flags], t.world.run_env("timing", ROCMBUILD_PAUSE_SECONDS="0", **extra))
    rc = s.finish()
    if rc != 0:
        raise Broken(f"the timed run of `rocmbuild {verb}` exited {rc}:\n      {s.tail()}")
    s.total = s.seconds()  # type: ignore[attr-defined]
    return s


def calibrate(t: Target) -> Timing:
    """The apply and rollback of the target's set-up (with the pausepoints after-backup and after-swap
    as zero-second marks), and a recover of an apply interrupted after the swap (from the
    mid-rollback mark to the next line: `-v`'s "running: ... _probe.py" of the re-verification,
    which comes after the last revert)."""
    total, window = {}, {}
    for verb, s in zip(("apply", "rollback"), t.timed or (), strict=False):
        total[verb] = s.total  # type: ignore[attr-defined]
        window[verb] = _line_at(s, "pausepoint after-swap")[1] - _line_at(s, "pausepoint after-backup")[1]
    must(t.args("apply"), t.world.run_env("timing", ROCMBUILD_FAILPOINTS="after-swap"), want=137)
    s = _timed(t, "recover", {"ROCMBUILD_PAUSEPOINTS": "mid-rollback"}, "-v")
    total["recover"] = s.total  # type: ignore[attr-defined]
    i, at = _line_at(s, "pausepoint mid-rollback")
    window["recover"] = (s.lines[i + 1][0] - at) if i + 1 < len(s.lines) else 0.02
    if t.state() != "old":
        raise Broken("the timed runs did not end in the old state")
    return Timing(total, {k: max(v, 0.001) for k, v in window.items()})


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
