"""Targets: the environment being changed, and which library files its Python really loads.

A target is a prefix (conda env, venv or any ``sys.prefix``), its Python, and what that Python
maps after ``import torch`` -- found by asking it (the probe), never assumed.

Decisions:

* ``--env PREFIX``: the Python is ``PREFIX/bin/python`` (else ``python3``); ``--python EXE``: the
  prefix is that interpreter's ``sys.prefix``. Neither: ``$CONDA_PREFIX``, else ``$VIRTUAL_ENV``,
  else a :class:`TargetError` asking for ``--env``. :func:`resolve` runs the interpreter once
  (``-c 'import sys; print(sys.prefix)'``, no torch) so "this Python does not run" is reported
  before anything else. All of these errors exit 2.
* A target path that is not UTF-8 (``--env $'/tmp/\\xff-env'``, an interpreter or a ``sys.prefix``
  there, or a prefix that resolves there) is refused by :func:`resolve` with a
  :class:`TargetError` (exit 2) showing the path escaped: the probe's report, the journal and the
  history are UTF-8 JSON, and a path that cannot be written there cannot be undone exactly. The
  interpreter prints its ``sys.prefix`` with ``ascii()``, so the path read back is exact.
* :func:`discover` is :func:`resolve` then :func:`discover_at` (one probe); a caller that must do
  something between the two (recover an interrupted swap first) calls them separately.
* Where the target came from is said: :func:`resolve_from` returns it (``--env``, ``--python``,
  ``$CONDA_PREFIX``, ``$VIRTUAL_ENV``; ``-n NAME`` reaches here as ``--env``), the JSON's
  ``target.from`` carries it, and an implicit target (from a variable) is announced on stderr
  (``target: /x/.venv (from $VIRTUAL_ENV)``) by every verb that resolves one.
* The implicit target is never rocmbuild's own environment: when the variable names the prefix
  rocmbuild runs from (``sys.prefix``: the README's ``. .venv/bin/activate``) and torch cannot be
  found there, that is a :class:`TargetError` asking for ``--env`` (``details.own_environment``),
  not a probe of rocmbuild's venv.
* :func:`discover_at` probes the target *activated* (:mod:`rocmbuild.environment.activation`: conda's
  ``activate.d`` and env vars, a venv's ``bin/activate``); only when the activation changes a
  variable that can change what torch loads does it probe a second time with the caller's
  environment as it is (``Target.unactivated``); :attr:`Target.difference` says what differs and
  which variable and file make the difference. Judging uses the activated report.
* The prefix keeps the path the user gave (made absolute); comparisons (:meth:`Target.inside_prefix`)
  use fully resolved paths on both sides, because ``/proc/self/maps`` shows resolved paths.
* :meth:`Target.layout`: "conda" when the real file is reached through at least one symlink in
  its directory (``libMIOpen.so.1 -> libMIOpen.so.1.0``), "wheel" when nothing links to it
  (``site-packages/torch/lib/libMIOpen.so``, RPATH ``$ORIGIN``); "outside" when it resolves outside
  the prefix (e.g. ``/opt/rocm/lib``: the apply step refuses it unless asked); "none" when not loaded.
* :meth:`Target.library` returns the single loaded library of a kind; two files of one SONAME
  loaded is ambiguous and raises :class:`TargetError` (verification reports it as a failed check
  instead). Members of a set with distinct SONAMEs are no ambiguity (cuDNN 9 maps
  ``libcudnn.so.9`` and, on the first version call, ``libcudnn_graph.so.9``): the kind's main
  file (``libcudnn.so*``, ``libMIOpen.so*``) is the library.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rocmbuild.proc import runas
from rocmbuild.proc import runner
from rocmbuild import ui
from rocmbuild.errors import RequirementError, TargetError
from rocmbuild.home import target_state_dir
from rocmbuild.names import safe_text
from rocmbuild.environment import activation as activation_mod
from rocmbuild.environment import loadpath
from rocmbuild.environment.activation import Activation
from rocmbuild.environment.probe import LoadedLibrary, ProbeReport, run_probe

_MAIN = {"miopen": "libMIOpen", "cudnn": "libcudnn", "hip": "libamdhip64"}

RESOLVE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Target:
    prefix: Path
    python: Path
    report: ProbeReport
    state_dir: Path  # rocmbuild.home.target_state_dir(prefix)
    origin: str = "--env"  # where the target came from: --env, -n NAME, --python, $CONDA_PREFIX, $VIRTUAL_ENV
    activation: Activation = activation_mod.NONE
    unactivated: ProbeReport | None = None  # probed without the activation (only when it changes a relevant variable)

    @property
    def difference(self) -> loadpath.Difference | None:
        """What the activation changes in what torch loads (None: nothing, or not probed twice)."""
        return loadpath.difference(self.activation, self.report, self.unactivated)

    def library(self, kind: str = "miopen") -> LoadedLibrary | None:
        """The single loaded library of that kind, None if none; TargetError if several."""
        libs = self.report.loaded(kind)
        if not libs:
            return None
        by_soname: dict[str, list[LoadedLibrary]] = {}
        for lib in libs:
            by_soname.setdefault(lib.soname, []).append(lib)
        main = self.report.named(_MAIN.get(kind, kind))
        if len(libs) > 1 and all(len(v) == 1 for v in by_soname.values()) and len(main) == 1:
            return main[0]
        if len(libs) > 1:
            raise TargetError(
                f"{len(libs)} {kind} libraries are loaded by {self.python}: " + ", ".join(lib.path for lib in libs),
                "the target is ambiguous; remove the stray copy (or the LD_LIBRARY_PATH entry that brings it in) "
                "and run `rocmbuild status` again",
                details={"libraries": [lib.path for lib in libs]},
            )
        return libs[0]

    def inside_prefix(self, path: str | Path) -> bool:
        """True when ``path`` (symlinks resolved) is inside the prefix (symlinks resolved)."""
        real = Path(os.path.realpath(path))
        root = Path(os.path.realpath(self.prefix))
        return real == root or root in real.parents

    def layout_of(self, lib: LoadedLibrary | None) -> str:
        """"conda", "wheel", "outside" or "none" for one loaded library (see the module docstring)."""
        if lib is None:
            return "none"
        if not self.inside_prefix(lib.path):
            return "outside"
        return "conda" if self.links_to(Path(lib.path)) else "wheel"

    def layout(self, kind: str = "miopen") -> str:
        return self.layout_of(self.library(kind))

    def links_to(self, path: Path) -> tuple[Path, ...]:
        """Symlinks in ``path``'s directory that resolve to it (sorted: shortest name first)."""
        path = Path(path)
        try:
            real = path.resolve()
            entries = list(path.parent.iterdir())
        except OSError:
            return ()
        out = []
        for p in entries:
            try:
                if p.is_symlink() and p.resolve() == real:
                    out.append(p)
            except OSError:
                continue
        return tuple(sorted(out, key=lambda p: (len(p.name), p.name)))

    def to_json(self) -> dict:
        diff = self.difference
        return {"prefix": str(self.prefix), "python": str(self.python), "state_dir": str(self.state_dir),
                "from": self.origin, "activation": self.activation.to_json(),
                "unactivated": diff.to_json() if diff is not None else None}


