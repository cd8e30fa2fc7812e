"""The probe: runs INSIDE the target's Python and prints one JSON object on stdout.

Usage (rocmbuild runs it; a user may too): ``TARGET_PYTHON _probe.py [--hash] [--smoke]``.
One module because it runs as one file in another interpreter (and as source through ``-c``, as
the target's owner): it can import nothing of its own.

Constraints and decisions:

* Standard library and torch only; Python 3.8+ syntax (target environments may be old), so no
  ``match``, no ``X | Y`` types, no ``str.removeprefix``. rocmbuild itself is never imported.
* It touches only ``torch.__version__``, ``torch.version.hip``, ``torch.version.cuda``,
  ``torch.backends.cudnn.is_available()``, ``torch.backends.cudnn.version()``,
  ``torch._C._cudnn.getRuntimeVersion()``, ``torch._C._cudnn.getCompileVersion()``,
  ``torch.cuda.is_available()`` and, only with ``--smoke`` and a GPU present (or
  ``ROCMBUILD_SMOKE_DEVICE=cpu``), the device's properties and the modules the smoke suite needs.
* The smoke suite (``--smoke``) is the checks users ran by hand after a swap, each one result in
  ``smoke.checks`` (:data:`SMOKE_CHECKS`): install facts, device properties, a 1000x1000 matmul vs
  the CPU, a Linear-ReLU-Linear forward, 5 allocations then ``empty_cache`` back to the baseline,
  BatchNorm2d forward+backward in train mode vs the CPU, 3 training steps of a
  Conv-BatchNorm-SiLU network vs the CPU. Without a GPU each is ``skipped: no GPU``;
  ``ROCMBUILD_SMOKE_DEVICE=cpu`` runs the same code with the CPU as the device (the CPU allocator
  has no statistics: the memory check proves the 5 tensors are freed instead); one the torch
  cannot run (:data:`_CANNOT_RUN`) is ``skipped`` with ``cannot_run``, never ``failed``.
  Anything missing or raising is recorded in ``errors`` (attribute -> exception text); the probe
  itself never crashes on torch's account.
* ``torch.backends.cudnn.version()`` is called twice: PyTorch sets its cached version *before*
  raising the "cuDNN version incompatibility" RuntimeError, so the first call raises and the
  second quietly returns the number. Both outcomes are reported (``version_int`` /
  ``version_error`` and ``version_int_retry``).
* Loaded libraries come from ``/proc/self/maps`` (``libMIOpen*``, ``libamdhip64*``,
  ``libcudnn*``; ``mapped``: every shared object, for the DT_NEEDED check): the kernel shows the real file (symlinks resolved) with the device
  (``major:minor`` in hex) and inode it mapped, so identity is exact without hashing. sha256 only
  with ``--hash`` (a real libMIOpen is ~1 GiB); the hashed file's inode is checked against the
  mapped one, and a mismatch is reported instead of a wrong hash.
* Anything torch (or a library constructor) prints on stdout is diverted to stderr: file
  descriptor 1 is pointed at stderr while torch runs, and the JSON is written to a saved copy of
  the original stdout, so stdout carries exactly one JSON object.
* ``sys.path[0]`` (this script's directory, rocmbuild's package) is removed so that no module of
  rocmbuild can shadow one that torch imports; run from source (``-c``: as the target's owner,
  who may not read this file), it is the working directory (``""``), removed the same way.
"""

import json
import os
import sys
import time

# hashlib (--hash), platform (--smoke on the CPU) and traceback (a failure) are imported where they
# are used: with a torch that does not import them itself, they were 20-30 ms of every probe's
# start (and hashlib mapped libcrypto into the process the DT_NEEDED check reads)

PROBE_SCHEMA = 1
KINDS = (("libMIOpen", "miopen"), ("libamdhip64", "hip"), ("libcudnn", "cudnn"))


def _traceback():
    import traceback

    return traceback.format_exc()


def _exc_text(exc):
    return "%s: %s" % (type(exc).__name__, exc)


def _kind(path):
    base = os.path.basename(path)
    for prefix, kind in KINDS:
        if base.startswith(prefix):
            return kind
    return None


