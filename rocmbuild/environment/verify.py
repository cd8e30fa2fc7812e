"""Verification: judge a probe report as named checks, and say before a swap whether torch would
accept a library version.

:func:`judge` runs one function per check, in the order of docs/verification.md (torch, backend,
library, hip runtime, identity, version, compatibility, smoke); the :class:`Verdict` is ok when
every check is. :func:`compatible` is the compatibility rule applied *before* a swap (artifact
version vs torch's compile-time version).

Decisions:

* The compatibility rule (:func:`rocmbuild.environment.versions.compatible_versions`) is applied to
  the tuples from ``getRuntimeVersion()``/``getCompileVersion()``, not to whether the call
  raised, so ``PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1`` in the user's environment does not hide
  a mismatch.
* A torch that does not import stops the judging: no other check can be answered.
* Library and encoding follow the backend the probe found unless given (:func:`choose`); a
  contradiction (``--encoding miopen`` on a cuDNN set or a CUDA torch) is refused (exit 2).
* A library set (``libcudnn*``) is judged per SONAME: one file per SONAME mapped, and identity for
  every mapped member (each must be one of the files placed).
* The version is the process's: the integer ``torch.backends.cudnn.version()`` returns on its
  second call, never a file name nor a number computed from the runtime tuple.
* Each smoke-suite check asked for but impossible (no GPU) is a non-failing check whose ``found``
  says ``skipped: no GPU`` and whose ``skipped`` flag is set: it is never reported as passed.
* A torch with neither ``torch.version.hip`` nor ``torch.version.cuda`` is a CPU build: the
  verdict says "no MIOpen/cuDNN in this torch" rather than only "library not loaded".
* :meth:`Verdict.relaxed` turns named failed checks into warnings (an earlier state put back may
  fail a check it failed before rocmbuild changed anything); the checks themselves are kept.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from packaging.version import InvalidVersion, Version

from rocmbuild.errors import InputError
from rocmbuild.environment.smoke import check_smoke
from rocmbuild.results.verdict import Check, Verdict
from rocmbuild.environment.probe import BACKEND_LIBRARY, LoadedLibrary, ProbeReport, is_set, probe_kind
from rocmbuild.environment.versions import (ENCODINGS, as_tuple, compatible_versions, decode_version, encode_version,
                                       major_minor, show)


# --------------------------------------------------------------------------------------------
# before a swap


def compatible(artifact_version: str, report: ProbeReport, encoding: str = "miopen") -> Check:
    """Would torch accept a library of ``artifact_version``? (Call BEFORE swapping.)

    Compares the artifact's major.minor with torch's compile-time version (PyTorch's rule, see
    :mod:`rocmbuild.environment.versions`). A torch without a compile-time version (CPU build, missing
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
        names = recipes_for("miopen", compiled)
        fits = (f"e.g. the recipe {names[-1]}: `rocmbuild apply {names[-1]}`" if names
                else f"none of the recipes found builds one: write a recipe for MIOpen {cmm_s}.x, starting "
                     "from a bundled one (`rocmbuild show miopen-3.5.1` prints it)")
        return (
            f"{torch_s} was compiled against MIOpen {ct} but would load {rt}: PyTorch for ROCm requires the same "
            "major.minor, so the first torch.backends.cudnn.version() call (made by every convolution and "
            "batchnorm) raises RuntimeError \"cuDNN version incompatibility: PyTorch was compiled against "
            f"{as_tuple(compiled)} but found runtime version {as_tuple(runtime)}\" (later calls return the number "
            f"quietly). To avoid it, build an MIOpen {cmm_s}.x ({fits}), or use a torch built against MIOpen {rmm_s}."
        )
    return (
        f"{torch_s} was compiled against cuDNN {ct} but would load {rt}: PyTorch requires the same major and a "
        "runtime minor >= the compile-time minor, else the first torch.backends.cudnn.version() call raises "
        f"RuntimeError \"cuDNN version incompatibility\". Install cuDNN {cmm_s} or a newer {cmm[0] if cmm else '?'}.x, "
        f"or use a torch built against cuDNN {rmm_s}."
    )


def recipes_for(encoding: str, compiled) -> list[str]:
    """The recipes found on the default search path whose name says they build a library this
    torch loads (``miopen-M.m...``; ``cudnn-M....``), sorted: a message names only recipes that
    exist. An unreadable recipe directory gives none rather than hiding the refusal."""
    import re

    from rocmbuild import recipe

    mm = major_minor(compiled)
    if mm is None:
        return []
    pattern = (rf"cudnn-{mm[0]}\." if encoding == "cudnn" else rf"miopen-{mm[0]}\.{mm[1]}(\.|-|$)")
    try:
        return sorted(name for name, _ in recipe.available(()) if re.match(pattern, name))
    except OSError:
        return []


# --------------------------------------------------------------------------------------------
# after a swap: one function per check


def choose(report: ProbeReport, library: str | None = None, encoding: str | None = None) -> tuple[str, str]:
    """The library and encoding to judge: from the backend the probe found unless given (ROCm torch:
    ``libMIOpen``/``miopen``, CUDA torch: ``libcudnn*``/``cudnn``); a contradiction is an InputError."""
    backend, given = report.backend, f"--encoding {encoding}" if encoding else f"--library {library}"
    if library is None:
        library = BACKEND_LIBRARY[encoding or backend or "miopen"]
    kind = probe_kind(library)
    if encoding is None:
        encoding = kind if kind in ENCODINGS else (backend or "miopen")
    hint = ("leave out the encoding (--encoding, or the recipe's [verify] encoding): it follows the library "
            "and the backend torch was built for")
    if kind in ENCODINGS and encoding != kind:
        raise InputError(f"the encoding {encoding} (--encoding, or the recipe's [verify] encoding) cannot decode "
                         f"{library}: its version integer is a {kind} number",
                         hint + f", or pass --encoding {kind}")
    if backend is not None and encoding != backend:
        build = "ROCm" if backend == "miopen" else "CUDA"
        raise InputError(f"this torch is a {build} build: torch.backends.cudnn.version() is a {backend} number, "
                         f"{given} would misread it",
                         hint + f"; for this torch: --library {BACKEND_LIBRARY[backend]} --encoding {backend}")
    return library, encoding


def judge(
    report: ProbeReport,
    *,
    library: str | None = None,
    encoding: str | None = None,
    expect: str | None = None,
    expected_file: Path | Iterable[Path] | None = None,
    smoke: bool = False,
    links: Iterable[Path] = (),
) -> Verdict:
    """Judge a probe report. Every condition is a :class:`Check`; the verdict is ok when all are.

    ``library``/``encoding`` default to the backend's (:func:`choose`); ``expected_file`` is the
    file placed, or every file of a library set placed; ``links`` the names of the target's chain
    that must resolve to one of them."""
    if library is None or encoding is None:
        library, encoding = choose(report, library, encoding)
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}")
    torch = check_torch(report)
    if not torch.ok:
        return Verdict(False, (torch,), report)
    libs = report.named(library)
    checks = [torch, check_backend(report, library), check_library(report, library, libs)]
    checks += check_hip_runtime(report)
    if expected_file is not None:
        files = (expected_file,) if isinstance(expected_file, (str, os.PathLike)) else tuple(expected_file)
        checks.append(check_identity(tuple(Path(f) for f in files), libs, library))
        links = tuple(links)
        if links:
            checks.append(check_links(links, files))
    if expect is not None:
        checks.append(check_version(report, library, encoding, expect))
    checks += check_compatibility(report, encoding)
    if smoke:
        checks += check_smoke(report)
    return Verdict(all(c.ok for c in checks), tuple(checks), report)


