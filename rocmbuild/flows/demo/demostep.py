"""One demo step: a real ``python -m rocmbuild ...`` process run from the scratch dir, its
command line and then its output printed as they come, and the checks that must hold after it.

Decisions:
* The command is shown as a user types it (``$ rocmbuild apply miopen-demo.toml --env env``);
  what runs is ``sys.executable -m rocmbuild`` with the same arguments, so it is this very
  rocmbuild. The child gets the scratch ``ROCMBUILD_HOME`` and an empty ``ROCMBUILD_FAILPOINTS``
  (only the crash step sets one). When rocmbuild is not installed (run from a checkout), the
  checkout is put on ``PYTHONPATH``; an installed one is never put there, or the scratch env's
  Python would see the site-packages it sits in (and maybe a real torch) before the stand-in.
* Loaded versions are checked the way users checked by hand: the env's Python runs
  ``import torch; print(torch.backends.cudnn.version())``. "Byte-identical" compares every
  file's sha256, mode and every link's text below the env (``.rocmbuild`` and ``__pycache__``
  aside: state and import caches are not the environment's content).
"""

from __future__ import annotations

import os
import shlex
import site
import stat
import sys
import sysconfig
import time
from pathlib import Path
from typing import Callable

import rocmbuild
from rocmbuild.fs import disk
from rocmbuild.proc import runner
from rocmbuild import ui
from rocmbuild.errors import RocmbuildError
from rocmbuild.results import DemoCheck, DemoStep

VERSION_CHECK = "import torch; print(torch.backends.cudnn.version())"
SKIP = {".rocmbuild", "__pycache__"}
Snapshot = dict[str, tuple]


def child_env(home: Path) -> dict[str, str]:
    env = {"ROCMBUILD_HOME": str(home), "ROCMBUILD_FAILPOINTS": "", "ROCMBUILD_PAUSEPOINTS": ""}
    pkg_parent = Path(rocmbuild.__file__).resolve().parent.parent
    installed = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), site.getusersitepackages()}
    if str(pkg_parent) not in {str(Path(p).resolve()) for p in installed if p}:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pkg_parent), os.environ.get("PYTHONPATH")) if p)
    return env


def run_step(name: str, args: list[str], root: Path, *, expect: int = 0, extra: dict[str, str] | None = None,
             checks: Callable[[], list[DemoCheck]] = lambda: []) -> DemoStep:
    """Run ``rocmbuild ARGS`` in ``root``, streaming its output; then the checks (only when it
    exited as expected: after a wrong exit the state is not worth judging)."""
    shown = ("rocmbuild", *args)
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (extra or {}).items())
    ui.info("")
    ui.info(f"$ {prefix + ' ' if prefix else ''}{shlex.join(shown)}")
    env = {**child_env(root / "home"), **(extra or {})}
    start = time.monotonic()
    try:
        runner.run([sys.executable, "-m", "rocmbuild", *args], cwd=root, env=env, on_line=ui.info,
                   log=root / "demo.log")
        code = 0
    except RocmbuildError as exc:
        if "returncode" not in exc.details:
            raise
        code = int(exc.details["returncode"])
    seconds = time.monotonic() - start
    found = tuple(checks()) if code == expect else ()
    for c in found:
        ui.info(f"  check {'ok' if c.ok else 'FAILED'}: {c.what}: {c.detail}")
    if code != expect:
        ui.info(f"  check FAILED: exit code {code}, expected {expect}")
    return DemoStep(name, shown, code, expect, seconds, found, tuple((extra or {}).items()))


def loaded_version(python: Path) -> int | None:
    """What the env's torch reports, as a user asks it (None: it did not answer a number)."""
    r = runner.capture([python, "-c", VERSION_CHECK], timeout=60)
    text = r.stdout.strip()
    return int(text) if r.returncode == 0 and text.isdigit() else None


def version_check(python: Path, want: str) -> DemoCheck:
    major, minor, patch = (int(x) for x in want.split("."))
    expected = major * 1_000_000 + minor * 1000 + patch
    got = loaded_version(python)
    return DemoCheck(f"torch.backends.cudnn.version() is {expected} (MIOpen {want})", got == expected,
                     f"{python.name} -c {VERSION_CHECK!r} printed {got if got is not None else 'no number'}")


def snapshot(prefix: Path) -> Snapshot:
    """Every path below ``prefix`` (but :data:`SKIP`) -> what it is: kind, mode, sha256 or link text."""
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(prefix):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP)
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(prefix))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", stat.S_IMODE(st.st_mode), disk.sha256_file(p))
            else:
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
    return out


def same_as(prefix: Path, before: Snapshot, what: str) -> DemoCheck:
    now = snapshot(prefix)
    changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    detail = "every file, link and mode as it was" if not changed else \
        f"{len(changed)} path(s) differ: {', '.join(changed[:5])}"
    return DemoCheck(what, not changed, detail)


def differs(path: Path, before: Snapshot, prefix: Path, what: str) -> DemoCheck:
    rel = str(path.relative_to(prefix))
    now = snapshot(prefix).get(rel)
    return DemoCheck(what, now is not None and now != before.get(rel),
                     f"{rel}: sha256 {now[2][:16] if now and now[0] == 'file' else now}")
