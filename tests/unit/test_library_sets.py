"""Library and encoding from the backend, library sets judged per SONAME, identity for every
member, the second cudnn.version() call as the judge, the compatibility rule per backend, the
smoke suite's checks: real files for identity (device and inode), reports as the probe writes them."""

from __future__ import annotations

import os

import re

import pytest

from rocmbuild.errors import EXIT_INPUT, InputError
from rocmbuild.environment.probe import ProbeReport
from rocmbuild.environment.verify import choose, judge
from rocmbuild.environment.versions import compatible_versions

CUDA = {"hip": None, "cuda": "13.0", "torch_version": "2.14.1+cu130", "version_int": 92400,
        "version_int_retry": 92400, "runtime_version": [9, 24, 0], "compile_version": [9, 24, 0]}


def lib(path, inode=None, kind="cudnn"):
    if os.path.exists(path):
        st = os.stat(path)
        return {"path": str(path), "kind": kind, "dev_major": os.major(st.st_dev), "dev_minor": os.minor(st.st_dev),
                "inode": st.st_ino, "deleted": False}
    return {"path": str(path), "kind": kind, "dev_major": 1, "dev_minor": 1, "inode": inode or 1, "deleted": False}


def report(libs, **over):
    raw = {"python": "/env/bin/python", "prefix": "/env", "python_version": "3.11.7", "torch_error": None,
           "cudnn_available": True, "version_error": None, "cuda_available": False, "libraries": libs, "errors": {},
           **CUDA}
    raw.update(over)
    return ProbeReport.from_json(raw)


def test_backend_picks_library_and_encoding():
    assert choose(report([])) == ("libcudnn*", "cudnn")
    assert choose(report([], hip="7.0.51831", cuda=None)) == ("libMIOpen", "miopen")
    assert choose(report([]), library="libcudnn") == ("libcudnn", "cudnn")


@pytest.mark.parametrize("library, encoding, words", [
    ("libcudnn*", "miopen", "the encoding miopen (--encoding, or the recipe's [verify] encoding) cannot decode libcudnn*"),
    (None, "miopen", "this torch is a CUDA build"),
    ("libMIOpen", None, "--library libMIOpen would misread it"),
])
def test_contradictions_are_refused(library, encoding, words):
    with pytest.raises(InputError, match=re.escape(words)) as e:
        choose(report([]), library, encoding)
    assert e.value.exit_code == EXIT_INPUT and "leave out the encoding (--encoding" in e.value.hint


def test_stock_cudnn9_set_is_one_file_per_soname():
    r = report([lib("/env/nvidia/cudnn/lib/libcudnn.so.9", 1), lib("/env/nvidia/cudnn/lib/libcudnn_graph.so.9", 2)])
    v = judge(r, expect="9.24.0")
    assert v.ok, v.render()
    c = {c.name: c for c in v.checks}
    assert c["library"].expected == "one file per SONAME of libcudnn* loaded"
    assert "answered by /env/nvidia/cudnn/lib/libcudnn_graph.so.9" in c["version"].found


def test_two_files_of_one_soname_fail():
    r = report([lib("/a/libcudnn.so.9", 1), lib("/b/libcudnn.so.9.24.0", 2), lib("/a/libcudnn_graph.so.9", 3)])
    v = judge(r)
    c = {c.name: c for c in v.checks}
    assert not v.ok and not c["library"].ok and "2 of libcudnn.so.9" in c["library"].found
    assert "/a/libcudnn_graph.so.9" not in c["library"].found


def test_identity_covers_every_mapped_member(tmp_path):
    old, new_graph = tmp_path / "libcudnn.so.9", tmp_path / "libcudnn_graph.so.9"
    old.write_bytes(b"old cudnn")
    new_graph.write_bytes(b"new graph")
    r = report([lib(old), lib(new_graph)], version_int=92501, version_int_retry=92501, runtime_version=[9, 25, 1])
    only_old = judge(r, expect="9.25.1", expected_file=old)  # the graph answers the version, not the file given
    ident = {c.name: c for c in only_old.checks}["identity"]
    assert not only_old.ok and not ident.ok and str(new_graph) in ident.message
    both = judge(r, expect="9.25.1", expected_file=[old, new_graph])
    assert both.ok, both.render()


