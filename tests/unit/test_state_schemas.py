"""Property tests of the state-file schemas (hypothesis): every parser of a file rocmbuild reads,
given any JSON at all (and every valid record with one field replaced by a value of another type),
returns its frozen value or raises its documented error, never anything else (no TypeError,
KeyError or AttributeError escapes, no exit 1)."""

from __future__ import annotations

import copy
import dataclasses
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocmbuild.store import artifact, bundle
from rocmbuild.builder import retry
from rocmbuild.store.manifest import FileEntry, LibraryEntry, Manifest, parse_manifest
from rocmbuild.errors import ArtifactError, StateError
from rocmbuild.recipe.lockfile import Lock
from rocmbuild.recipe.overrides import Overrides
from rocmbuild.schema import SchemaError
from rocmbuild.swap import journal, knowntargets, statedir
from rocmbuild.swap.pathstate import PathState
from rocmbuild.swap.plan import Action, Plan

SHA = "a" * 64
COMMIT = "b" * 40
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
OTHER = [None, True, False, 0, -1, 7, 1.5, "", "x", "../../etc", [], [1], ["a"], {}, {"a": 1}, {"kind": "file"}]

# --------------------------------------------------------------------------------------------
# one valid record of each kind


def _manifest() -> dict:
    files = (FileEntry("lib/libMIOpen.so.1.0", "file", 3, SHA, 0o644, 1),
             FileEntry("lib/libMIOpen.so.1", "link", target="libMIOpen.so.1.0"))
    lib = LibraryEntry("libMIOpen", "lib/libMIOpen.so.1.0", "libMIOpen.so.1", ("lib/libMIOpen.so.1",),
                       ("libMIOpen.so.1", "libMIOpen.so.1.0"), SHA, 3)
    return Manifest("mini", SHA, "3.5.1", "3.5.1", "miopen", None, COMMIT, "develop", "file:///x", "/opt/rocm",
                    files, (lib,), ("share/miopen",), {"a": [1]}, "2026", 1, ("gfx1151",)).to_json()


def _plan() -> dict:
    before = PathState("file", 1, 2, 3, 4, 0o644, ctime_ns=5)
    a = Action("replace_file", "/env/lib/libMIOpen.so.1.0", "library", before, source="/cache/x", size=3,
               sha256=SHA, create_dirs=("/env/lib/d",))
    return Plan("apply", "/env", "/env/bin/python", "/env/lib", "conda", False, "/env/.rocmbuild", (a,),
                "/env/lib/libMIOpen.so.1.0", "/env/lib/libMIOpen.so.1.0", "3.5.0", "3.5.1", recipe="mini",
                commit=COMMIT, artifact=SHA, undoes=("0001-x",)).to_json()


TXN = "0001-20260101T000000Z"


def _journal() -> dict:
    return {"schema": 1, "id": TXN, "verb": "apply", "state": "committed", "created": "t", "pid": 1,
            "plan": _plan(), "meta": {"python": "/env/bin/python"}, "history_written": True,
            "steps": [{"index": 0, "after": PathState("file", 1, 9).to_json(), "swapped": True}],
            "prefix_identity": {"path": "/env", "realpath": "/env", "dev": 1, "ino": 2}}


def _history() -> dict:
    return {"id": TXN, "time": "t", "verb": "apply", "recipe": "mini", "commit": COMMIT, "artifact": SHA,
            "version_before": "3.5.0", "version_after": "3.5.1", "files": ["lib/x"], "outcome": "committed",
            "undoes": [], "backup_bytes": 3, "python": "bin/python", "prefix_identity": {"path": "/env"}}


def _lock() -> dict:
    return Lock("mini", "/r/mini.toml", SHA, "develop", COMMIT, Overrides(defines=("A=1",), jobs=2), "t").to_json()


def _provenance() -> dict:
    return {"source": "/b.tar.gz", "kind": "file", "bundle_sha256": SHA, "sha256_checked": True, "imported": "t"}


def _identity() -> dict:
    return {"schema": 1, "files": {"lib/x": {"size": 1, "mtime_ns": 2, "ctime_ns": 3, "inode": 4}, "lib/y": None}}


def _attempt() -> dict:
    return {"recipe": "mini", "commit": COMMIT, "key": SHA, "status": "failed", "started": "t", "ended": None}


# --------------------------------------------------------------------------------------------
# each parser, and what it may raise


_TMP = Path(tempfile.mkdtemp(prefix="rb-schemas-"))


def _journal_load(data):
    sdir = _TMP / "env" / ".rocmbuild"  # an own state dir: the journal's paths rebase onto its prefix
    (sdir / "journal").mkdir(parents=True, exist_ok=True)
    p = sdir / "journal" / f"{TXN}.json"
    p.write_text(json.dumps(data))
    return journal.Journal.load(p)


def _target_record(data):
    d = _TMP / "target"
    d.mkdir(exist_ok=True)
    (d / "target.json").write_text(json.dumps(data))
    return statedir.read_target_record(d)


def _known_record(data):
    p = _TMP / "knowntargets.json"
    p.write_text(json.dumps(data))
    return knowntargets.read_record(p)


