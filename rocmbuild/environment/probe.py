"""Host side of the probe: run ``_probe.py`` in the target's Python and parse its report.

:func:`run_probe` starts the target's Python on ``_probe.py`` as a fresh process (through
:func:`rocmbuild.proc.runner.capture`: its own process group, stdin ``/dev/null``, the user's live
environment passed through so ``LD_LIBRARY_PATH``, ``PYTHONPATH``, ``HSA_*`` etc. apply exactly
as they would for the user, with the target's activation applied over it when the caller passes
one: :mod:`rocmbuild.environment.activation`). The probe prints one JSON object; it becomes a frozen
:class:`ProbeReport`. Judging it is :mod:`rocmbuild.environment.verify`'s. The report is taken when
the probe process exits, even if a child that torch forked (or one that called ``setsid()``)
still holds its pipes; that child is killed then (runner.py, reaper.py).

Decisions:

* The number judged is the first ``cudnn.version()`` call's, else the second call's (the first
  raised the incompatibility error), else one computed from ``getRuntimeVersion()``.
* A library is selected by file name: ``<library>.so*`` (``libMIOpen`` matches
  ``libMIOpen.so.1.0`` but not ``libMIOpenFoo``; ``libcudnn`` matches ``libcudnn.so.9`` but not
  cuDNN 9's ``libcudnn_ops.so.9``); a name with ``*?[`` is a glob over file names, a library
  *set* (``libcudnn*``: ``libcudnn.so.9``, ``libcudnn_graph.so.9``, ...).
* A mapped file's SONAME is read from its ELF dynamic section when the file at that path is still
  the mapped inode, else derived from the name (``libcudnn.so.9.1.0`` -> ``libcudnn.so.9``).
* The library and encoding of a target follow its backend unless given: a ROCm torch is judged on
  ``libMIOpen``/``miopen``, a CUDA torch on the set ``libcudnn*``/``cudnn`` (:data:`BACKEND_LIBRARY`).
* The JSON is the whole stdout, else its last line that parses as an object (interpreter
  startup, e.g. a ``sitecustomize`` or a ``.pth`` file, may print before the probe redirects fd 1);
  it is parsed once by :data:`PROBE_SPEC`: a report that does not fit is a TargetError (exit 2) naming the field.

One module because the probe's host side is one exchange: start the target's Python on
``_probe.py`` (as its owner when run as root), read its report, and parse it into the values every
verifier reads; the report's types and its schema are the contract of that exchange.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from packaging.version import Version

from rocmbuild import progress
from rocmbuild import schema as s
from rocmbuild.proc import runner
from rocmbuild.proc import runas
from rocmbuild.store.artifact import read_soname
from rocmbuild.errors import RequirementError, TargetError
from rocmbuild.environment.versions import decode_version, encode_version

PROBE_SCRIPT = Path(__file__).with_name("_probe.py")
KINDS = ("miopen", "hip", "cudnn")
_LIBRARY_KIND = {"libMIOpen": "miopen", "libamdhip64": "hip", "libcudnn": "cudnn"}
BACKEND_LIBRARY = {"miopen": "libMIOpen", "cudnn": "libcudnn*"}  # what a backend is judged on by default


# --------------------------------------------------------------------------------------------
# the report


@dataclass(frozen=True)
class LoadedLibrary:
    path: str  # as in /proc/self/maps: the real file, symlinks resolved by the kernel
    kind: str  # "miopen" | "hip" | "cudnn" ("" for any other shared object, in ``mapped``)
    dev: int  # os.makedev(major, minor) from the maps line's "fd:01" field (hex)
    inode: int
    sha256: str | None = None
    deleted: bool = False  # the maps line ends with " (deleted)"

    def same_file(self, path: str | os.PathLike) -> bool:
        """True when ``path`` (symlinks followed) is this very inode."""
        try:
            st = os.stat(path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (self.dev, self.inode) and not self.deleted

    def to_json(self) -> dict:
        """The library as the JSON output shows it (``dev`` and ``device``), and as the probe
        says it (``dev_major``, ``dev_minor``): :data:`LIBRARY_SPEC` reads it back."""
        return {**asdict(self), "device": self.device, "dev_major": os.major(self.dev), "dev_minor": os.minor(self.dev)}

    @property
    def device(self) -> str:
        """``fe:01``: the device as ``/proc/self/maps`` says it (major and minor in hex)."""
        return f"{os.major(self.dev):x}:{os.minor(self.dev):02x}"

    @property
    def soname(self) -> str:
        """The mapped file's DT_SONAME (read while the path is still that inode), else from its name."""
        if self.same_file(self.path):
            found = read_soname(Path(self.path))
            if found:
                return found
        return soname_from_name(os.path.basename(self.path))


