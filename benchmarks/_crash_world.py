"""The crash campaign's world (built once) and targets (one per lane and layout), and the timed
first runs that say where a kill can land. Used by ``benchmarks/crashes.py`` only.

Decision: a target's ``old`` and ``new`` states are snapshots taken around a real apply and
rollback through rocmbuild itself (not hand-made copies), so "wholly old or wholly new" is
measured against what rocmbuild really writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks._common import ROOT, build_library, make_env, make_monorepo, snapshot, write_fixture_recipe
from benchmarks._crash_procs import RUN_MARKER, Broken, Started, must

OLD, NEW = "3.5.0", "3.5.1"  # the env's stock libMIOpen, the artifact's
LAYOUTS = ("conda", "wheel")
TEMP_MARKS = (".rocmbuild-new-", ".rocmbuild-old-", ".part")
CLEAN = ("ROCMBUILD_FAILPOINTS", "ROCMBUILD_PAUSEPOINTS", "ROCMBUILD_PAUSE_SECONDS", "CONDA_PREFIX", "VIRTUAL_ENV")


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
    for verb, s in zip(("apply", "rollback"), t.timed or (), strict=False):  # none timed: none
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
