"""Pure parts of the probe: version decoding, report parsing, judging, maps parsing, 3.8 syntax."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from packaging.version import Version

from rocmbuild.environment import _probe
from rocmbuild.environment.probe import PROBE_SCRIPT, ProbeReport, parse_output
from rocmbuild.environment.verify import compatible, judge
from rocmbuild.environment.versions import decode_version, encode_version


@pytest.mark.parametrize(
    "n, encoding, expected",
    [
        (3005001, "miopen", "3.5.1"),
        (3005000, "miopen", "3.5.0"),
        (3006000, "miopen", "3.6.0"),
        (2019000, "miopen", "2.19.0"),
        (8907, "cudnn", "8.9.7"),
        (7605, "cudnn", "7.6.5"),
        (90100, "cudnn", "9.1.0"),
        (90000, "cudnn", "9.0.0"),
        (91002, "cudnn", "9.10.2"),
        (100200, "cudnn", "10.2.0"),
    ],
)
def test_decode_version(n, encoding, expected):
    assert decode_version(n, encoding) == Version(expected)
    assert encode_version(expected, encoding) == n


def test_decode_version_rejects_unknown_encoding():
    with pytest.raises(ValueError):
        decode_version(1, "rocblas")


def report(**over) -> ProbeReport:
    raw = {
        "python": "/env/bin/python", "prefix": "/env", "python_version": "3.11.7",
        "torch_version": "2.7.1+rocm7.0", "torch_error": None, "hip": "7.0.51831", "cuda": None,
        "cudnn_available": True, "version_int": 3005001, "version_error": None, "version_int_retry": 3005001,
        "runtime_version": [3, 5, 1], "compile_version": [3, 5, 1], "cuda_available": False, "gpu_arch": None,
        "libraries": [{"path": "/env/lib/libMIOpen.so.1.0", "kind": "miopen", "dev_major": 254, "dev_minor": 1,
                       "inode": 42, "deleted": False, "sha256": None}],
        "smoke": None, "errors": {},
    }
    if "version_int" in over and "version_int_retry" not in over and not over.get("version_error"):
        raw["version_int_retry"] = over["version_int"]  # torch's second call returns the first call's number
    raw.update(over)
    return ProbeReport.from_json(raw)


def test_report_from_json():
    r = report()
    lib = r.loaded("miopen")[0]
    assert lib.dev == os.makedev(0xFE, 0x01) and lib.inode == 42 and lib.kind == "miopen"
    assert r.runtime_version == (3, 5, 1) and r.compile_version == (3, 5, 1)
    assert r.backend == "miopen" and r.loaded("hip") == ()
    assert r.torch_version == "2.7.1+rocm7.0" and ProbeReport.from_json(r.to_json()) == r  # a round trip holds


def test_judge_ok():
    v = judge(report(), expect="3.5.1")
    assert v.ok, v.render()
    assert {c.name for c in v.checks} == {"torch", "backend", "library", "version", "compatibility"}
    assert v.failures() == ()
    j = v.to_json()
    assert j["ok"] is True and j["failures"] == [] and j["report"]["libraries"][0]["device"] == "fe:01"


def test_judge_version_mismatch_lists_expected_and_found():
    v = judge(report(), expect="3.5.0")
    assert not v.ok
    (bad,) = v.failures()
    assert bad.name == "version" and bad.expected == "3.5.0" and bad.found.startswith("3.5.1")


def test_judge_incompatible_explains_runtime_error():
    r = report(version_int=None, version_int_retry=3006000, runtime_version=[3, 6, 0],
               version_error="RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (3, 5, 1) "
                             "but found runtime version (3, 6, 0).")
    v = judge(r, expect="3.6.0")
    names = [c.name for c in v.failures()]
    assert names == ["compatibility"]  # the version itself is right (decoded from the retry)
    c = v.failures()[0]
    assert "RuntimeError" in c.message and "cuDNN version incompatibility" in c.message
    assert "miopen-3.5.1" in c.message and "3.5" in c.expected + c.message
    assert "3006000" in c.found  # the retry number is reported


def test_judge_two_libraries():
    libs = [{"path": f"/env/{d}/libMIOpen.so.1.0", "kind": "miopen", "dev_major": 254, "dev_minor": 1,
             "inode": i, "deleted": False} for i, d in ((1, "lib"), (2, "opt"))]
    v = judge(report(libraries=libs))
    (bad,) = v.failures()
    assert bad.name == "library" and "exactly one" in bad.expected and "2:" in bad.found


def test_judge_library_name_matching_excludes_lookalikes():
    libs = [{"path": "/env/lib/libcudnn.so.9", "kind": "cudnn", "dev_major": 1, "dev_minor": 1, "inode": 1},
            {"path": "/env/lib/libcudnn_ops.so.9", "kind": "cudnn", "dev_major": 1, "dev_minor": 1, "inode": 2}]
    r = report(libraries=libs, hip=None, cuda="12.4", version_int=90100, runtime_version=[9, 1, 0],
               compile_version=[9, 0, 0])
    v = judge(r, library="libcudnn", encoding="cudnn", expect="9.1.0")
    assert v.ok, v.render()  # CUDA rule: same major, runtime minor >= compile minor


def test_judge_torch_error_and_cpu_torch():
    v = judge(report(torch_error="ImportError: boom"))
    assert not v.ok and v.failures()[0].name == "torch" and "boom" in v.failures()[0].found
    cpu = report(hip=None, cuda=None, libraries=[], version_int=None, version_int_retry=None,
                 runtime_version=None, compile_version=None, cudnn_available=False)
    v = judge(cpu, expect="3.5.1")
    assert not v.ok
    assert "no MIOpen/cuDNN in this torch" in " ".join(c.message for c in v.failures())


@pytest.mark.parametrize(
    "smoke, ok, skipped, found",
    [
        ({"status": "passed", "reason": "", "node": "MiopenBatchNormBackward0"}, True, False, "passed"),
        ({"status": "failed", "reason": "output differs", "node": None}, False, False, "failed"),
        ({"status": "skipped", "reason": "no GPU", "node": None}, True, True, "skipped: no GPU"),
        (None, False, False, "not run"),
    ],
)
def test_judge_smoke(smoke, ok, skipped, found):
    v = judge(report(smoke=smoke), smoke=True)
    c = [c for c in v.checks if c.name == "smoke"][0]
    assert (c.ok, c.skipped) == (ok, skipped) and c.found.startswith(found)
    if skipped:
        assert "passed" not in c.found


def test_judge_expected_file_identity(tmp_path):
    f = tmp_path / "libMIOpen.so.1.0"
    f.write_bytes(b"x")
    st = f.stat()
    libs = [{"path": str(f), "kind": "miopen", "dev_major": os.major(st.st_dev), "dev_minor": os.minor(st.st_dev),
             "inode": st.st_ino}]
    assert judge(report(libraries=libs), expected_file=f).ok
    other = tmp_path / "copy"
    other.write_bytes(b"x")
    os.replace(other, f)  # same path, new inode
    v = judge(report(libraries=libs), expected_file=f)
    assert [c.name for c in v.failures()] == ["identity"]


def test_compatible_before_swap():
    r = report(compile_version=[3, 5, 0])
    assert compatible("3.5.1", r).ok
    bad = compatible("3.6.0", r)
    assert not bad.ok and "RuntimeError" in bad.message and "3.5" in bad.message
    cpu = report(hip=None, cuda=None, compile_version=None)
    assert "no MIOpen/cuDNN in this torch" in compatible("3.5.1", cpu).message
    cuda = report(hip=None, cuda="12.4", compile_version=[9, 0, 0])
    assert compatible("9.1.0", cuda, "cudnn").ok
    assert not compatible("8.9.7", cuda, "cudnn").ok


def test_read_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r--p 00000000 fd:01 1234   /env/lib/libMIOpen.so.1.0\n"
        "7f01-7f02 r-xp 00001000 fd:01 1234   /env/lib/libMIOpen.so.1.0\n"
        "7f02-7f03 r--p 00000000 fd:01 99     /opt/rocm/lib/libamdhip64.so.7.0.0 (deleted)\n"
        "7f03-7f04 r--p 00000000 fd:01 77     /usr/lib/libc.so.6\n"
        "7f04-7f05 rw-p 00000000 00:00 0      [heap]\n"
        "7f05-7f06 r--p 00000000 103:02 5     /with space/libcudnn.so.9\n"
    )
    libs = _probe.read_maps(str(maps))
    assert [(x["path"], x["kind"], x["inode"], x["deleted"]) for x in libs] == [
        ("/env/lib/libMIOpen.so.1.0", "miopen", 1234, False),
        ("/opt/rocm/lib/libamdhip64.so.7.0.0", "hip", 99, True),
        ("/with space/libcudnn.so.9", "cudnn", 5, False),
    ]
    assert (libs[0]["dev_major"], libs[0]["dev_minor"]) == (0xFD, 0x01)
    assert (libs[2]["dev_major"], libs[2]["dev_minor"]) == (0x103, 0x02)


def test_probe_script_is_python38_syntax():
    src = PROBE_SCRIPT.read_text()
    tree = ast.parse(src, feature_version=(3, 8))
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not attrs & {"removeprefix", "removesuffix"}  # 3.9+
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"hashlib", "json", "os", "platform", "sys", "time", "traceback", "torch"}


def test_parse_json_tolerates_noise():
    assert parse_output('noise\n{"a": 1}\n') == {"a": 1}
    assert parse_output('{"a": 2}') == {"a": 2}
    assert parse_output("nothing") is None


def test_probe_runs_without_torch_in_this_interpreter_module(monkeypatch):
    """probe() never crashes: with torch missing it reports the import error."""
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch":
            raise ModuleNotFoundError("No module named 'torch'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    out = _probe.probe(smoke=True)
    assert out["torch_error"].startswith("ModuleNotFoundError")
    assert out["smoke"]["status"] == "skipped"
    assert Path(out["python"]).name.startswith("python")


def test_judge_two_hip_runtimes_fail_one_is_fine():
    miopen = {"path": "/env/lib/libMIOpen.so.1.0", "kind": "miopen", "dev_major": 254, "dev_minor": 1,
              "inode": 42, "deleted": False}
    hip = [{"path": p, "kind": "hip", "dev_major": 254, "dev_minor": 1, "inode": i, "deleted": False}
           for i, p in ((7, "/env/lib/python3.12/site-packages/torch/lib/libamdhip64.so"),
                        (8, "/opt/rocm/lib/libamdhip64.so.7"))]
    assert judge(report(libraries=[miopen, hip[0]])).ok
    v = judge(report(libraries=[miopen, *hip]))
    (bad,) = v.failures()
    assert bad.name == "hip runtime" and "2:" in bad.found and "/opt/rocm/lib/libamdhip64.so.7" in bad.found
