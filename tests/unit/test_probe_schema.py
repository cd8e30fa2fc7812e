"""The probe's report is parsed once by its schema (PROBE_SPEC): a malformed report is refused
naming the field (a TargetError, exit 2, from run_probe, with a real process printing it), a
valid one reads back from its to_json() to an equal report."""

from __future__ import annotations

import json
import os
import stat

import pytest

from rocmbuild.environment.probe import ProbeReport, SmokeCheck, run_probe
from rocmbuild.environment.smoke import check_smoke
from rocmbuild.errors import EXIT_INPUT, TargetError
from rocmbuild.schema import SchemaError

FULL = {
    "schema": 1, "python": "/env/bin/python", "prefix": "/env", "python_version": "3.11.7", "pid": 12,
    "torch_version": "2.7.1+rocm7.0", "torch_error": None, "torch_file": "/env/lib/torch/__init__.py",
    "hip": "7.0.51831", "cuda": None, "cudnn_available": True, "cuda_available": True, "gpu_arch": "gfx1151",
    "version_int": 3005001, "version_error": None, "version_int_retry": 3005001,
    "runtime_version": [3, 5, 1], "compile_version": [3, 5, 0], "import_seconds": 1.25,
    "libraries": [{"path": "/env/lib/libMIOpen.so.1.0", "kind": "miopen", "device": "fe:01", "dev_major": 254,
                   "dev_minor": 1, "inode": 42, "deleted": False, "sha256": "a" * 64}],
    "mapped": [{"path": "/usr/lib/libc.so.6", "kind": None, "device": "fe:01", "dev_major": 254, "dev_minor": 1,
                "inode": 7, "deleted": False}],
    "smoke": {"status": "failed", "reason": "matmul: AssertionError: x", "node": "NativeBatchNormBackward0",
              "device": "cuda", "checks": [
                  {"name": "matmul", "status": "failed", "reason": "AssertionError: x", "traceback": "tb"},
                  {"name": "mlp", "status": "skipped", "cannot_run": True, "reason": "this torch cannot run it"},
                  {"name": "batchnorm", "status": "passed", "reason": None}]},
    "errors": {"torch.version.cuda": "AttributeError: x"},
}


def test_a_full_report_parses_into_values_and_round_trips():
    r = ProbeReport.from_json(FULL)
    assert r.runtime_version == (3, 5, 1) and r.libraries[0].dev == os.makedev(254, 1)
    assert r.mapped[0].kind == "" and r.torch_file == "/env/lib/torch/__init__.py"
    assert r.smoke.checks[1] == SmokeCheck("mlp", "skipped", "this torch cannot run it", cannot_run=True)
    back = ProbeReport.from_json(json.loads(json.dumps(r.to_json())))
    assert back == r and back.mapped == r.mapped and back.torch_file == r.torch_file
    assert [c.ok for c in check_smoke(r)] == [False, True, True]
    assert r.summary()["smoke"]["checks"][0]["traceback"] == "tb" and "mapped" not in r.summary()


@pytest.mark.parametrize("path, value, field", [
    (("hip",), 7, "hip"),
    (("version_int",), 3.5, "version_int"),
    (("version_int",), True, "version_int"),
    (("cudnn_available",), "yes", "cudnn_available"),
    (("runtime_version",), [3, 5], "runtime_version"),
    (("runtime_version",), [3, "5", 1], "runtime_version[1]"),
    (("libraries",), {"path": "/x"}, "libraries"),
    (("libraries", 0, "inode"), "42", "libraries[0].inode"),
    (("libraries", 0, "path"), "relative/libMIOpen.so", "libraries[0].path"),
    (("mapped", 0, "dev_major"), None, "mapped[0].dev_major"),
    (("smoke", "status"), "ok", "smoke.status"),
    (("smoke", "checks", 1, "cannot_run"), "true", "smoke.checks[1].cannot_run"),
    (("errors",), {"x": 1}, "errors.x"),
    (("schema",), 2, "schema"),
])
def test_a_wrong_typed_field_is_named(path, value, field):
    doc = json.loads(json.dumps(FULL))
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(SchemaError) as info:
        ProbeReport.from_json(doc, "probe.json")
    assert info.value.field == field and f"field {field!r}: expected" in str(info.value), str(info.value)


def _fake_python(tmp_path, stdout: str):
    """An executable that prints ``stdout`` whatever it is given (the probe's place in run_probe)."""
    (tmp_path / "out.json").write_text(stdout)
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\ncat '{tmp_path / 'out.json'}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_run_probe_refuses_a_malformed_report_naming_the_field(tmp_path):
    bad = {**FULL, "libraries": [{**FULL["libraries"][0], "dev_minor": "01"}]}
    with pytest.raises(TargetError) as info:
        run_probe(_fake_python(tmp_path, json.dumps(bad)), timeout=30)
    text = str(info.value)
    assert "cannot be read" in text and "'libraries[0].dev_minor': expected an integer" in text, text
    assert info.value.exit_code == EXIT_INPUT == 2
    assert info.value.details["schema"]["field"] == "libraries[0].dev_minor"


def test_run_probe_reads_a_good_report_and_a_probe_failure(tmp_path):
    assert run_probe(_fake_python(tmp_path, "noise\n" + json.dumps(FULL)), timeout=30) == ProbeReport.from_json(FULL)
    with pytest.raises(TargetError) as info:
        run_probe(_fake_python(tmp_path, json.dumps({"schema": 1, "probe_error": ["x"]})), timeout=30)
    assert "'probe_error': expected a string" in str(info.value)
