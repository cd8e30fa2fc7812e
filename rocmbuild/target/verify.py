"""Verification: judge a probe report as named checks, and say before a swap whether torch would
accept a library version.

:func:`judge` runs one function per check, in the order of docs/verification.md (torch, backend,
library, hip runtime, identity, version, compatibility, smoke); the :class:`Verdict` is ok when
every check is. :func:`compatible` is the compatibility rule applied *before* a swap (artifact
version vs torch's compile-time version).

Decisions:

* The compatibility rule (:func:`rocmbuild.target.versions.compatible_versions`) is applied to
  the tuples from ``getRuntimeVersion()``/``getCompileVersion()``, not to whether the call
  raised, so ``PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1`` in the user's environment does not hide
  a mismatch.
* A torch that does not import stops the judging: no other check can be answered.
* A smoke test asked for but impossible (no GPU) is a non-failing check whose ``found`` says
  ``skipped: no GPU`` and whose ``skipped`` flag is set: it is never reported as passed.
* A torch with neither ``torch.version.hip`` nor ``torch.version.cuda`` is a CPU build: the
  verdict says "no MIOpen/cuDNN in this torch" rather than only "library not loaded".
* :meth:`Verdict.relaxed` turns named failed checks into warnings (an earlier state put back may
  fail a check it failed before rocmbuild changed anything); the checks themselves are kept.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from rocmbuild.target.probe import LoadedLibrary, ProbeReport, probe_kind
from rocmbuild.target.versions import ENCODINGS, as_tuple, compatible_versions, decode_version, major_minor, show


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    expected: str
    found: str
    message: str = ""
    skipped: bool = False  # a check asked for but not possible here (smoke test without a GPU)

    def to_json(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        mark = "skip" if self.skipped else ("ok" if self.ok else "FAIL")
        line = f"[{mark:>4}] {self.name}: expected {self.expected}; found {self.found}"
        return line + (f"\n       {self.message}" if self.message else "")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    checks: tuple[Check, ...]
    report: ProbeReport
    warnings: tuple[Check, ...] = ()  # failed checks that do not count (see relaxed)
    relaxed_for: tuple[str, ...] | None = field(default=None, repr=False)  # the names relaxed() was given

    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok and c not in self.warnings)

    def relaxed(self, warn_only: tuple[str, ...]) -> Verdict:
        """This verdict with the failed checks named in ``warn_only`` as warnings, not failures."""
        names = tuple(dict.fromkeys((*(self.relaxed_for or ()), *warn_only)))
        warnings = tuple(c for c in self.checks if not c.ok and c.name in names)
        ok = all(c.ok for c in self.checks if c.name not in names)
        return Verdict(ok, self.checks, self.report, warnings, names)

    def to_json(self) -> dict:
        out = {
            "ok": self.ok,
            "checks": [c.to_json() for c in self.checks],
            "failures": [c.name for c in self.failures()],
            "report": self.report.summary(),
        }
        if self.relaxed_for is not None:
            out["warnings"] = [c.to_json() for c in self.warnings]
        return out

    def render(self) -> str:
        return "\n".join(c.render() for c in self.checks)


# --------------------------------------------------------------------------------------------
# before a swap


def compatible(artifact_version: str, report: ProbeReport, encoding: str = "miopen") -> Check:
    """Would torch accept a library of ``artifact_version``? (Call BEFORE swapping.)

    Compares the artifact's major.minor with torch's compile-time version (PyTorch's rule, see
    :mod:`rocmbuild.target.versions`). A torch without a compile-time version (CPU build, missing
    binding) fails.
    """
    compiled = report.compile_version
    expected = f"major.minor {show(major_minor(compiled))}" if compiled else "a torch with MIOpen/cuDNN"
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
    found = f"artifact {art} vs compiled {show(compiled)}"
    if compatible_versions(art, compiled, encoding, _is_cuda(report)):
        return Check("compatibility", True, expected, found)
    runtime = tuple(art.release[:3]) if len(art.release) >= 3 else art
    return Check("compatibility", False, expected, found, incompatibility_message(runtime, compiled, report, encoding))


def _is_cuda(report: ProbeReport) -> bool:
    return bool(report.cuda) and not report.hip


def incompatibility_message(runtime, compiled, report: ProbeReport, encoding: str) -> str:
    """Why torch would refuse the library, the error the user would see, and how to avoid it."""
    rt, ct = show(runtime), show(compiled)
    rmm, cmm = major_minor(runtime), major_minor(compiled)
    rmm_s = f"{rmm[0]}.{rmm[1]}" if rmm else "?"
    cmm_s = f"{cmm[0]}.{cmm[1]}" if cmm else "?"
    torch_s = f"torch {report.torch_version}" if report.torch_version else "torch"
    if encoding == "miopen":
        recipe = "miopen-3.5.1" if cmm == (3, 5) else f"a recipe for MIOpen {cmm_s}.x"
        return (
            f"{torch_s} was compiled against MIOpen {ct} but would load {rt}: PyTorch for ROCm requires the same "
            "major.minor, so the first torch.backends.cudnn.version() call (made by every convolution and "
            "batchnorm) raises RuntimeError \"cuDNN version incompatibility: PyTorch was compiled against "
            f"{as_tuple(compiled)} but found runtime version {as_tuple(runtime)}\" (later calls return the number "
            f"quietly). To avoid it, build the MIOpen release whose major.minor matches ({cmm_s}.x, e.g. recipe "
            f"{recipe}), or use a torch built against MIOpen {rmm_s}."
        )
    return (
        f"{torch_s} was compiled against cuDNN {ct} but would load {rt}: PyTorch requires the same major and a "
        "runtime minor >= the compile-time minor, else the first torch.backends.cudnn.version() call raises "
        f"RuntimeError \"cuDNN version incompatibility\". Install cuDNN {cmm_s} or a newer {cmm[0] if cmm else '?'}.x, "
        f"or use a torch built against cuDNN {rmm_s}."
    )


# --------------------------------------------------------------------------------------------
# after a swap: one function per check


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
    torch = check_torch(report)
    if not torch.ok:
        return Verdict(False, (torch,), report)
    libs = report.named(library)
    checks = [torch, check_backend(report, library), check_library(report, library, libs)]
    checks += check_hip_runtime(report)
    if expected_file is not None:
        checks.append(check_identity(Path(expected_file), libs))
    if expect is not None:
        checks.append(check_version(report, library, encoding, expect))
    checks += check_compatibility(report, encoding)
    if smoke:
        checks.append(check_smoke(report))
    return Verdict(all(c.ok for c in checks), tuple(checks), report)


def check_torch(report: ProbeReport) -> Check:
    """1. torch imports."""
    if report.torch_error:
        return Check("torch", False, "torch imports", report.torch_error,
                     "the target's torch does not import; fix or install it in that environment")
    return Check("torch", True, "torch imports", f"torch {report.torch_version}")


def check_backend(report: ProbeReport, library: str) -> Check:
    """2. a torch with MIOpen/cuDNN at all."""
    expected = "a ROCm (MIOpen) or CUDA (cuDNN) build of torch"
    if report.backend is None and not report.loaded(probe_kind(library)):
        return Check(
            "backend", False, expected,
            f"torch {report.torch_version}: torch.version.hip and torch.version.cuda are both None",
            "no MIOpen/cuDNN in this torch: it is a CPU-only build, so there is no library to verify or replace; "
            "install a ROCm build of PyTorch (e.g. pip install torch --index-url https://download.pytorch.org/whl/rocm6.4)",
        )
    backend = "ROCm " + report.hip if report.hip else ("CUDA " + report.cuda if report.cuda else "unknown")
    return Check("backend", True, expected, backend)


def _shown(libs: tuple[LoadedLibrary, ...]) -> str:
    return ", ".join(lib.path + (" (deleted)" if lib.deleted else "") for lib in libs) or "none loaded"


def check_library(report: ProbeReport, library: str, libs: tuple[LoadedLibrary, ...]) -> Check:
    """3. exactly one library of that name is mapped."""
    expected, found = f"exactly one {library} loaded", _shown(libs)
    if len(libs) == 1:
        return Check("library", True, expected, found)
    if not libs:
        return Check("library", False, expected, found,
                     "" if report.backend is None else
                     f"the target process mapped no {library}* file after importing torch: check the "
                     "library name (--library) and that torch's own copy is not missing")
    return Check("library", False, expected, f"{len(libs)}: {found}",
                 "two copies of the library are mapped into one process (e.g. one through RPATH and "
                 "one through LD_LIBRARY_PATH or a plugin): which one runs is unpredictable; remove "
                 "the stray copy or the LD_LIBRARY_PATH entry")


def check_hip_runtime(report: ProbeReport) -> list[Check]:
    """3b. at most one HIP runtime: a second one (e.g. a new MIOpen pulling /opt/rocm's libamdhip64
    beside the copy a pip wheel bundles in torch/lib) splits the GPU state between two runtimes.
    Reported only when it fails."""
    hips = {(h.dev, h.inode): h for h in report.loaded("hip")}
    if len(hips) <= 1:
        return []
    return [Check("hip runtime", False, "at most one libamdhip64 loaded",
                  f"{len(hips)}: " + ", ".join(h.path for h in hips.values()),
                  "two HIP runtimes are mapped into one process; the library was probably built against "
                  "another ROCm than the one torch bundles: build against the same ROCm version, or "
                  "point CMAKE_PREFIX_PATH at it")]


def check_identity(expected_file: Path, libs: tuple[LoadedLibrary, ...]) -> Check:
    """4. the one loaded library is the file we placed (same device and inode, not deleted)."""
    try:
        st = os.stat(expected_file)
        exp_id = (st.st_dev, st.st_ino)
        expected = f"{expected_file} (device {os.major(st.st_dev)}:{os.minor(st.st_dev)}, inode {st.st_ino})"
    except OSError as exc:
        exp_id, expected = None, f"{expected_file} ({exc.strerror})"
    if len(libs) != 1:
        return Check("identity", False, expected, _shown(libs), "cannot check identity: not exactly one loaded")
    lib = libs[0]
    got = f"{lib.path} (device {os.major(lib.dev)}:{os.minor(lib.dev)}, inode {lib.inode})"
    if exp_id is not None and exp_id == (lib.dev, lib.inode) and not lib.deleted:
        return Check("identity", True, expected, got)
    return Check("identity", False, expected, got,
                 "the target loads a different file than the one placed there (another path "
                 "earlier in the search order, or the file was replaced after placing)")


def check_version(report: ProbeReport, library: str, encoding: str, expect: str) -> Check:
    """5. the decoded version integer equals the expected version."""
    n = report.effective_version_int(encoding)
    decoded = None
    if n is not None:
        try:
            decoded = decode_version(n, encoding)
        except ValueError:
            decoded = None
    try:
        want = Version(str(expect))
    except InvalidVersion:
        return Check("version", False, str(expect), show(decoded), f"cannot parse expected version {expect!r}")
    if decoded is None:
        why = ("no MIOpen/cuDNN in this torch" if report.backend is None else
               report.version_error or report.errors.get("torch._C._cudnn.getRuntimeVersion()") or "unknown cause")
        return Check("version", False, str(want), "unknown", f"torch reported no version integer: {why}")
    return Check("version", decoded == want, str(want), f"{decoded} ({n})",
                 "" if decoded == want else
                 f"the loaded {library} is {decoded}, not {want}; the version integer proves a version, "
                 "not a file (stock ROCm releases report the same number)")


def check_compatibility(report: ProbeReport, encoding: str) -> list[Check]:
    """6. runtime vs compile-time major.minor (on ROCm, or on CUDA when judging cuDNN)."""
    if not (report.hip or (report.cuda and encoding == "cudnn")):
        return []
    runtime, compiled = report.runtime_version, report.compile_version
    detail = f"runtime {show(runtime)}, compiled {show(compiled)}"
    if runtime is None or compiled is None:
        return [Check("compatibility", False, "runtime major.minor == compile-time major.minor", detail,
                      "torch did not report both versions: " + "; ".join(
                          f"{k}: {v}" for k, v in report.errors.items() if "_cudnn" in k))]
    is_cuda = _is_cuda(report)
    ok = compatible_versions(runtime, compiled, encoding, is_cuda)
    rule = ("same major, runtime minor >= compile-time minor" if is_cuda else
            "runtime major.minor == compile-time major.minor")
    if report.version_error:
        detail += f"; first cudnn.version() call raised: {report.version_error}"
        if report.version_int_retry is not None:
            detail += f"; second call returned {report.version_int_retry}"
    return [Check("compatibility", ok, rule, detail,
                  "" if ok else incompatibility_message(runtime, compiled, report, encoding))]


def check_smoke(report: ProbeReport) -> Check:
    """7. the smoke test passed; skipped (no GPU) is not a failure but is never reported as passed."""
    s = report.smoke or {}
    status, node = s.get("status"), s.get("node")
    expected = "BatchNorm2d fwd+bwd on GPU matches CPU"
    if status == "passed":
        return Check("smoke", True, expected, f"passed (node {node})" if node else "passed")
    if status == "skipped":
        return Check("smoke", True, expected, f"skipped: {s.get('reason') or 'no GPU'}",
                     "not run: the smoke test needs a GPU; nothing was proven by it", skipped=True)
    return Check("smoke", False, expected,
                 f"{status or 'not run'}: {s.get('reason', 'the probe returned no smoke result')}",
                 "the library loads but its batchnorm is wrong or crashes on this GPU")