def require_utf8(path: str | os.PathLike, source: str) -> None:
    """TargetError (exit 2) when ``path`` (or what it resolves to) is not valid UTF-8."""
    for p in (os.fspath(path), os.path.realpath(path)):
        try:
            p.encode("utf-8")
        except UnicodeEncodeError:
            raise TargetError(
                f"the environment path {safe_text(p)} (from {source}) is not valid UTF-8; rocmbuild needs a "
                "UTF-8 path",
                "move or create the environment under a path whose name is UTF-8 (the bytes shown as \\xNN are "
                "not), then pass that path",
                details={"path": safe_text(p), "from": source}) from None


def _prefix_line(line: str) -> Path:
    """The ``ascii()`` of a ``sys.prefix`` read back exactly (else the line as it is)."""
    try:
        value = ast.literal_eval(line)
    except (ValueError, SyntaxError):
        return Path(line)
    return Path(value) if isinstance(value, str) else Path(line)


def _ask_prefix(python: Path) -> Path:
    """Run ``python`` once (no torch) and return its sys.prefix; TargetError when it does not run."""
    hint = "pass --python with a working interpreter, or --env with the environment's prefix"
    try:
        done = runner.capture([str(python), "-c", "import sys; print(ascii(sys.prefix))"], timeout=RESOLVE_TIMEOUT,
                              user=runas.for_target(python))  # its .pth files run: as root, as their owner
    except RequirementError as exc:
        raise TargetError(f"Python not found or not executable: {python}", hint) from exc
    except subprocess.TimeoutExpired as exc:
        raise TargetError(f"{python} did not answer within {RESOLVE_TIMEOUT:g} s", hint) from exc
    except OSError as exc:
        raise TargetError(f"cannot run {python}: {exc}", hint) from exc
    out = done.stdout.strip().splitlines()
    if done.returncode != 0 or not out:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-10:])
        raise TargetError(
            f"{python} does not run as a Python interpreter (exit code {done.returncode})"
            + (f"\n{tail}" if tail else ""),
            hint,
        )
    return _prefix_line(out[-1])


