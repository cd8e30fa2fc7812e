"""A small Debian sid root holding real MIOpen bytes for tests/real/test_rocm7.py, and the
mounts and chroot calls that run programs inside a root.

The root (about 1.5 GB) holds sid's Python (python3, -venv, -pip), the runtime the real MIOpen 3.5.1
of Debian experimental needs to load (the dependencies of ``libmiopen1 7.2.4+dfsg-1``: HIP 7,
rocBLAS 5, comgr; not the package itself, nor its 800 MB ``libmiopen-tests-data``) and both
``libmiopen1`` packages as ``.deb`` files in ``/debs``: 7.2.4+dfsg-1 (MIOpen 3.5.1 with the gfx115x
batch-norm fix) and 6.4.3+dfsg-1+b1 (MIOpen 3.4.0 without it). The runtime of 3.4.0 (sid's rocBLAS
4, 4 GB) is left out: there the 3.4.0 ``.deb`` serves by its bytes; only sid's HIP 6 runtime
(``libamdhip64-6``, 26 MB) is there, for a torch of ROCm 6. No MIOpen is installed in the root: the
only libMIOpen files are the ones the tests place.

Decisions:
* Made with ``mmdebstrap --variant=apt`` (installed with apt-get when missing) from sid and
  experimental, ``Acquire::Check-Valid-Until "false"`` (the archive's snapshot may be older than
  its Valid-Until), then ``apt-get install -t experimental`` of the ``Depends`` of ``libmiopen1=7.2.4+dfsg-1``
  inside (apt's solver takes no dependency from experimental unless told so), ``apt-get download``
  of both packages, ``apt-get clean``; the 3.5.1 library is then loaded once (``miopenGetVersion``
  must say 3.5.1), so a root whose runtime misses a library is never stamped done. apt's
  lists stay (an ``apt:`` archive inside the root needs them).
* Cached at ``$XDG_CACHE_HOME/rocmbuild-tests/rocm7-root`` (else ``~/.cache``), made once: built in
  ``rocm7-root.tmp-<pid>`` and renamed into place after the stamp ``.rocmbuild-root.json`` (what it
  holds, how long it took, how big it is) was written, so a killed run never leaves a root that
  looks done. A leftover temp dir is removed by the next run, after unmounting what is mounted
  below it (a removal never descends into a mount: a bound /dev would be the host's).
* Programs run with ``chroot ROOT /usr/bin/env -i`` and a fixed environment (the host's CA bundle
  copied in for pip); /proc and /dev are mounted by :class:`Mounts`, which unmounts in reverse
  order and checks /proc/self/mountinfo that nothing stays mounted. /dev is a private tmpfs with
  null, zero, full, random, urandom and tty, never a bind of the host's /dev: a tree removal that
  reached it (pytest's cleanup of a basetemp another session renamed did) would empty the host's.
* CLI (as root): ``python3 -m tests.support.rocm7root make`` makes (or finds) the cached root and
  prints its path; ``... run [--root DIR] CMD ARGS...`` runs a command inside a root, on an overlay
  in a temp dir (the root is not written; what the command writes is discarded), and unmounts.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIOPEN_NEW = "7.2.4+dfsg-1"  # MIOpen 3.5.1, with the gfx115x fix (experimental)
MIOPEN_OLD = "6.4.3+dfsg-1+b1"  # MIOpen 3.4.0, without it (sid)
DEBS = {"3.5.1": f"libmiopen1_{MIOPEN_NEW}_amd64.deb", "3.4.0": f"libmiopen1_{MIOPEN_OLD}_amd64.deb"}
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ["ca-certificates", "python3", "python3-venv", "python3-pip"]
HIP6 = "libamdhip64-6"  # sid's HIP 6 runtime (26 MB): a ROCm 6 torch's libamdhip64.so.6, to refuse a ROCm 7 library
STAMP = ".rocmbuild-root.json"
ROOT_FORMAT = 3  # bump when what the root holds changes: the cached one is then made anew
PATH = "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CA_IN_ROOT = "/etc/ssl/certs/host-ca-bundle.crt"
DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0))


class RootError(Exception):
    """The root cannot be made or used; the message says why and what was run."""


def cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "rocmbuild-tests"


def small_root_dir() -> Path:
    return cache_root() / "rocm7-root"


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape") if "\\" in field else field


def mounts_below(path: Path) -> list[Path]:
    """Mount points at or below ``path`` (per /proc/self/mountinfo), deepest first."""
    base = os.path.realpath(path)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape(line.split()[4])
        if point == base or point.startswith(base.rstrip("/") + "/"):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def _run(argv: list[str], what: str, timeout: float = 3600, log=None) -> subprocess.CompletedProcess:
    if log:
        log(f"$ {' '.join(argv)}")
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise RootError(f"{what}: did not finish within {timeout:.0f} s: {' '.join(argv)}") from None
    except OSError as exc:
        raise RootError(f"{what}: cannot run {argv[0]}: {exc}") from None
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-25:])
        raise RootError(f"{what} failed (exit {r.returncode}): {' '.join(argv)}\n{tail}")
    return r


def unmount_all(path: Path) -> None:
    """Unmount everything at or below ``path``, deepest first (lazily when busy); raises when a
    mount stays."""
    for point in mounts_below(path):
        if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], capture_output=True)
    left = mounts_below(path)
    if left:
        raise RootError(f"still mounted below {path}: {', '.join(map(str, left))}")


def remove_tree(path: Path) -> None:
    """``rm -rf path``, never through a mount point (unmounted first, or refused)."""
    if os.path.lexists(path):
        unmount_all(path)
        shutil.rmtree(path)


class Mounts:
    """Mounts made for a root; :meth:`close` unmounts them (only them: a shared root may carry
    mounts of others) in reverse order, lazily when busy."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.points: list[Path] = []

    def mount(self, argv_tail: list[str], point: Path) -> None:
        point.mkdir(parents=True, exist_ok=True)
        _run(["mount", *argv_tail, str(point)], f"mounting {point}")
        self.points.append(point)

    def system(self) -> None:
        """/proc, and a private /dev (a small tmpfs with the usual character devices): never a bind
        of the host's /dev, which anything removing the root's tree would empty."""
        self.mount(["-t", "proc", "proc"], self.root / "proc")
        dev = self.root / "dev"
        self.mount(["-t", "tmpfs", "-o", "mode=0755,size=1m,nosuid", "rocmbuild-dev"], dev)
        for name, major, minor in DEVICES:
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            os.chmod(dev / name, 0o666)
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx")):
            os.symlink(target, dev / name)
        (dev / "pts").mkdir()
        (dev / "shm").mkdir()
        os.chmod(dev / "shm", 0o1777)

    def close(self) -> None:
        errors = []
        for point in reversed(self.points):
            r = subprocess.run(["umount", str(point)], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f"{point}: {r.stderr.strip()}")
                subprocess.run(["umount", "-l", str(point)], capture_output=True)
        self.points.clear()
        if errors:
            raise RootError("unmounting needed a lazy umount: " + "; ".join(errors))

    def __enter__(self) -> Mounts:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def overlay(mounts: Mounts, lowers: list[Path], upper: Path, work: Path) -> None:
    """Mount an overlay of ``lowers`` (first = top) with ``upper`` at ``mounts.root``, then /proc and
    /dev inside, and the host's resolv.conf and CA bundle (into the upper dir): the lowers are
    never written."""
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    lowerdir = ":".join(str(p) for p in lowers)
    mounts.mount(["-t", "overlay", "overlay", "-o", f"lowerdir={lowerdir},upperdir={upper},workdir={work}"], mounts.root)
    mounts.system()
    prepare_network(mounts.root)


