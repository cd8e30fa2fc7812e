"""Host side of the probe: run ``_probe.py`` in the target's Python, parse and judge its report.

:func:`run_probe` starts the target's Python on ``_probe.py`` as a fresh process (through
:func:`rocmbuild.runner.capture`: its own process group, stdin ``/dev/null``, the user's live
environment passed through so ``LD_LIBRARY_PATH``, ``PYTHONPATH``, ``HSA_*`` etc. apply exactly
as they would for the user). The probe prints one JSON object; it becomes a frozen
:class:`ProbeReport`.

:func:`judge` turns a report into a :class:`Verdict`: a list of named :class:`Check` values,
each with what was expected and what was found. :func:`compatible` is the same major.minor rule
for use *before* a swap (artifact version vs torch's compile-time version).

Decisions:

* Version integers (:func:`decode_version`): MIOpen ``M*1000000 + m*1000 + p`` (PyTorch's
  ``getVersionInt`` on ROCm). cuDNN is what ``cudnnGetVersion()`` returns: cuDNN 9 and later
  ``M*10000 + m*100 + p`` (9.1.0 -> 90100), cuDNN 8 and earlier ``M*1000 + m*100 + p``
  (8.9.7 -> 8907). The boundary is ``n >= 90000``: the smallest cuDNN 9 number is 90000, and the
  old encoding would need major 90 to reach it, while every cuDNN <= 8 number is below 18000.
* The number judged is the first ``cudnn.version()`` call's, else the second call's (the first
  raised the incompatibility error), else one computed from ``getRuntimeVersion()``.
* Compatibility on ROCm (``torch.version.hip`` set) is PyTorch's strict rule: runtime major and
  minor equal to compile-time major and minor. On CUDA it is PyTorch's cuDNN rule: same major,
  runtime minor >= compile minor (for cuDNN >= 7). The rule is applied to the tuples from
  ``getRuntimeVersion()``/``getCompileVersion()``, not to whether the call raised, so
  ``PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1`` in the user's environment does not hide a mismatch.
* The library judged is selected by file name: ``<library>.so*`` (``libMIOpen`` matches
  ``libMIOpen.so.1.0`` but not ``libMIOpenFoo``; ``libcudnn`` matches ``libcudnn.so.9`` but not
  cuDNN 9's ``libcudnn_ops.so.9``).
* A smoke test asked for but impossible (no GPU) is a non-failing check whose ``found`` says
  ``skipped: no GPU`` and whose ``skipped`` flag is set: it is never reported as passed.
* A torch with neither ``torch.version.hip`` nor ``torch.version.cuda`` is a CPU build: the
  verdict says "no MIOpen/cuDNN in this torch" rather than only "library not loaded".
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from rocmbuild import runner
from rocmbuild.errors import RequirementError, TargetError
from rocmbuild.target.verify import Check, Verdict

PROBE_SCRIPT = Path(__file__).with_name("_probe.py")
ENCODINGS = ("miopen", "cudnn")
KINDS = ("miopen", "hip", "cudnn")
_LIBRARY_KIND = {"libMIOpen": "miopen", "libamdhip64": "hip", "libcudnn": "cudnn"}


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

    @classmethod
    def from_json(cls, raw: dict) -> "ProbeReport":
        libs = []
        for lib in raw.get("libraries") or ():
            libs.append(
                LoadedLibrary(
                    path=lib["path"],
                    kind=lib["kind"],
                    dev=os.makedev(int(lib["dev_major"]), int(lib["dev_minor"])),
                    inode=int(lib["inode"]),
                    sha256=lib.get("sha256"),
                    deleted=bool(lib.get("deleted", False)),
                )
            )

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
        d = {k: v for k, v in asdict(self).items() if k not in ("raw", "libraries")}
        d["libraries"] = [lib.to_json() for lib in self.libraries]
        return d


def _name_matches(path: str, library: str) -> bool:
    base = os.path.basename(path)
    return base == f"{library}.so" or base.startswith(f"{library}.so.")


# --------------------------------------------------------------------------------------------
# running it


def run_probe(python: Path, *, timeout: float = 300, want_hash: bool = False, smoke: bool = False) -> ProbeReport:
    """Run the probe in ``python`` (a fresh process) and parse its JSON.

    Raises :class:`TargetError` (exit 2) when the Python does not exist or run, prints no JSON,
    or runs longer than ``timeout`` seconds (its whole process group is killed first).
    """
    argv: list[str] = [str(python), str(PROBE_SCRIPT)]
    if want_hash:
        argv.append("--hash")
    if smoke:
        argv.append("--smoke")
    try:
        done = runner.capture(argv, timeout=timeout)
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
    raw = _parse_json(done.stdout)
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


def _parse_json(stdout: str) -> dict | None:
    import json

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


# --------------------------------------------------------------------------------------------
# versions


def decode_version(n: int, encoding: str) -> Version:
    """Decode a library version integer.

    ``miopen``: ``M*1000000 + m*1000 + p`` (3005001 -> 3.5.1). ``cudnn``: ``n >= 90000`` is
    cuDNN 9+ ``M*10000 + m*100 + p`` (90100 -> 9.1.0), below it cuDNN <= 8
    ``M*1000 + m*100 + p`` (8907 -> 8.9.7). See the module docstring for the boundary.
    """
    n = int(n)
    if n < 0:
        raise ValueError(f"negative version integer {n}")
    if encoding == "miopen":
        major, rest = divmod(n, 1000000)
        minor, patch = divmod(rest, 1000)
    elif encoding == "cudnn":
        if n >= 90000:
            major, rest = divmod(n, 10000)
        else:
            major, rest = divmod(n, 1000)
        minor, patch = divmod(rest, 100)
    else:
        raise ValueError(f"unknown version encoding {encoding!r} (use one of {', '.join(ENCODINGS)})")
    return Version(f"{major}.{minor}.{patch}")


def encode_version(v, encoding: str) -> int:
    """The inverse of :func:`decode_version` for a (major, minor, patch) tuple or version string."""
    if isinstance(v, str):
        v = Version(v).release
    major, minor, patch = (tuple(v) + (0, 0, 0))[:3]
    if encoding == "miopen":
        return major * 1000000 + minor * 1000 + patch
    if encoding == "cudnn":
        return major * (10000 if major >= 9 else 1000) + minor * 100 + patch
    raise ValueError(f"unknown version encoding {encoding!r}")


def _mm(v: Version | tuple | None) -> tuple[int, int] | None:
    if v is None:
        return None
    rel = v.release if isinstance(v, Version) else tuple(v)
    rel = tuple(rel) + (0, 0)
    return int(rel[0]), int(rel[1])


def _fmt(v) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, tuple):
        return ".".join(map(str, v))
    return str(v)


# --------------------------------------------------------------------------------------------
# judging


def _as_tuple(v) -> str:
    """Render a version as PyTorch's message does: (3, 5, 1)."""
    if isinstance(v, Version):
        v = tuple(v.release)
    return str(tuple(v)) if isinstance(v, tuple) else str(v)


