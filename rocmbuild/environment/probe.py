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
  startup, e.g. a ``sitecustomize`` or a ``.pth`` file, may print before the probe redirects fd 1).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import Version

from rocmbuild import progress
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
    kind: str  # "miopen" | "hip" | "cudnn"
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
        return {**asdict(self), "device": f"{os.major(self.dev):x}:{os.minor(self.dev):02x}"}

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


def _tuple3(value) -> tuple[int, int, int] | None:
    if value is None:
        return None
    try:
        t = tuple(int(x) for x in value)
    except (TypeError, ValueError):
        return None
    return t if len(t) == 3 else None  # type: ignore[return-value]


@dataclass(frozen=True)
class ProbeReport:
    python: str
    prefix: str
    python_version: str
    torch_version: str | None
    torch_error: str | None
    hip: str | None
    cuda: str | None
    cudnn_available: bool | None
    version_int: int | None
    version_error: str | None
    version_int_retry: int | None
    runtime_version: tuple[int, int, int] | None
    compile_version: tuple[int, int, int] | None
    cuda_available: bool | None
    gpu_arch: str | None
    libraries: tuple[LoadedLibrary, ...]
    smoke: dict | None
    errors: dict[str, str] = field(default_factory=dict)
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    mapped: tuple[LoadedLibrary, ...] = field(default=(), compare=False, repr=False)  # every shared object (kind "" for others)

    @classmethod
    def from_json(cls, raw: dict) -> "ProbeReport":
        def loaded(lib: dict) -> LoadedLibrary:
            return LoadedLibrary(path=lib["path"], kind=lib.get("kind") or "",
                                 dev=os.makedev(int(lib["dev_major"]), int(lib["dev_minor"])),
                                 inode=int(lib["inode"]), sha256=lib.get("sha256"),
                                 deleted=bool(lib.get("deleted", False)))

        libs = [loaded(lib) for lib in raw.get("libraries") or ()]

        def _int(v):
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        return cls(
            python=raw.get("python") or "",
            prefix=raw.get("prefix") or "",
            python_version=raw.get("python_version") or "",
            torch_version=raw.get("torch_version"),
            torch_error=raw.get("torch_error"),
            hip=raw.get("hip"),
            cuda=raw.get("cuda"),
            cudnn_available=raw.get("cudnn_available"),
            version_int=_int(raw.get("version_int")),
            version_error=raw.get("version_error"),
            version_int_retry=_int(raw.get("version_int_retry")),
            runtime_version=_tuple3(raw.get("runtime_version")),
            compile_version=_tuple3(raw.get("compile_version")),
            cuda_available=raw.get("cuda_available"),
            gpu_arch=raw.get("gpu_arch"),
            libraries=tuple(libs),
            smoke=raw.get("smoke"),
            errors=dict(raw.get("errors") or {}),
            raw=raw,
            mapped=tuple(loaded(lib) for lib in raw.get("mapped") or ()),
        )

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
        """The report as JSON-friendly data (without ``raw``)."""
        d = {k: v for k, v in asdict(self).items() if k not in ("raw", "libraries", "mapped")}
        d["libraries"] = [lib.to_json() for lib in self.libraries]
        return d


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
    if "probe_error" in raw:
        raise TargetError(
            f"the probe failed in {python}: {raw['probe_error']}",
            "this is probably a bug in rocmbuild's probe; report it with the output of --debug",
            details={"traceback": raw.get("traceback")},
        )
    return ProbeReport.from_json(raw)


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


__all__ = ["LoadedLibrary", "ProbeReport", "run_probe", "parse_output", "PROBE_SCRIPT", "KINDS", "probe_kind",
           "BACKEND_LIBRARY", "is_set", "soname_from_name"]

if __name__ == "__main__":  # pragma: no cover - a debugging aid
    print(run_probe(Path(sys.argv[1] if len(sys.argv) > 1 else sys.executable)))