def read_maps(maps_path="/proc/self/maps", every=False):
    """Every mapped libMIOpen/libamdhip64/libcudnn file (``every``: every mapped shared object,
    ``kind`` None for the others), once each, in first-mapped order."""
    seen = {}
    with open(maps_path) as f:
        for line in f:
            parts = line.rstrip("\n").split(None, 5)
            if len(parts) < 6:
                continue
            dev, inode, path = parts[3], parts[4], parts[5]
            deleted = False
            if path.endswith(" (deleted)"):
                deleted = True
                path = path[: -len(" (deleted)")]
            if not path.startswith("/"):
                continue
            kind = _kind(path)
            if kind is None and not (every and (path.endswith(".so") or ".so." in os.path.basename(path))):
                continue
            key = (path, dev, inode)
            if key in seen:
                continue
            major_hex, _, minor_hex = dev.partition(":")
            seen[key] = {"path": path, "kind": kind, "device": dev, "dev_major": int(major_hex, 16),
                         "dev_minor": int(minor_hex, 16), "inode": int(inode), "deleted": deleted}
    return list(seen.values())


def _sha256(lib):
    """sha256 of the mapped file, or (None, reason) when the file on disk is not the mapped one."""
    if lib["deleted"]:
        return None, "the mapped file was deleted (replaced) after it was loaded"
    try:
        with open(lib["path"], "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_ino != lib["inode"] or os.major(st.st_dev) != lib["dev_major"] \
                    or os.minor(st.st_dev) != lib["dev_minor"]:
                return None, "the file at this path is no longer the mapped one (different inode)"
            import hashlib

            h = hashlib.sha256()
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
            return h.hexdigest(), None
    except OSError as exc:
        return None, _exc_text(exc)


def _call(errors, name, fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - reporting is the point
        errors[name] = _exc_text(exc)
        return None


def _tuple(value):
    if value is None:
        return None
    try:
        return [int(x) for x in value]
    except (TypeError, ValueError):
        return None


_CANNOT_RUN = (AttributeError, ImportError, NotImplementedError)  # the torch lacks the API (the demo's stand-in)
SMOKE_CHECKS = ("install", "device", "matmul", "mlp", "memory", "batchnorm", "training")


def _smoke_device(out):
    """``$ROCMBUILD_SMOKE_DEVICE`` (``cpu`` runs the same code on the CPU), else the GPU, else None."""
    forced = os.environ.get("ROCMBUILD_SMOKE_DEVICE")
    if forced:
        return forced
    return "cuda" if out.get("cuda_available") else None


def _close(torch, got, want, what, rtol=1e-3, atol=1e-3):
    try:
        torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), rtol=rtol, atol=atol)
    except AssertionError as exc:
        raise AssertionError("%s differs from the CPU: %s" % (what, str(exc)[:500])) from exc


def _sync(torch, device):
    if device != "cpu":
        torch.cuda.synchronize()

def _smoke_install(torch, device, out):
    v = torch.backends.cudnn.version()
    if not torch.backends.cudnn.is_available() or not isinstance(v, int):
        raise AssertionError("torch.backends.cudnn is not usable (is_available() %s, version() %r)"
                             % (torch.backends.cudnn.is_available(), v))
    backend = "ROCm %s" % out["hip"] if out.get("hip") else "CUDA %s" % out.get("cuda")
    return "torch %s (%s), cudnn.version() = %d" % (torch.__version__, backend, v)


def _smoke_properties(torch, device, out):
    if device == "cpu":
        import platform

        return "cpu: %s, %d threads" % (platform.machine(), torch.get_num_threads())
    p = torch.cuda.get_device_properties(0)
    arch = getattr(p, "gcnArchName", None) or "sm_%d%d" % (p.major, p.minor)
    out["gpu_arch"] = str(arch).split(":")[0]
    if not p.total_memory or not p.multi_processor_count:
        raise AssertionError("device 0 reports no memory or no multiprocessors")
    return "%s, %d MiB, %d multiprocessors, %s" % (p.name, p.total_memory >> 20, p.multi_processor_count, arch)


def _smoke_matmul(torch, device, out):
    if device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    a, b = torch.randn(1000, 1000), torch.randn(1000, 1000)
    got = a.to(device) @ b.to(device)
    _sync(torch, device)
    _close(torch, got, a @ b, "the 1000x1000 product", rtol=1e-3, atol=1e-2)
    return "1000x1000 matmul on %s matches the CPU" % device


def _twins(torch, build, device):
    """The same network twice (same seed): on the CPU and on the device."""
    torch.manual_seed(0)
    ref = build()
    torch.manual_seed(0)
    return ref, build().to(device)


def _smoke_mlp(torch, device, out):
    nn = torch.nn
    model, dev_model = _twins(torch, lambda: nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), device)
    x = torch.randn(32, 64)
    with torch.no_grad():
        _close(torch, dev_model(x.to(device)), model(x), "the Linear-ReLU-Linear output")
    return "Linear-ReLU-Linear forward on %s matches the CPU" % device