def _python_in(prefix: Path) -> Path | None:
    for name in ("python", "python3"):
        p = prefix / "bin" / name
        if p.exists():
            return p
    return None


def resolve(env: str | None = None, python: str | None = None, *, check: bool = True) -> tuple[Path, Path]:
    """(prefix, python) of the target, without importing torch. See the module docstring.
    ``check=False``: an ``--env`` target's Python is not run here (the caller probes it at once,
    and the probe reports a Python that does not run as clearly); ``--python`` always runs it."""
    prefix, exe, _origin = resolve_from(env, python, check=check)
    return prefix, exe


_NAMED: dict[str, str] = {}  # an --env value the CLI found by ``-n NAME`` -> "-n NAME"


def named(prefix: str, name: str) -> None:
    """Say that ``prefix`` (the value given as ``--env``) was found by ``-n NAME``: the verbs then
    say the target came from ``-n NAME``, not from ``--env``."""
    _NAMED[prefix] = f"-n {name}"


def resolve_from(env: str | None = None, python: str | None = None, *,
                 check: bool = True) -> tuple[Path, Path, str]:
    """(prefix, python, where it came from): :func:`resolve` that also says where."""
    if env and python:
        raise TargetError("give either --env or --python, not both", "--env PREFIX or --python EXE")
    if python:
        exe = Path(python).expanduser()
        if "/" not in python:
            found = runner.which(python)
            if found is None:
                raise TargetError(f"Python not found on PATH: {python}", "give the interpreter's full path")
            exe = Path(found)
        exe = Path(os.path.abspath(exe))
        require_utf8(exe, "--python")
        prefix = _ask_prefix(exe)
        require_utf8(prefix, f"the sys.prefix of {safe_text(exe)}")
        return prefix, exe, "--python"
    source = _NAMED.get(env, "--env") if env else "--env"
    if not env:
        for var in ("CONDA_PREFIX", "VIRTUAL_ENV"):
            if os.environ.get(var):
                env, source = os.environ[var], f"${var}"
                break
        else:
            raise TargetError(
                "no target environment: give --env PREFIX (or --python EXE); neither $CONDA_PREFIX nor "
                "$VIRTUAL_ENV is set",
                "pass --env PREFIX (a conda env or venv) or --python EXE, or activate the environment first",
            )
    prefix = Path(os.path.abspath(Path(env).expanduser()))
    require_utf8(prefix, source)
    if not prefix.exists():
        raise TargetError(f"target prefix does not exist: {prefix} (from {source})",
                          "check the path: --env takes the environment's root directory (the one with bin/)")
    if not prefix.is_dir():
        raise TargetError(f"target prefix is not a directory: {prefix} (from {source})",
                          "--env takes the environment's root directory; for an interpreter use --python")
    in_prefix = _python_in(prefix)
    if in_prefix is None:
        raise TargetError(
            f"not an environment prefix: {prefix} has no bin/python (from {source})",
            "--env takes a conda env or venv root (e.g. ~/miniconda3/envs/NAME); for another layout use --python EXE",
        )
    exe = in_prefix
    if source.startswith("$"):
        _not_own_environment(prefix, source)
        ui.info(f"target: {prefix} (from {source})")
    if check:
        _ask_prefix(exe)
    return prefix, exe, source