def _incompatibility_message(runtime, compiled, report: ProbeReport, encoding: str) -> str:
    """Why torch would refuse the library, the error the user would see, and how to avoid it."""
    rt, ct = _fmt(runtime), _fmt(compiled)
    rmm, cmm = _mm(runtime), _mm(compiled)
    rmm_s = f"{rmm[0]}.{rmm[1]}" if rmm else "?"
    cmm_s = f"{cmm[0]}.{cmm[1]}" if cmm else "?"
    torch_s = f"torch {report.torch_version}" if report.torch_version else "torch"
    if encoding == "miopen":
        recipe = "miopen-3.5.1" if cmm == (3, 5) else f"a recipe for MIOpen {cmm_s}.x"
        return (
            f"{torch_s} was compiled against MIOpen {ct} but would load {rt}: PyTorch for ROCm requires the same "
            "major.minor, so the first torch.backends.cudnn.version() call (made by every convolution and "
            "batchnorm) raises RuntimeError \"cuDNN version incompatibility: PyTorch was compiled against "
            f"{_as_tuple(compiled)} but found runtime version {_as_tuple(runtime)}\" (later calls return the number "
            f"quietly). To avoid it, build the MIOpen release whose major.minor matches ({cmm_s}.x, e.g. recipe "
            f"{recipe}), or use a torch built against MIOpen {rmm_s}."
        )
    return (
        f"{torch_s} was compiled against cuDNN {ct} but would load {rt}: PyTorch requires the same major and a "
        "runtime minor >= the compile-time minor, else the first torch.backends.cudnn.version() call raises "
        f"RuntimeError \"cuDNN version incompatibility\". Install cuDNN {cmm_s} or a newer {cmm[0] if cmm else '?'}.x, "
        f"or use a torch built against cuDNN {rmm_s}."
    )


def _compatible_versions(runtime, compiled, encoding: str, cuda: bool) -> bool:
    r, c = _mm(runtime), _mm(compiled)
    if r is None or c is None:
        return False
    if r[0] != c[0]:
        return False
    if encoding == "cudnn" and cuda and r[0] >= 7:
        return r[1] >= c[1]
    return r[1] == c[1]