def chroot_argv(root: Path, argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    """``chroot root env -i ... argv`` with the fixed environment (plus ``env``)."""
    base = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
    if (Path(root) / CA_IN_ROOT.lstrip("/")).exists():
        base.update(PIP_CERT=CA_IN_ROOT, SSL_CERT_FILE=CA_IN_ROOT)
    base.update(env or {})
    return ["chroot", str(root), "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in base.items()), *argv]


def prepare_network(root: Path) -> None:
    """The host's resolv.conf and CA bundle inside the root (apt and pip reach the network)."""
    for src, dst in (("/etc/resolv.conf", "etc/resolv.conf"), ("/etc/ssl/certs/ca-certificates.crt", CA_IN_ROOT)):
        target = Path(root) / dst.lstrip("/")
        if Path(src).exists() and target.parent.is_dir():
            if target.is_symlink():
                target.unlink()
            shutil.copyfile(src, target)


def in_root(root: Path, argv: list[str], what: str, timeout: float = 3600, log=None) -> subprocess.CompletedProcess:
    return _run(chroot_argv(root, argv), what, timeout, log)


def _du(path: Path) -> int:
    r = subprocess.run(["du", "-sxb", str(path)], capture_output=True, text=True)
    return int(r.stdout.split()[0]) if r.returncode == 0 and r.stdout else 0


def runtime_of(shown: str) -> list[str]:
    """The packages of ``Depends`` in ``apt-cache show`` output (first alternative each), less the
    800 MB ``libmiopen-tests-data`` (test data: loading the library does not need it)."""
    for line in shown.splitlines():
        if line.startswith("Depends:"):
            names = [d.split("|")[0].split("(")[0].strip() for d in line[len("Depends:"):].split(",")]
            return [n for n in names if n and n != "libmiopen-tests-data"]
    raise RootError(f"no Depends in apt-cache show libmiopen1={MIOPEN_NEW}")


def build_root(dest: Path, log=print) -> dict:
    """Make the small root at ``dest`` (which must not exist); returns what the stamp records."""
    start = time.monotonic()
    if shutil.which("mmdebstrap") is None:
        _run(["apt-get", "update", "-q"], "apt-get update", log=log)
        _run(["apt-get", "install", "-y", "-q", "mmdebstrap"], "installing mmdebstrap", log=log)
    _run(["mmdebstrap", "--variant=apt", "--components=main", "--aptopt=Acquire::Check-Valid-Until \"false\"",
          "--include=" + ",".join(PACKAGES), "sid", str(dest),
          f"deb {MIRROR} sid main", f"deb {MIRROR} experimental main"], "mmdebstrap (Debian sid)", log=log)
    prepare_network(dest)
    with Mounts(dest) as m:
        m.system()
        in_root(dest, ["apt-get", "update", "-q"], "apt-get update in the root", log=log)
        shown = in_root(dest, ["apt-cache", "show", f"libmiopen1={MIOPEN_NEW}"], "apt-cache show libmiopen1").stdout
        runtime = runtime_of(shown)
        in_root(dest, ["apt-get", "install", "-y", "-q", "--no-install-recommends", "-t", "experimental", *runtime],
                f"installing the runtime of libmiopen1 {MIOPEN_NEW} from experimental", log=log)
        in_root(dest, ["apt-get", "install", "-y", "-q", "--no-install-recommends", HIP6], f"installing {HIP6}", log=log)
        (dest / "debs").mkdir(exist_ok=True)
        in_root(dest, ["sh", "-c", 'cd /debs && exec apt-get download "$@"', "sh",
                       f"libmiopen1={MIOPEN_OLD}", f"libmiopen1={MIOPEN_NEW}"], "apt-get download of both libmiopen1", log=log)
        in_root(dest, ["apt-get", "clean"], "apt-get clean", log=log)
        probe = ("import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); v = [ctypes.c_size_t() for _ in range(3)]; "
                 "assert l.miopenGetVersion(*map(ctypes.byref, v)) == 0; print('.'.join(str(x.value) for x in v))")
        in_root(dest, ["dpkg-deb", "-x", f"/debs/{DEBS['3.5.1']}", "/tmp/miopen-3.5.1"], "dpkg-deb -x")
        loads = in_root(dest, ["python3", "-c", probe, "/tmp/miopen-3.5.1/usr/lib/x86_64-linux-gnu/libMIOpen.so.1"],
                        "loading the real MIOpen 3.5.1 in the root").stdout.strip()
        in_root(dest, ["rm", "-rf", "/tmp/miopen-3.5.1"], "rm")
        if loads != "3.5.1":
            raise RootError(f"the libMIOpen of {DEBS['3.5.1']} answers {loads!r}, not 3.5.1")
        py = in_root(dest, ["python3", "-c", "import sys; print(sys.version.split()[0])"], "python3 --version").stdout.strip()
        q = in_root(dest, ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", "python3", HIP6, *runtime], "dpkg-query").stdout.split("\n")
    for v, name in DEBS.items():
        if not (dest / "debs" / name).is_file():
            raise RootError(f"apt-get download did not leave {name} (MIOpen {v}) in {dest / 'debs'}")
    stamp = {"format": ROOT_FORMAT, "suite": "sid+experimental", "python": py,
             "packages": sorted(x for x in q if x), "debs": sorted(DEBS.values()), "loads": {"3.5.1": loads},
             "seconds": round(time.monotonic() - start), "bytes": _du(dest)}
    (dest / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    return stamp


def read_stamp(root: Path) -> dict | None:
    try:
        return json.loads((Path(root) / STAMP).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive ``flock`` on ``path`` (made when missing) while the block runs: two sessions
    never make the same cached thing at once (the second waits, then finds it made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def remove_stale(parent: Path, pattern: str, log=print) -> None:
    """Remove ``parent/pattern`` entries named ``...-<pid>`` whose process is gone (half made)."""
    for old in parent.glob(pattern):
        pid = old.name.rsplit("-", 1)[-1]
        if not (pid.isdigit() and Path(f"/proc/{pid}").exists()):
            log(f"removing a half-made {old}")
            remove_tree(old)


def ensure_small_root(log=print) -> Path:
    """The cached small root (made when missing, stale or half made); returns its path."""
    if os.geteuid() != 0:
        raise RootError("making a root needs root (mmdebstrap, mount, chroot)")
    root = small_root_dir()
    stamp = read_stamp(root)
    if stamp and stamp.get("format") == ROOT_FORMAT:
        return root
    with locked(root.with_name(root.name + ".lock")):
        stamp = read_stamp(root)
        if stamp and stamp.get("format") == ROOT_FORMAT:
            return root  # made by another session while this one waited
        remove_stale(root.parent, root.name + ".tmp-*", log)
        tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
        log(f"making the small ROCm 7 root in {tmp} (Debian sid + experimental, about 1.5 GB) ...")
        try:
            stamp = build_root(tmp, log)
            if os.path.lexists(root):
                remove_tree(root)
            os.replace(tmp, root)
        except BaseException:
            remove_tree(tmp)
            raise
    log(f"root ready: {root} ({stamp['bytes'] / 1e9:.2f} GB in {stamp['seconds']} s)")
    return root


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tests.support.rocm7root", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("make", help="make (or find) the cached small root and print its path")
    run = sub.add_parser("run", help="run a command inside a root, on an overlay (what it writes is discarded)")
    run.add_argument("--root", type=Path, help="the root (default: the cached small root)")
    run.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    try:
        if a.cmd == "make":
            root = ensure_small_root(log=lambda s: print(s, file=sys.stderr))
            print(root)
            print(json.dumps(read_stamp(root)), file=sys.stderr)
            return 0
        if not a.command:
            p.error("run needs a command")
        root = (a.root or ensure_small_root()).resolve()
        scratch = Path(tempfile.mkdtemp(prefix="rocmbuild-rocm7-run-"))
        try:
            with Mounts(scratch / "merged") as m:
                overlay(m, [root], scratch / "upper", scratch / "work")
                return subprocess.run(chroot_argv(m.root, a.command)).returncode
        finally:
            remove_tree(scratch)
    except RootError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