def _not_own_environment(prefix: Path, source: str) -> None:
    """TargetError when an implicit target is the environment rocmbuild runs from and has no torch."""
    try:
        own = os.path.samefile(prefix, sys.prefix)
    except OSError:
        return
    if own and importlib.util.find_spec("torch") is None:
        raise TargetError(
            f"{source} is {prefix}, the environment rocmbuild itself runs from, and it has no torch: it is not the "
            "environment to check or change",
            "pass --env PREFIX (or -n NAME) for the environment that has PyTorch; rocmbuild does not judge its own "
            "environment",
            details={"prefix": str(prefix), "from": source, "own_environment": True})


def discover(
    env: str | None = None,
    python: str | None = None,
    *,
    timeout: float = 300,
    want_hash: bool = False,
    smoke: bool = False,
) -> Target:
    """Resolve the target and probe it (activated; see the module docstring). No torch, or torch
    failing: TargetError."""
    prefix, exe, origin = resolve_from(env, python)
    return discover_at(prefix, exe, timeout=timeout, want_hash=want_hash, smoke=smoke, origin=origin)


def discover_at(prefix: Path, python: Path, *, timeout: float = 300, want_hash: bool = False,
                smoke: bool = False, origin: str = "--env") -> Target:
    """Probe a target :func:`resolve` already returned (prefix, python) without resolving it again:
    activated, and a second time unactivated when the activation changes a relevant variable."""
    act = activation_mod.of(prefix, python)
    report = run_probe(python, timeout=timeout, want_hash=want_hash, smoke=smoke, env=act.extras())
    if report.torch_error:
        raise _torch_error(report, prefix, python, act)
    other = _unactivated(python, timeout) if act.relevant() else None
    return Target(prefix=prefix, python=python, report=report, state_dir=target_state_dir(prefix), origin=origin,
                  activation=act, unactivated=other)


def _unactivated(python: Path, timeout: float) -> ProbeReport | None:
    """The second probe, without the activation; one that does not finish is only a warning."""
    try:
        return run_probe(python, timeout=timeout)
    except TargetError as exc:
        ui.warn(f"the probe without the environment's activation failed ({exc.message.splitlines()[0]}); only the "
                "activated environment is reported")
        return None


def probe_env(prefix: Path, python: Path) -> dict[str, str | None]:
    """The environment extras that activate the target (for a probe run outside :func:`discover_at`)."""
    return activation_mod.of(prefix, python).extras()


def _torch_error(report: ProbeReport, prefix: Path, python: Path, act: Activation) -> TargetError:
    """torch is missing, or ``import torch`` fails, in the target: say which, and that nothing changed."""
    torch_error = report.torch_error or ""
    details = {"torch_error": report.torch_error, "prefix": str(prefix), "activation": act.to_json()}
    if torch_error.startswith("ModuleNotFoundError") and "'torch'" in torch_error:
        return TargetError(
            f"torch is not installed in the target {prefix} (python {python})",
            "install PyTorch for ROCm in that environment, or point --env/--python at the one that has it",
            details=details,
        )
    tb = (report.torch_traceback or "").strip().splitlines()[-6:]
    applied = ", ".join(f"{c.var} set by {c.source}" for c in act.relevant())
    return TargetError(
        f"`import torch` fails in the target {prefix}: {report.torch_error}"
        + (f" (with its activation applied: {applied})" if applied else "")
        + ("\n" + "\n".join(tb) if tb else ""),
        "fix the environment first (run the target's python -c 'import torch' to see the full error); "
        "nothing was changed",
        details=details,
    )