def _smoke_memory(torch, device, out):
    if device == "cpu":  # the CPU allocator keeps no statistics: nothing but the list may hold the 5 tensors
        blocks = [torch.empty(1 << 22) for _ in range(5)]
        held = [sys.getrefcount(blocks[i]) - 2 for i in range(5)]  # minus the list's and the argument's
        del blocks
        if any(held):
            raise AssertionError("the 5 tensors are held elsewhere (%s more references): not freed" % held)
        return "5 allocations of 16 MiB, freed on release (cpu: no allocator statistics)"
    _sync(torch, device)
    torch.cuda.empty_cache()
    base, base_reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    blocks = [torch.empty(1 << 24, device=device) for _ in range(5)]
    grown = torch.cuda.memory_allocated() - base
    del blocks
    torch.cuda.empty_cache()
    now, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    if grown < 5 * (1 << 26) or now != base or reserved > base_reserved:
        raise AssertionError("allocated %d bytes over 5 tensors; after empty_cache allocated %d (baseline %d), "
                             "reserved %d (baseline %d)" % (grown, now, base, reserved, base_reserved))
    return "5 allocations of 64 MiB, then empty_cache: back to the baseline (%d bytes)" % base


def _smoke_batchnorm(torch, device, out):
    """nn.BatchNorm2d forward+backward in train mode, cudnn enabled, vs the CPU (the gfx1151 bug)."""
    torch.backends.cudnn.enabled = True
    torch.manual_seed(0)
    x = torch.randn(8, 16, 12, 12)
    grad = torch.randn(8, 16, 12, 12)
    results = {}
    for where in ("cpu", device):
        bn = torch.nn.BatchNorm2d(16).to(where).train()
        xi = x.clone().to(where).requires_grad_(True)
        y = bn(xi)
        y.backward(grad.to(where))
        results[where] = (y, xi.grad, bn.weight.grad, bn.bias.grad,
                          type(y.grad_fn).__name__ if y.grad_fn is not None else None)
    out["smoke_node"] = results[device][4]
    for i, name in enumerate(("output", "grad_input", "grad_weight", "grad_bias")):
        _close(torch, results[device][i], results["cpu"][i], name)
    _sync(torch, device)
    return "BatchNorm2d forward+backward matches the CPU (node %s)" % results[device][4]


def _smoke_training(torch, device, out):
    nn = torch.nn
    net, dev_net = _twins(torch, lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.SiLU(),
                                                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)), device)
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 4, (16,))
    losses = {}
    for where, model in (("cpu", net), (device, dev_net)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses[where] = []
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(where)), y.to(where))
            loss.backward()
            opt.step()
            losses[where].append(loss.detach().cpu())
    _close(torch, torch.stack(losses[device]), torch.stack(losses["cpu"]), "the losses", rtol=1e-2, atol=1e-3)
    return "3 training steps of Conv-BatchNorm-SiLU match the CPU (losses %s)" % ", ".join(
        "%.4f" % float(v) for v in losses[device])


_SMOKE_FUNCS = {"install": _smoke_install, "device": _smoke_properties, "matmul": _smoke_matmul, "mlp": _smoke_mlp,
                "memory": _smoke_memory, "batchnorm": _smoke_batchnorm, "training": _smoke_training}


def _smoke(torch, out, errors):
    """The smoke suite: one result per check of SMOKE_CHECKS; each skipped without a device."""
    device = _smoke_device(out)
    checks = []
    for name in SMOKE_CHECKS:
        if device is None:
            checks.append({"name": name, "status": "skipped", "reason": "no GPU"})
            continue
        try:
            checks.append({"name": name, "status": "passed", "reason": _SMOKE_FUNCS[name](torch, device, out)})
        except _CANNOT_RUN as exc:  # it never reached the library: nothing is said of it
            checks.append({"name": name, "status": "skipped", "cannot_run": True,
                           "reason": "this torch cannot run it: " + _exc_text(exc)})
        except Exception as exc:  # noqa: BLE001 - a failing check is a result
            checks.append({"name": name, "status": "failed", "reason": _exc_text(exc),
                           "traceback": _traceback()[-2000:]})
    if device is None:
        return {"status": "skipped", "reason": "no GPU", "node": None, "device": None, "checks": checks}
    failed = [c for c in checks if c["status"] == "failed"]
    status = "failed" if failed else ("passed" if all(c["status"] == "passed" for c in checks) else "skipped")
    return {"status": status, "device": device, "node": out.pop("smoke_node", None), "checks": checks,
            "reason": "; ".join("%s: %s" % (c["name"], c["reason"]) for c in failed)
            or ("every check passed" if status == "passed" else "this torch cannot run every check")}