def test_a_version_that_raises_on_every_call_fails():
    err = "RuntimeError: cuDNN version incompatibility"
    r = report([lib("/env/libcudnn.so.9")], version_int=None, version_error=err, version_int_retry=None,
               errors={"torch.backends.cudnn.version() (second call)": err})
    c = {c.name: c for c in judge(r, expect="9.24.0").checks}["version"]
    assert not c.ok and c.found == "unknown" and "first call raised" in c.message and "second call" in c.message


def test_second_call_is_judged_and_both_calls_reported():
    r = report([lib("/env/libcudnn.so.9")], version_int=None, version_error="RuntimeError: incompatible",
               version_int_retry=92400)
    c = {c.name: c for c in judge(r, expect="9.24.0").checks}["version"]
    assert c.ok and "92400" in c.found and "first call raised RuntimeError: incompatible" in c.found


@pytest.mark.parametrize("runtime, compiled, encoding, cuda, ok", [
    ((3, 5, 1), (3, 5, 0), "miopen", False, True),
    ((3, 6, 0), (3, 5, 1), "miopen", False, False),  # ROCm: equal major.minor
    ((9, 25, 1), (9, 24, 0), "cudnn", True, True),  # CUDA cuDNN >= 7: runtime minor >= compile minor
    ((9, 23, 2), (9, 24, 0), "cudnn", True, False),
    ((8, 9, 7), (9, 1, 0), "cudnn", True, False),  # major differs
    ((6, 1, 0), (6, 0, 0), "cudnn", True, False),  # before cuDNN 7: equal minor
])
def test_compatibility_rule_per_backend(runtime, compiled, encoding, cuda, ok):
    assert compatible_versions(runtime, compiled, encoding, cuda) is ok


def test_smoke_suite_is_one_check_each():
    items = [{"name": n, "status": "passed", "reason": f"{n} fine"} for n in ("install", "matmul", "batchnorm")]
    items.append({"name": "training", "status": "failed", "reason": "AssertionError: the losses differ from the CPU"})
    r = report([lib("/env/libcudnn.so.9")], smoke={"status": "failed", "device": "cpu", "node": None, "checks": items})
    v = judge(r, smoke=True)
    c = {c.name: c for c in v.checks}
    assert [n for n in c if n.startswith("smoke")] == ["smoke: install", "smoke: matmul", "smoke", "smoke: training"]
    assert c["smoke"].ok and c["smoke"].found == "passed on cpu: batchnorm fine"
    assert not v.ok and [f.name for f in v.failures()] == ["smoke: training"] and "losses" in c["smoke: training"].found
    skipped = judge(report([lib("/env/libcudnn.so.9")], smoke={"status": "skipped", "reason": "no GPU", "checks": [
        {"name": "install", "status": "skipped", "reason": "no GPU"}]}), smoke=True)
    s = {c.name: c for c in skipped.checks}["smoke: install"]
    assert skipped.ok and s.skipped and s.found == "skipped: no GPU"


def test_one_mapped_file_is_judged_without_reading_its_soname(tmp_path, monkeypatch):
    """A single mapped file has no duplicate: verification reads no ELF (the SONAME is read, and
    pyelftools imported, only when two or more files are mapped; the test above fails without it)."""
    placed = tmp_path / "libcudnn.so.9"
    placed.write_bytes(b"not even an ELF")

    def no_elf_read(path):
        raise AssertionError(f"read the SONAME of {path}")

    monkeypatch.setattr("rocmbuild.environment.probe.read_soname", no_elf_read)
    v = judge(report([lib(placed)]), expect="9.24.0", expected_file=placed)
    c = {c.name: c for c in v.checks}
    assert v.ok and c["library"].ok and c["identity"].ok, v.render()
    with pytest.raises(AssertionError, match="read the SONAME"):  # two files: the SONAMEs are read
        judge(report([lib(placed), lib(tmp_path / "libcudnn.so.9.24.0", 7)]), expected_file=placed)
