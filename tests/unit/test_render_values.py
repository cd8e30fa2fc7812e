"""The renderers read result values (a Target and its ProbeReport, LibraryStatus, HistoryRow),
not their to_json() dicts; the text is what it was when they read the dicts (these lines were
checked identical against the renderers before the change)."""

from __future__ import annotations

import json
from pathlib import Path

from rocmbuild.cli import oneline, render
from rocmbuild.environment.activation import Activation, Change
from rocmbuild.environment.probe import ProbeReport
from rocmbuild.environment.target import Target
from rocmbuild.results import HistoryResult, HistoryRow, LibraryStatus, StatusChanges, StatusResult
from rocmbuild.swap import statedir
from rocmbuild.swap.strays import Stray

REPORT = {
    "python": "/env/bin/python", "prefix": "/env", "python_version": "3.11.7", "torch_version": "2.7.1+rocm7.0",
    "hip": "7.0.51831", "version_error": "RuntimeError: cuDNN version incompatibility", "version_int_retry": 3005001,
    "runtime_version": [3, 5, 1], "compile_version": [3, 5, 0],
    "libraries": [{"path": "/env/lib/libMIOpen.so.1.0", "kind": "miopen", "dev_major": 254, "dev_minor": 1,
                   "inode": 42, "deleted": True, "sha256": "a" * 64}],
}


def test_status_text_reads_the_target_and_its_libraries():
    rep = ProbeReport.from_json(REPORT)
    act = Activation("conda", "sourced by rocmbuild", "/env", ("etc/conda/activate.d/rocm.sh",),
                     (Change("LD_LIBRARY_PATH", None, "/opt/rocm/lib", "etc/conda/activate.d/rocm.sh"),))
    t = Target(Path("/env"), Path("/env/bin/python"), rep, Path("/env/.rocmbuild"), origin="$CONDA_PREFIX", activation=act)
    lib = LibraryStatus(rep.libraries[0], True, "conda", "3.5.1", ("/env/lib/libMIOpen.so.1",),
                        (Stray("/env/lib/libMIOpen.so.0", True, "", "file"),), preload=True)
    lines = render.text(StatusResult(t, (lib,), StatusChanges())).splitlines()
    assert lines[1:6] == [
        "target: /env (from $CONDA_PREFIX; python /env/bin/python, 3.11.7)",
        "activation: conda, sourced by rocmbuild: etc/conda/activate.d/rocm.sh; sets LD_LIBRARY_PATH "
        "(etc/conda/activate.d/rocm.sh)",
        "torch 2.7.1+rocm7.0: ROCm 7.0.51831; compiled against 3.5.0, runtime 3.5.1, cudnn.version() = raises "
        "RuntimeError: cuDNN version incompatibility (then 3005001)",
        "  miopen /env/lib/libMIOpen.so.1.0 (deleted) 3.5.1: conda, inside the prefix via /env/lib/libMIOpen.so.1; "
        "device fe:01 inode 42 sha256 aaaaaaaaaaaaaaaa…",
        "    stray /env/lib/libMIOpen.so.0: libMIOpen.so.0 (file): sorted first, it is what TheRock's preload loads",
    ]


def test_history_text_brief_and_json_read_history_rows(tmp_path, monkeypatch):
    d = tmp_path / "env" / ".rocmbuild"
    d.mkdir(parents=True)
    lines = [
        {"id": "0001-20260101T000000Z", "time": "2026-01-01T00:00:00Z", "verb": "apply", "recipe": "mini",
         "commit": "b" * 40, "version_before": "3.5.0", "version_after": "3.5.1", "files": ["lib/x"],
         "outcome": "committed", "prefix_identity": {"path": "/elsewhere", "realpath": "/elsewhere"}},
        {"id": "0002-20260102T000000Z", "time": "2026-01-02T00:00:00Z", "verb": "rollback", "recipe": "mini",
         "version_before": "3.5.1", "version_after": "3.5.0", "outcome": "committed", "undoes": ["0001-20260101T000000Z"]},
    ]
    (d / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    first, second = statedir.read_history(d)
    rows = (HistoryRow(first, kind="apply", undone_by=second.id, redo_next=True, backups_pruned=True, state_dir=str(d),
                       origin="copied"),
            HistoryRow(second, kind="rollback", restores_to="stock", state_dir=str(d), origin="here"))
    h = HistoryResult("/env", rows, (), 0, limit=2, total=5)
    monkeypatch.setenv("COLUMNS", "200")
    text = render.text(h)
    assert "0002 rollback  2026-01-02 00:00:00  mini (undoes 0001); back to stock  3.5.1 -> 3.5.0  done" in text
    assert "0001 apply     2026-01-01 00:00:00  mini @ bbbbbbbbbbbb" in text and "copied from /elsewhere" in text
    assert "the newest 2 of 5 transactions (--limit 2)" in text
    assert oneline.brief(h).splitlines()[1] == ("0001-20260101T000000Z apply 2026-01-01T00:00:00Z mini 3.5.0 -> 3.5.1 "
                                              "(undone by 0002; `redo` undoes it; backups pruned; copied from /elsewhere)")
    j = h.to_json()["transactions"][0]
    assert j["files"] == [str(tmp_path / "env/lib/x")] and j["undone_by"] == second.id and j["origin"] == "copied"
    assert j["prefix_identity"] == {"path": "/elsewhere", "realpath": "/elsewhere"} and j["kind"] == "apply"