PARSERS = {  # name: (parse, valid record, the documented error, what a success returns)
    "manifest": (Manifest.from_json, _manifest, SchemaError, Manifest),
    "manifest-import": (lambda d: parse_manifest(d, "b.tar.gz"), _manifest, ArtifactError, Manifest),
    "provenance": (lambda d: bundle.parse_provenance(d, "p.json"), _provenance, SchemaError, bundle.Provenance),
    "identity": (lambda d: artifact.parse_identity(d, "identity.json"), _identity, SchemaError, dict),
    "lock": (Lock.from_json, _lock, SchemaError, Lock),
    "attempt": (lambda d: retry.parse_attempt(d, "a.json"), _attempt, SchemaError, retry.AttemptRecord),
    "plan": (Plan.from_json, _plan, SchemaError, Plan),
    "action": (Action.from_json, lambda: _plan()["actions"][0], SchemaError, Action),
    "path-state": (PathState.from_json, lambda: _plan()["actions"][0]["before"], SchemaError, PathState),
    "journal": (_journal_load, _journal, SchemaError, journal.Journal),
    "history-line": (lambda d: statedir.parse_history_line(d, "history.jsonl line 1"), _history, SchemaError,
                     statedir.HistoryLine),
    "target-record": (_target_record, lambda: {"prefix": "/env", "libdir": "/opt/rocm/lib"}, StateError,
                      statedir.TargetRecord),
    "known-record": (_known_record, lambda: {"state_dir": "/env/.rocmbuild", "prefix": "/env"}, SchemaError,
                     knowntargets.KnownRecord),
}


def _paths(doc, here=()):
    """Every path (keys and indices) to a value inside ``doc``."""
    yield here
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, here + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, here + (i,))


def _replaced(doc, path, value):
    doc = copy.deepcopy(doc)
    if not path:
        return value
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


def _judge(name, data):
    parse, _valid, error, kind = PARSERS[name]
    try:
        out = parse(data)
    except error as exc:
        text = str(exc)
        assert "expected" in text or "cannot be read" in text, text  # it says what was expected
        return None
    assert out is None or isinstance(out, kind), out
    return out


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_the_valid_record_parses(name):
    parse, valid, _error, kind = PARSERS[name]
    assert isinstance(parse(valid()), kind)


@pytest.mark.parametrize("name", sorted(PARSERS))
@SETTINGS
@given(data=json_values)
def test_any_json_gives_a_value_or_the_documented_error(name, data):
    _judge(name, data)


@pytest.mark.parametrize("name", sorted(PARSERS))
@SETTINGS
@given(data=st.data())
def test_a_field_of_another_type_gives_a_value_or_the_documented_error(name, data):
    valid = PARSERS[name][1]()
    path = data.draw(st.sampled_from(list(_paths(valid))))
    value = data.draw(st.sampled_from(OTHER) | json_values)
    _judge(name, _replaced(valid, path, value))


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_each_field_of_another_type_is_named(name):
    """Every top-level field replaced by a value of a type it never has: refused, naming it."""
    valid = PARSERS[name][1]()
    parse, _v, error = PARSERS[name][:3]
    for key, now in valid.items():
        for wrong in [w for w in ({"a": [1]}, [[1]]) if type(w) is not type(now)]:
            try:
                parse({**valid, key: wrong})
            except error as exc:
                assert repr(key) in str(exc) or f"'{key}." in str(exc) or f"'{key}[" in str(exc), (key, str(exc))
            else:
                pytest.fail(f"{name}: {key} = {wrong!r} was accepted")


def test_the_history_reader_keeps_every_good_line(tmp_path):
    """A bad line hides nothing else: history_lines reads around it."""
    sdir = tmp_path / ".rocmbuild"
    sdir.mkdir()
    good = json.dumps(_history())
    lines = [good, "[1]", json.dumps({**_history(), "commit": 7}), "{", "9" * 5000, "[" * 5000, good]
    (sdir / "history.jsonl").write_text("\n".join(lines) + "\n")
    ok, bad = statedir.history_lines(sdir)
    assert len(ok) == 2 and [u.line for u in bad] == [2, 3, 4, 5, 6]
    assert "'commit'" in bad[1].error and ok[0].files == (str(tmp_path / "lib/x"),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ok[0].id = "x"  # frozen


@SETTINGS
@given(lines=st.lists(json_values.map(json.dumps) | st.text(max_size=20), max_size=6))
def test_history_lines_never_raise(lines):
    sdir = _TMP / "hist" / ".rocmbuild"
    sdir.mkdir(parents=True, exist_ok=True)
    (sdir / "history.jsonl").write_text("\n".join(x.replace("\n", " ") for x in lines) + "\n")
    ok, bad = statedir.history_lines(sdir)
    assert len(ok) + len(bad) <= len(lines)


def test_a_known_target_record_that_cannot_be_read_is_listed(tmp_path):
    """cache gc removes no artifact while one is listed (it may name a target that uses them)."""
    reg = tmp_path / "known-targets"
    reg.mkdir()
    (reg / "a.json").write_text(json.dumps({"state_dir": "/env/.rocmbuild", "prefix": "/env"}))
    (reg / "b.json").write_text(json.dumps({"state_dir": 7}))
    (bad,) = knowntargets.unreadable_records(tmp_path)
    assert "b.json" in bad and "'state_dir'" in bad and "expected" in bad
    assert [t.state_dir for t in knowntargets.known(tmp_path)] == ["/env/.rocmbuild"]