def soname_from_name(name: str) -> str:
    """``libcudnn.so.9.1.0`` -> ``libcudnn.so.9``; ``libMIOpen.so`` stays."""
    m = re.match(r"^(.*?\.so(?:\.\d+)?)(?:\.|$)", name)
    return m.group(1) if m else name


@dataclass(frozen=True)
class SmokeCheck:
    """One check of the probe's smoke suite (``_probe.py --smoke``)."""

    name: str
    status: str  # "passed" | "failed" | "skipped" ("": no suite ran, :mod:`rocmbuild.environment.smoke`)
    reason: str | None = None
    cannot_run: bool = False  # the torch lacks the API the check calls
    traceback: str | None = None

    def to_json(self) -> dict:
        out = {"name": self.name, "status": self.status, "reason": self.reason}
        return {**out, **({"cannot_run": True} if self.cannot_run else {}),
                **({"traceback": self.traceback} if self.traceback is not None else {})}


@dataclass(frozen=True)
class SmokeResult:
    """The smoke suite's result: its status, why, the device it ran on and each check."""

    status: str
    reason: str | None = None
    node: str | None = None  # the BatchNorm2d backward node torch used
    device: str | None = None
    checks: tuple[SmokeCheck, ...] = ()

    def to_json(self) -> dict:
        return {"status": self.status, "reason": self.reason, "node": self.node, "device": self.device,
                "checks": [c.to_json() for c in self.checks]}