def probe(want_hash=False, smoke=False):
    errors = {}
    out = {
        "schema": PROBE_SCHEMA,
        "python": sys.executable,
        "prefix": sys.prefix,
        "python_version": sys.version.split()[0],  # what platform.python_version() says
        "pid": os.getpid(),
        "torch_version": None, "torch_error": None, "torch_file": None,
        "hip": None, "cuda": None, "cudnn_available": None, "cuda_available": None, "gpu_arch": None,
        "version_int": None, "version_error": None, "version_int_retry": None,
        "runtime_version": None, "compile_version": None,
        "libraries": [], "smoke": None,
        "errors": errors,
    }
    start = time.monotonic()
    try:
        import torch
    except BaseException as exc:  # noqa: BLE001 - includes SystemExit raised by a broken package
        out["torch_error"] = _exc_text(exc)
        out["torch_traceback"] = _traceback()[-4000:]
        torch = None
    out["import_seconds"] = round(time.monotonic() - start, 3)
    if torch is not None:
        _ask_torch(torch, out, errors)
        if smoke:
            out["smoke"] = _smoke(torch, out, errors)
    elif smoke:
        out["smoke"] = {"status": "skipped", "reason": "torch did not import", "node": None}
    out["libraries"] = _libraries(want_hash, errors)
    # what the process provides to a library swapped in (rocmbuild reads their SONAMEs)
    out["mapped"] = _call(errors, "/proc/self/maps (every shared object)", lambda: read_maps(every=True)) or []
    return out


def _ask_torch(torch, out, errors):
    """Fill in what torch says about itself and its MIOpen/cuDNN (every call guarded)."""
    out["torch_file"] = getattr(torch, "__file__", None)
    out["torch_version"] = _call(errors, "torch.__version__", lambda: str(torch.__version__))
    out["hip"] = _call(errors, "torch.version.hip", lambda: torch.version.hip)
    out["cuda"] = _call(errors, "torch.version.cuda", lambda: torch.version.cuda)
    out["cudnn_available"] = _call(errors, "torch.backends.cudnn.is_available()",
                                   lambda: bool(torch.backends.cudnn.is_available()))
    try:
        out["version_int"] = torch.backends.cudnn.version()
    except Exception as exc:  # noqa: BLE001
        out["version_error"] = _exc_text(exc)
    out["version_int_retry"] = _call(errors, "torch.backends.cudnn.version() (second call)",
                                     lambda: torch.backends.cudnn.version())
    out["runtime_version"] = _tuple(_call(errors, "torch._C._cudnn.getRuntimeVersion()",
                                          lambda: torch._C._cudnn.getRuntimeVersion()))
    out["compile_version"] = _tuple(_call(errors, "torch._C._cudnn.getCompileVersion()",
                                          lambda: torch._C._cudnn.getCompileVersion()))
    out["cuda_available"] = _call(errors, "torch.cuda.is_available()", lambda: bool(torch.cuda.is_available()))


def _libraries(want_hash, errors):
    """The mapped libraries, each with its sha256 when asked (None otherwise or when not provable)."""
    try:
        libs = read_maps()
    except OSError as exc:
        errors["/proc/self/maps"] = _exc_text(exc)
        libs = []
    for lib in libs:
        lib["sha256"] = None
        if want_hash:
            digest, why = _sha256(lib)
            lib["sha256"] = digest
            if why:
                errors["sha256 " + lib["path"]] = why
    return libs


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    want_hash = "--hash" in argv
    smoke = "--smoke" in argv
    # Whatever torch prints on fd 1 goes to stderr; the JSON goes to the saved stdout.
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        out = probe(want_hash=want_hash, smoke=smoke)
        data = json.dumps(out, sort_keys=True, default=str)
    except BaseException as exc:  # noqa: BLE001 - a bug here must still produce JSON
        data = json.dumps({"schema": PROBE_SCHEMA, "probe_error": _exc_text(exc),
                           "traceback": _traceback()[-4000:]})
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    with os.fdopen(saved, "w", encoding="utf-8") as real_stdout:
        real_stdout.write(data + "\n")
    return 0


if __name__ == "__main__":
    _HERE = globals().get("__file__")  # None: run from source (``-c``, as the target's owner)
    if sys.path and (sys.path[0] == "" if _HERE is None
                     else os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(_HERE))):
        sys.path.pop(0)
    sys.exit(main())