def check_links(links: tuple[Path, ...], files: Iterable[Path]) -> Check:
    """4b. every name of the target's chain resolves to a placed file (none dangling, none to another file)."""
    placed = {os.path.realpath(f) for f in files}
    bad = [f"{ln} -> {os.path.realpath(ln) if os.path.exists(ln) else 'nothing (dangling)'}"
           for ln in links if not os.path.exists(ln) or os.path.realpath(ln) not in placed]
    expected = f"{len(links)} name(s) of the chain resolving to the placed file(s)"
    if not bad:
        return Check("links", True, expected, "every name resolves to a placed file")
    return Check("links", False, expected, "; ".join(bad),
                 "a name of the library's chain no longer leads to the file placed: a program loading it by that "
                 "name gets another library (or none); `rocmbuild status` shows the links")


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


def duplicates(libs: tuple[LoadedLibrary, ...]) -> dict[str, list[LoadedLibrary]]:
    """SONAMEs mapped from more than one file (a set's members each have their own SONAME)."""
    by: dict[str, list[LoadedLibrary]] = {}
    for lib in libs:
        by.setdefault(lib.soname, []).append(lib)
    return {k: v for k, v in by.items() if len(v) > 1}


def check_library(report: ProbeReport, library: str, libs: tuple[LoadedLibrary, ...]) -> Check:
    """3. exactly one library of that name is mapped; for a set (``libcudnn*``) one file per SONAME."""
    expected, found = (f"one file per SONAME of {library} loaded" if is_set(library)
                       else f"exactly one {library} loaded"), _shown(libs)
    dups = duplicates(libs) if is_set(library) and len(libs) > 1 else ({library: list(libs)} if len(libs) > 1 else {})
    if libs and not dups:
        return Check("library", True, expected, found)
    if not libs:
        return Check("library", False, expected, found,
                     "" if report.backend is None else
                     f"the target process mapped no {library}* file after importing torch: check the "
                     "library name (--library) and that torch's own copy is not missing")
    shown = "; ".join(f"{len(v)} of {k}: {_shown(tuple(v))}" for k, v in dups.items())
    return Check("library", False, expected, shown if is_set(library) else f"{len(libs)}: {found}",
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


def _ident(path, dev: int, ino: int) -> str:
    return f"{path} (device {os.major(dev)}:{os.minor(dev)}, inode {ino})"


def check_identity(expected_files: tuple[Path, ...], libs: tuple[LoadedLibrary, ...], library: str = "") -> Check:
    """4. every mapped member is a file that was placed (same device and inode, not deleted); for a
    single library, the one loaded is the file placed."""
    want: dict[tuple[int, int], Path] = {}
    shown = []
    for f in expected_files:
        try:
            st = os.stat(f)
            want[(st.st_dev, st.st_ino)] = f
            shown.append(_ident(f, st.st_dev, st.st_ino))
        except OSError as exc:
            shown.append(f"{f} ({exc.strerror})")
    expected = "; ".join(shown) if len(shown) != 1 else shown[0]
    # one file mapped has no duplicate: its SONAME (an ELF read) is needed only beside another
    if not libs or (not is_set(library) and len(libs) != 1) or (len(libs) > 1 and duplicates(libs)):
        return Check("identity", False, expected, _shown(libs), "cannot check identity: not exactly one loaded"
                     + (" per SONAME" if is_set(library) else ""))
    got = "; ".join(_ident(lib.path, lib.dev, lib.inode) for lib in libs)
    strangers = [lib for lib in libs if lib.deleted or (lib.dev, lib.inode) not in want]
    if not strangers:
        return Check("identity", True, expected, got)
    return Check("identity", False, expected, got,
                 "the target loads a different file than the one placed there (another path "
                 "earlier in the search order, or the file was replaced after placing)"
                 + (": " + ", ".join(lib.path for lib in strangers) if len(libs) > 1 else ""))


def _answered_by(report: ProbeReport, encoding: str) -> str:
    """cuDNN 9's cudnnGetVersion is answered by libcudnn_graph, not libcudnn: name the file."""
    if encoding != "cudnn":
        return ""
    graph = report.named("libcudnn_graph")
    return f"; answered by {graph[0].path}" if graph else ""


def check_version(report: ProbeReport, library: str, encoding: str, expect: str) -> Check:
    """5. the user's call is the judge: ``torch.backends.cudnn.version()`` returns the expected
    integer on its SECOND call (the first may raise torch's compatibility error; both are reported)."""
    try:
        want = Version(str(expect))
    except InvalidVersion:
        return Check("version", False, str(expect), "unknown", f"cannot parse expected version {expect!r}")
    n = report.version_int_retry
    first = (f"first call raised {report.version_error}" if report.version_error else
             f"first call returned {report.version_int}")
    if n is None:
        second = report.errors.get("torch.backends.cudnn.version() (second call)", "returned None")
        why = "no MIOpen/cuDNN in this torch" if report.backend is None else f"{first}; second call {second}"
        return Check("version", False, f"{want} ({encode_version(want, encoding)})", "unknown",
                     f"torch.backends.cudnn.version() did not return the version integer: {why}")
    try:
        decoded = decode_version(n, encoding)
    except ValueError:
        decoded = None
    found = f"{decoded} ({n})" + (f"; {first}" if report.version_error else "") + _answered_by(report, encoding)
    ok = decoded == want
    return Check("version", ok, str(want), found,
                 "" if ok else
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