@dataclass(frozen=True)
class ProbeReport:
    """The probe's report, parsed once by :data:`PROBE_SPEC`; :meth:`to_json` is the probe's JSON
    (read back to an equal report), :meth:`summary` what the JSON output shows of it."""

    python: str = ""
    prefix: str = ""
    python_version: str = ""
    torch_version: str | None = None
    torch_error: str | None = None
    hip: str | None = None
    cuda: str | None = None
    cudnn_available: bool | None = None
    version_int: int | None = None
    version_error: str | None = None
    version_int_retry: int | None = None
    runtime_version: tuple[int, int, int] | None = None
    compile_version: tuple[int, int, int] | None = None
    cuda_available: bool | None = None
    gpu_arch: str | None = None
    libraries: tuple[LoadedLibrary, ...] = ()
    smoke: SmokeResult | None = None
    errors: dict[str, str] = field(default_factory=dict)
    # every shared object mapped (kind "" for the others): for the DT_NEEDED check
    mapped: tuple[LoadedLibrary, ...] = field(default=(), compare=False, repr=False)
    torch_file: str | None = field(default=None, compare=False, repr=False)  # torch/__init__.py of the target
    torch_traceback: str | None = field(default=None, compare=False, repr=False)  # the end of ``import torch``'s

    @classmethod
    def from_json(cls, raw: object, file: object = "the probe's report") -> "ProbeReport":
        """The probe's JSON read by :data:`PROBE_SPEC`; SchemaError (a ValueError) naming
        ``file``, the field and what was expected."""
        return s.load(PROBE_SPEC, raw, file)

    def to_json(self) -> dict:
        """The report as the probe prints it (:meth:`from_json` reads it back to an equal report)."""
        d = self.summary()
        d.update(schema=PROBE_SCHEMA, mapped=[lib.to_json() for lib in self.mapped], torch_file=self.torch_file,
                 torch_traceback=self.torch_traceback)
        return d

    def loaded(self, kind: str = "miopen") -> tuple[LoadedLibrary, ...]:
        """Every loaded library of that kind ("miopen", "hip" or "cudnn")."""
        return tuple(lib for lib in self.libraries if lib.kind == kind)

    def named(self, library: str) -> tuple[LoadedLibrary, ...]:
        """Loaded libraries whose file name is ``<library>.so`` or ``<library>.so.*``."""
        return tuple(lib for lib in self.libraries if _name_matches(lib.path, library))

    @property
    def backend(self) -> str | None:
        """"miopen" (a ROCm torch), "cudnn" (a CUDA torch) or None (a CPU-only torch)."""
        if self.hip:
            return "miopen"
        if self.cuda:
            return "cudnn"
        return None

    def effective_version_int(self, encoding: str | None = None) -> int | None:
        """The number to decode: first call's, else the retry's, else computed from the runtime tuple."""
        if self.version_int is not None:
            return self.version_int
        if self.version_int_retry is not None:
            return self.version_int_retry
        if self.runtime_version is not None:
            return encode_version(self.runtime_version, encoding or self.backend or "miopen")
        return None

    def runtime(self, encoding: str | None = None) -> Version | None:
        """The runtime library version torch sees, decoded."""
        if self.runtime_version is not None:
            return Version(".".join(map(str, self.runtime_version)))
        n = self.effective_version_int(encoding)
        return decode_version(n, encoding or self.backend or "miopen") if n is not None else None

    def compiled(self) -> Version | None:
        if self.compile_version is None:
            return None
        return Version(".".join(map(str, self.compile_version)))

    def summary(self) -> dict:
        """The report as the JSON output shows it (without ``mapped`` and the torch file)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_SHOWN}
        d.update(libraries=[lib.to_json() for lib in self.libraries], errors=dict(self.errors),
                 runtime_version=list(self.runtime_version) if self.runtime_version else None,
                 compile_version=list(self.compile_version) if self.compile_version else None,
                 smoke=self.smoke.to_json() if self.smoke else None)
        return d


_NOT_SHOWN = ("mapped", "torch_file", "torch_traceback")
PROBE_SCHEMA = 1  # what _probe.py's PROBE_SCHEMA says


# --------------------------------------------------------------------------------------------
# the report's schema


@dataclass(frozen=True)
class _MappedFile:
    """One library as the probe prints it (its device as major and minor), before it is a LoadedLibrary."""
    path: str
    dev_major: int
    dev_minor: int
    inode: int
    kind: str | None = None
    sha256: str | None = None
    deleted: bool = False


_COUNT = s.check(s.integer, lambda v: v >= 0, "an integer of 0 or more")
_MAPPED = s.record(_MappedFile, path=s.check(s.string, os.path.isabs, "an absolute path"), dev_major=_COUNT,
                   dev_minor=_COUNT, inode=_COUNT)


def _library(v: object, where: str) -> LoadedLibrary:
    m = _MAPPED(v, where)
    return LoadedLibrary(path=m.path, kind=m.kind or "", dev=os.makedev(m.dev_major, m.dev_minor), inode=m.inode,
                         sha256=m.sha256, deleted=m.deleted)


LIBRARY_SPEC: s.Spec = _library  # one library of the probe's ``libraries`` / ``mapped``
_VERSION3 = s.optional(s.check(s.list_of(s.integer), lambda v: len(v) == 3, "a list of 3 integers"))
_STATUS = s.one_of("passed", "failed", "skipped")
SMOKE_SPEC = s.record(SmokeResult, status=_STATUS,
                      checks=s.list_of(s.record(SmokeCheck, name=s.string, status=_STATUS)))
_SCHEMA = s.check(s.integer, lambda v: v == PROBE_SCHEMA, f"{PROBE_SCHEMA} (the probe this rocmbuild ships)")
_RECORD = s.record(ProbeReport, runtime_version=_VERSION3, compile_version=_VERSION3,
                   libraries=s.list_of(LIBRARY_SPEC), mapped=s.list_of(LIBRARY_SPEC),
                   smoke=s.optional(SMOKE_SPEC))


def PROBE_SPEC(v: object, where: str) -> ProbeReport:
    """The probe's report: ``schema`` (when given) first, then every field typed; a field left
    out takes its default (an older report, a test's partial one), keys it does not name are ignored."""
    if type(v) is dict and "schema" in v:
        _SCHEMA(v["schema"], "schema")
    return _RECORD(v, where)




@dataclass(frozen=True)
class ProbeFailure:
    """What the probe prints when it raised itself (a bug in it): the error and its traceback."""

    probe_error: str
    traceback: str | None = None


FAILURE_SPEC = s.record(ProbeFailure)


def is_set(library: str) -> bool:
    """True for a glob (``libcudnn*``): a library set judged one file per SONAME."""
    return any(c in library for c in "*?[")


def _name_matches(path: str, library: str) -> bool:
    base = os.path.basename(path)
    if is_set(library):
        return fnmatch.fnmatchcase(base, library)
    return base == f"{library}.so" or base.startswith(f"{library}.so.")


# --------------------------------------------------------------------------------------------
# running it


def run_probe(python: Path, *, timeout: float = 300, want_hash: bool = False, smoke: bool = False,
              env: runner.Env = None) -> ProbeReport:
    """Run the probe in ``python`` (a fresh process) and parse its JSON. ``env``: the target's
    activation (:meth:`rocmbuild.environment.activation.Activation.extras`) applied over the caller's.

    Raises :class:`TargetError` (exit 2) when the Python does not exist or run, prints no JSON,
    or runs longer than ``timeout`` seconds (its whole process group is killed first).
    """
    argv: list[str] = [str(python), str(PROBE_SCRIPT)]
    if want_hash:
        argv.append("--hash")
    if smoke:
        argv.append("--smoke")
    with progress.phase("probe", f"probing {python} (importing torch)"):
        done = _capture(argv, python, timeout, env)
    raw = parse_output(done.stdout)
    if raw is None:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise TargetError(
            f"the probe printed no report in {python} (exit code {done.returncode})"
            + (f"\n--- last lines ---\n{tail}" if tail else ""),
            "check that this is a working Python 3.8+ interpreter: run it with -c 'import sys; print(sys.prefix)'",
            details={"python": str(python), "returncode": done.returncode},
        )
    if "probe_error" in raw:  # the probe itself raised: its error, not a report
        try:
            failure = s.load(FAILURE_SPEC, raw, "the probe's report")
        except s.SchemaError as exc:
            failure = ProbeFailure(str(exc))
        raise TargetError(
            f"the probe failed in {python}: {failure.probe_error}",
            "this is probably a bug in rocmbuild's probe; report it with the output of --debug",
            details={"traceback": failure.traceback},
        )
    try:
        return ProbeReport.from_json(raw, f"the probe's report from {python}")
    except s.SchemaError as exc:
        raise TargetError(
            f"the probe's report cannot be read: {exc}",
            f"run `{python} {PROBE_SCRIPT}` by hand to see what it prints (a sitecustomize or a patched module "
            "in the target can change it); if nothing there explains it, report it with the output of --debug",
            details={"python": str(python), "schema": exc.to_json()},
        ) from None


#: run as another user (who may not read rocmbuild's files), the probe's source comes in this variable
SOURCE_VAR = "RB_PROBE_SOURCE"  # a handover, not a setting: popped before torch is imported
# ``-c`` puts the working directory ("") first on sys.path: dropped before _probe.py imports anything
_BOOT = (f"import sys; sys.path[:] = [p for p in sys.path if p]; import os; "
         f"exec(compile(os.environ.pop({SOURCE_VAR!r}), '_probe.py', 'exec'))")


def _capture(argv: list[str], python: Path, timeout: float, env: runner.Env = None) -> runner.Completed:
    """Run the probe's command line; every way of not running at all is a TargetError. Run as root
    on another user's target, it runs as that user (:mod:`rocmbuild.proc.runas`), the probe handed over
    as source in :data:`SOURCE_VAR` (popped before torch is imported)."""
    who = runas.for_target(python)
    if who is not None:
        argv = [argv[0], "-c", _BOOT, *argv[2:]]
        env = {**(env or {}), SOURCE_VAR: PROBE_SCRIPT.read_text()}
    try:
        return runner.capture(argv, timeout=timeout, env=env, user=who)
    except RequirementError as exc:
        raise TargetError(
            f"the target's Python does not exist or is not executable: {python}",
            "pass --python with a working interpreter, or --env with the environment's prefix",
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise TargetError(
            f"the probe did not finish within {timeout:g} s in {python} (killed)",
            "importing torch can be slow on a cold cache or a network filesystem: raise the limit with "
            "--probe-timeout SECONDS, or check that `python -c 'import torch'` finishes in that environment",
            details={"python": str(python), "timeout": timeout},
        ) from exc
    except OSError as exc:
        raise TargetError(
            f"cannot run the target's Python {python}: {exc}",
            "pass --python with a working interpreter, or --env with the environment's prefix",
        ) from exc


def parse_output(stdout: str) -> dict | None:
    """The probe's JSON object from its stdout (see the module docstring); None when there is none."""
    text = stdout.strip()
    candidates = [text] + [line for line in reversed(text.splitlines()) if line.startswith("{")]
    for c in candidates:
        try:
            obj = json.loads(c)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def probe_kind(library: str) -> str:
    """The probe's kind for a library stem or set ("libMIOpen" -> "miopen", "libcudnn*" -> "cudnn")."""
    stem = re.split(r"[*?\[]", library, maxsplit=1)[0]
    if stem in _LIBRARY_KIND:
        return _LIBRARY_KIND[stem]
    for prefix, kind in _LIBRARY_KIND.items():
        if stem.startswith(prefix):
            return kind
    return "miopen"


__all__ = ["LoadedLibrary", "ProbeReport", "SmokeResult", "SmokeCheck", "PROBE_SPEC", "LIBRARY_SPEC", "run_probe",
           "parse_output", "PROBE_SCRIPT", "KINDS", "probe_kind", "BACKEND_LIBRARY", "is_set", "soname_from_name"]

if __name__ == "__main__":  # pragma: no cover - a debugging aid
    print(run_probe(Path(sys.argv[1] if len(sys.argv) > 1 else sys.executable)))