def compatible(artifact_version: str, report: ProbeReport, encoding: str = "miopen") -> Check:
    """Would torch accept a library of ``artifact_version``? (Call BEFORE swapping.)

    Compares the artifact's major.minor with torch's compile-time version (PyTorch's rule, see the
    module docstring). A torch without a compile-time version (CPU build, missing binding) fails.
    """
    compiled = report.compile_version
    expected = f"major.minor {_fmt(_mm(compiled))}" if compiled else "a torch with MIOpen/cuDNN"
    try:
        art = Version(str(artifact_version))
    except InvalidVersion:
        return Check("compatibility", False, expected, f"unparseable version {artifact_version!r}",
                     "the artifact has no usable version; set [source] version in the recipe")
    if compiled is None:
        why = report.errors.get("torch._C._cudnn.getCompileVersion()", "")
        msg = ("no MIOpen/cuDNN in this torch (a CPU-only build?): it has no compile-time library version"
               if report.backend is None else f"torch did not report its compile-time version ({why})")
        return Check("compatibility", False, expected, "unknown", msg)
    ok = _compatible_versions(art, compiled, encoding, bool(report.cuda) and not report.hip)
    if ok:
        return Check("compatibility", True, expected, f"artifact {art} vs compiled {_fmt(compiled)}")
    return Check("compatibility", False, expected, f"artifact {art} vs compiled {_fmt(compiled)}",
                 _incompatibility_message(tuple(art.release[:3]) if len(art.release) >= 3 else art, compiled,
                                          report, encoding))


