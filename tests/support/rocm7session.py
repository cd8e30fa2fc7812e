"""One test session inside a ROCm 7 root: an overlay over the root (the root itself is never
written), rocmbuild installed from this checkout into a venv inside, fake-torch venvs inside that
load a given libMIOpen, and teardown that leaves nothing mounted or running.

Decisions:
* The root is the lowest layer of an overlay mount in a temp dir; the session writes only to its
  upper dir. So the cached small root, or a user's full root (``ROCMBUILD_TEST_ROCM7_ROOT``), stays
  as it was, and two sessions never meet in it.
* rocmbuild's dependencies (``[project] dependencies`` and the build backend of pyproject.toml) are
  installed once into ``/opt/rocmbuild`` in a cached layer, keyed by the root, its Python and that
  list (``~/.cache/rocmbuild-tests/rocm7-venv/<key>``, made in a temp dir under a lock and
  renamed; layers of older keys are not removed: another session may have one mounted); the layer
  sits between the root and the session's upper dir. Each session copies this checkout in and
  runs ``pip install --no-deps --no-index --no-build-isolation`` (offline, seconds).
* The fake torch is tests/support/fake_torch.py, as everywhere else; its ``load`` is the path
  inside the root. The real ``miopenGetVersion`` answers through ctypes, as in
  ``torch.backends.cudnn.version()``.
* Stand-in "stock" libraries (only ``miopenGetVersion``) are compiled on the host with ``cc``: the
  small root has no compiler, and they need nothing from libc.
* The work dir (overlay upper, mount point) is ``$TMPDIR/rocmbuild-rocm7-<pid>-*``, outside
  pytest's basetemp: concurrent pytest sessions rename and remove each other's old basetemps.
* Teardown kills (by pid) every process whose root is the session's overlay, unmounts in reverse
  order and checks /proc/self/mountinfo: a mount left behind fails the session.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path

from tests.support.fake_torch import DEFAULT_KNOBS, write_torch
from tests.support.rocm7root import (Mounts, RootError, _run, cache_root, chroot_argv, locked, mounts_below, overlay,
                                     read_stamp, remove_stale, remove_tree)

REPO = Path(__file__).resolve().parents[2]
VENV = "/opt/rocmbuild"
COPY = ("pyproject.toml", "README.md", "rocmbuild", "recipes", "patches")
STANDIN_C = r"""
#include <stddef.h>
/* A stand-in libMIOpen: only the version call, answering what -D MIOPEN_STANDIN_{MAJOR,MINOR,PATCH} say */
int miopenGetVersion(size_t *major, size_t *minor, size_t *patch)
{
    *major = MIOPEN_STANDIN_MAJOR; *minor = MIOPEN_STANDIN_MINOR; *patch = MIOPEN_STANDIN_PATCH;
    return 0;
}
"""


def build_standin(out: Path, version: str) -> Path:
    """A tiny shared library (SONAME libMIOpen.so.1) whose miopenGetVersion answers ``version``,
    compiled on the host (it needs nothing from libc, so it loads in any newer root)."""
    major, minor, patch = version.split(".")
    src = out.with_suffix(".c")
    src.write_text(STANDIN_C)
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RootError("no C compiler (cc) on the host for the stand-in libMIOpen")
    _run([cc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libMIOpen.so.1", f"-DMIOPEN_STANDIN_MAJOR={major}",
          f"-DMIOPEN_STANDIN_MINOR={minor}", f"-DMIOPEN_STANDIN_PATCH={patch}", "-o", str(out), str(src)],
         "compiling the stand-in libMIOpen")
    return out


def session_dir() -> Path:
    """A new work dir for a session, ``$TMPDIR/rocmbuild-rocm7-<pid>-XXXX``: never under pytest's
    basetemp, which a concurrent pytest may rename and remove while mounts are under it. Work dirs
    of sessions whose process is gone are removed first (unmounted, then deleted)."""
    base = Path(tempfile.gettempdir())
    for old in base.glob("rocmbuild-rocm7-*-*"):
        pid = old.name.split("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            remove_tree(old)  # a killed session's: unmounted first
    return Path(tempfile.mkdtemp(prefix=f"rocmbuild-rocm7-{os.getpid()}-", dir=base))


def _deps() -> list[str]:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    return sorted(meta["build-system"]["requires"]) + sorted(meta["project"]["dependencies"])


def run_in(root: Path, argv: list[str], *, timeout: float = 600, env: dict[str, str] | None = None):
    """``argv`` inside ``root`` (chroot, fixed environment), in its own process group, killed on timeout."""
    p = subprocess.Popen(chroot_argv(root, argv, env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise RootError(f"{argv} did not finish within {timeout} s inside {root}") from None
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def run_checked(root: Path, argv: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    r = run_in(root, argv, **kw)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-25:])
        raise RootError(f"{what} failed inside the root (exit {r.returncode}): {' '.join(argv)}\n{tail}")
    return r


def deps_layer(lower: Path, log=print) -> Path:
    """The cached overlay layer holding /opt/rocmbuild with rocmbuild's dependencies for the root
    ``lower`` (made when missing: pip inside the root, from PyPI); returns its dir."""
    lower = Path(lower).resolve()
    py = os.readlink(lower / "usr/bin/python3") if (lower / "usr/bin/python3").is_symlink() else "python3"
    stamp = read_stamp(lower) or {}
    key = hashlib.sha256(json.dumps([str(lower), py, stamp.get("packages"), _deps()]).encode()).hexdigest()[:16]
    layer = cache_root() / "rocm7-venv" / key
    if (layer / "ready").exists():
        return layer / "upper"
    with locked(layer.with_name(key + ".lock")):
        if (layer / "ready").exists():
            return layer / "upper"  # made by another session while this one waited
        remove_stale(layer.parent, key + ".tmp-*", log)
        log(f"installing rocmbuild's dependencies into a venv for {lower} (cached in {layer}) ...")
        tmp = layer.with_name(f"{key}.tmp-{os.getpid()}")
        merged = tmp / "merged"
        try:
            with Mounts(merged) as m:
                overlay(m, [lower], tmp / "upper", tmp / "work")
                run_checked(merged, ["python3", "-m", "venv", VENV], "making the venv for rocmbuild")
                run_checked(merged, [f"{VENV}/bin/pip", "install", "-q", "--no-cache-dir", "--disable-pip-version-check",
                                     *_deps()], "pip install of rocmbuild's dependencies", timeout=900)
            shutil.rmtree(tmp / "work")
            merged.rmdir()
            (tmp / "ready").write_text(json.dumps({"root": str(lower), "python": py, "deps": _deps()}) + "\n")
            remove_tree(layer)
            os.replace(tmp, layer)
        except BaseException:
            remove_tree(tmp)
            raise
    return layer / "upper"


class RootSession:
    def __init__(self, lower: Path, work: Path, *, full: bool, log=print):
        self.lower = Path(lower).resolve()
        self.work = Path(work)
        self.full = full
        self.log = log
        self.merged = self.work / "merged"
        self.mounts = Mounts(self.merged)
        self.facts: dict = {}
        self.canaries: dict = {}
        self.standins: dict = {}

    def start(self) -> RootSession:
        t0 = time.monotonic()
        layer = deps_layer(self.lower, self.log)
        try:
            overlay(self.mounts, [layer, self.lower], self.work / "upper", self.work / "ovl-work")
            src = self.merged / "src" / "rocmbuild"
            src.mkdir(parents=True)
            for name in COPY:
                p = REPO / name
                if p.is_dir():
                    shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    shutil.copy2(p, src / name)
            self.run_checked([f"{VENV}/bin/pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                              "--no-cache-dir", "--disable-pip-version-check", "/src/rocmbuild"],
                             "pip install of rocmbuild from this checkout", timeout=600)
        except BaseException:
            self.close()
            raise
        self.log(f"rocmbuild installed in {self.lower} (overlay) in {time.monotonic() - t0:.0f} s")
        return self

    def _ours(self) -> list[int]:
        base = os.path.realpath(self.merged)
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if os.readlink(d / "root") == base:
                        pids.append(int(d.name))
                except OSError:
                    continue
        return pids

    def close(self) -> None:
        for pid in self._ours():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self._ours() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.mounts.close()
        if mounts_below(self.work):
            raise RootError(f"mounts left below {self.work}")

    # -- running inside -----------------------------------------------------------------------
    def run(self, argv: list[str], *, timeout: float = 600, env: dict[str, str] | None = None):
        return run_in(self.merged, argv, timeout=timeout, env=env)

    def run_checked(self, argv: list[str], what: str, **kw) -> subprocess.CompletedProcess:
        return run_checked(self.merged, argv, what, **kw)

    def rb(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """``rocmbuild ARGS`` inside the root, with a private ROCMBUILD_HOME per session."""
        return self.run([f"{VENV}/bin/rocmbuild", *args], timeout=timeout,
                        env={"ROCMBUILD_HOME": "/root/rocmbuild-home", "NO_COLOR": "1", "COLUMNS": "200"})

    def host(self, inner: str) -> Path:
        """The host path of ``inner`` (an absolute path inside the root)."""
        return self.merged / inner.lstrip("/")

    # -- fake-torch envs ------------------------------------------------------------------------
    def make_env(self, name: str, library: Path, compile_version: str, extra_libs: tuple[str, ...] = ()) -> str:
        """A venv ``/envs/NAME`` in the wheel layout: its fake torch loads ``torch/lib/libMIOpen.so``,
        a copy of ``library`` (a host path), then ``extra_libs`` (paths inside the root). Returns the
        prefix inside the root."""
        prefix = f"/envs/{name}"
        self.run_checked(["python3", "-m", "venv", "--without-pip", prefix], f"making the venv {prefix}")
        (site,) = self.host(prefix).glob("lib/python3*/site-packages")
        lib = site / "torch" / "lib" / "libMIOpen.so"
        lib.parent.mkdir(parents=True)
        shutil.copyfile(library, lib)
        knobs = dict(DEFAULT_KNOBS, compile_version=compile_version, hip="7.0.51831", torch_version="2.9.1+rocm7.0",
                     load="/" + str(lib.relative_to(self.merged)), extra_libs=list(extra_libs))
        write_torch(site / "torch", knobs)
        return prefix

    def torch_version_int(self, prefix: str) -> int | str:
        """What ``torch.backends.cudnn.version()`` returns in the env (asked directly, not through
        rocmbuild); the RuntimeError's first line when the first call raises."""
        code = ("import json, torch\ntry:\n    v = torch.backends.cudnn.version()\n"
                "except RuntimeError as e:\n    v = str(e).splitlines()[0]\nprint(json.dumps(v))")
        r = self.run_checked([f"{prefix}/bin/python", "-c", code], "asking the env's torch")
        return json.loads(r.stdout.strip().splitlines()[-1])