def judge(
    report: ProbeReport,
    *,
    library: str = "libMIOpen",
    encoding: str = "miopen",
    expect: str | None = None,
    expected_file: Path | None = None,
    smoke: bool = False,
) -> Verdict:
    """Judge a probe report. Every condition is a :class:`Check`; the verdict is ok when all are."""
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}")
    checks: list[Check] = []

    # 1. torch imports
    if report.torch_error:
        checks.append(Check("torch", False, "torch imports", report.torch_error,
                            "the target's torch does not import; fix or install it in that environment"))
        return Verdict(False, tuple(checks), report)
    checks.append(Check("torch", True, "torch imports", f"torch {report.torch_version}"))

    # 2. a torch with MIOpen/cuDNN at all
    if report.backend is None and not report.loaded(_LIBRARY_KIND.get(library, "miopen")):
        checks.append(Check(
            "backend", False, "a ROCm (MIOpen) or CUDA (cuDNN) build of torch",
            f"torch {report.torch_version}: torch.version.hip and torch.version.cuda are both None",
            "no MIOpen/cuDNN in this torch: it is a CPU-only build, so there is no library to verify or replace; "
            "install a ROCm build of PyTorch (e.g. pip install torch --index-url https://download.pytorch.org/whl/rocm6.4)",
        ))
    else:
        backend = "ROCm " + report.hip if report.hip else ("CUDA " + report.cuda if report.cuda else "unknown")
        checks.append(Check("backend", True, "a ROCm (MIOpen) or CUDA (cuDNN) build of torch", backend))

    # 3. exactly one library of that name is mapped
    libs = report.named(library)
    found = ", ".join(lib.path + (" (deleted)" if lib.deleted else "") for lib in libs) or "none loaded"
    if len(libs) == 1:
        checks.append(Check("library", True, f"exactly one {library} loaded", found))
    elif not libs:
        checks.append(Check("library", False, f"exactly one {library} loaded", found,
                            "" if report.backend is None else
                            f"the target process mapped no {library}* file after importing torch: check the "
                            "library name (--library) and that torch's own copy is not missing"))
    else:
        checks.append(Check("library", False, f"exactly one {library} loaded", f"{len(libs)}: {found}",
                            "two copies of the library are mapped into one process (e.g. one through RPATH and "
                            "one through LD_LIBRARY_PATH or a plugin): which one runs is unpredictable; remove "
                            "the stray copy or the LD_LIBRARY_PATH entry"))
    lib = libs[0] if len(libs) == 1 else None

    # 3b. a second HIP runtime (e.g. a new MIOpen pulling /opt/rocm's libamdhip64 beside the copy
    #     a pip wheel bundles in torch/lib) splits the GPU state between two runtimes: fail it
    hips = {(h.dev, h.inode): h for h in report.loaded("hip")}
    if len(hips) > 1:
        checks.append(Check("hip runtime", False, "at most one libamdhip64 loaded",
                            f"{len(hips)}: " + ", ".join(h.path for h in hips.values()),
                            "two HIP runtimes are mapped into one process; the library was probably built against "
                            "another ROCm than the one torch bundles: build against the same ROCm version, or "
                            "point CMAKE_PREFIX_PATH at it"))

    # 4. identity with the file we placed
    if expected_file is not None:
        exp = Path(expected_file)
        try:
            st = os.stat(exp)
            exp_id = (st.st_dev, st.st_ino)
            expected = f"{exp} (device {os.major(st.st_dev)}:{os.minor(st.st_dev)}, inode {st.st_ino})"
        except OSError as exc:
            exp_id, expected = None, f"{exp} ({exc.strerror})"
        if lib is None:
            checks.append(Check("identity", False, expected, found, "cannot check identity: not exactly one loaded"))
        else:
            got = f"{lib.path} (device {os.major(lib.dev)}:{os.minor(lib.dev)}, inode {lib.inode})"
            if exp_id is not None and exp_id == (lib.dev, lib.inode) and not lib.deleted:
                checks.append(Check("identity", True, expected, got))
            else:
                checks.append(Check("identity", False, expected, got,
                                    "the target loads a different file than the one placed there (another path "
                                    "earlier in the search order, or the file was replaced after placing)"))

    # 5. the version
    n = report.effective_version_int(encoding)
    decoded = None
    if n is not None:
        try:
            decoded = decode_version(n, encoding)
        except ValueError:
            decoded = None
    if expect is not None:
        try:
            want = Version(str(expect))
        except InvalidVersion:
            want = None
        if want is None:
            checks.append(Check("version", False, str(expect), _fmt(decoded), f"cannot parse expected version {expect!r}"))
        elif decoded is None:
            why = ("no MIOpen/cuDNN in this torch" if report.backend is None else
                   report.version_error or report.errors.get("torch._C._cudnn.getRuntimeVersion()") or "unknown cause")
            checks.append(Check("version", False, str(want), "unknown", f"torch reported no version integer: {why}"))
        else:
            checks.append(Check("version", decoded == want, str(want), f"{decoded} ({n})",
                                "" if decoded == want else
                                f"the loaded {library} is {decoded}, not {want}; the version integer proves a version, "
                                "not a file (stock ROCm releases report the same number)"))

    # 6. runtime vs compile-time major.minor
    if report.hip or (report.cuda and encoding == "cudnn"):
        runtime, compiled = report.runtime_version, report.compile_version
        if runtime is None or compiled is None:
            checks.append(Check("compatibility", False, "runtime major.minor == compile-time major.minor",
                                f"runtime {_fmt(runtime)}, compiled {_fmt(compiled)}",
                                "torch did not report both versions: " + "; ".join(
                                    f"{k}: {v}" for k, v in report.errors.items() if "_cudnn" in k)))
        else:
            is_cuda = bool(report.cuda) and not report.hip
            ok = _compatible_versions(runtime, compiled, encoding, is_cuda)
            rule = "runtime major.minor == compile-time major.minor" if not is_cuda else \
                "same major, runtime minor >= compile-time minor"
            detail = f"runtime {_fmt(runtime)}, compiled {_fmt(compiled)}"
            if report.version_error:
                detail += f"; first cudnn.version() call raised: {report.version_error}"
                if report.version_int_retry is not None:
                    detail += f"; second call returned {report.version_int_retry}"
            checks.append(Check("compatibility", ok, rule, detail,
                                "" if ok else _incompatibility_message(runtime, compiled, report, encoding)))

    # 7. the smoke test
    if smoke:
        s = report.smoke or {}
        status = s.get("status")
        node = s.get("node")
        if status == "passed":
            checks.append(Check("smoke", True, "BatchNorm2d fwd+bwd on GPU matches CPU",
                                f"passed (node {node})" if node else "passed"))
        elif status == "skipped":
            checks.append(Check("smoke", True, "BatchNorm2d fwd+bwd on GPU matches CPU",
                                f"skipped: {s.get('reason') or 'no GPU'}",
                                "not run: the smoke test needs a GPU; nothing was proven by it", skipped=True))
        else:
            checks.append(Check("smoke", False, "BatchNorm2d fwd+bwd on GPU matches CPU",
                                f"{status or 'not run'}: {s.get('reason', 'the probe returned no smoke result')}",
                                "the library loads but its batchnorm is wrong or crashes on this GPU"))

    return Verdict(all(c.ok for c in checks), tuple(checks), report)


def probe_kind(library: str) -> str:
    """The probe's kind for a library stem ("libMIOpen" -> "miopen")."""
    return _LIBRARY_KIND.get(library, "miopen")


__all__ = [
    "LoadedLibrary", "ProbeReport", "Check", "Verdict", "run_probe", "decode_version", "encode_version",
    "judge", "compatible", "PROBE_SCRIPT", "probe_kind",
]

if __name__ == "__main__":  # pragma: no cover - a debugging aid
    print(run_probe(Path(sys.argv[1] if len(sys.argv) > 1 else sys.executable)))
