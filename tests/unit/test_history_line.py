"""A history line is a frozen HistoryLine parsed once by HISTORY_SPEC: written whole by
append_history (to_json), read back equal (the keys the schema does not name kept in ``extra``),
a wrong-typed field refused naming it (reported with its line number, the other lines read)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rocmbuild.schema import SchemaError
from rocmbuild.swap import statedir
from rocmbuild.swap.landing import PrefixIdentity, origin
from rocmbuild.swap.statedir import HistoryLine

TXN = "0001-20260101T000000Z"
LINE = HistoryLine(id=TXN, verb="apply", time="2026-01-01T00:00:00+00:00", recipe="mini", commit="b" * 40,
                   artifact="a" * 64, version_before="3.5.0", version_after="3.5.1", files=("lib/libMIOpen.so.1.0",),
                   outcome="committed", undoes=(), python="bin/python", backup_bytes=12,
                   prefix_identity=PrefixIdentity("/env", "/env", 1, 2), extra={"newer": {"a": [1]}})


def test_a_line_is_written_whole_and_read_back_equal(tmp_path):
    sdir = tmp_path / "env" / ".rocmbuild"
    sdir.mkdir(parents=True)
    statedir.append_history(sdir, LINE)
    statedir.append_history(sdir, dataclasses.replace(LINE, id="0002-x", verb="rollback", undoes=(TXN,), extra={}))
    first, second = statedir.read_history(sdir)
    # read back rebased onto the prefix the state dir is in now; everything else as written
    assert first == dataclasses.replace(LINE, files=(str(tmp_path / "env/lib/libMIOpen.so.1.0"),),
                                        python=str(tmp_path / "env/bin/python"))
    assert second.undoes == (TXN,) and second.verb == "rollback" and second.extra == {}
    raw = json.loads((sdir / "history.jsonl").read_text().splitlines()[0])
    assert raw["newer"] == {"a": [1]} and raw["prefix_identity"] == {"path": "/env", "realpath": "/env", "dev": 1, "ino": 2}
    assert statedir.parse_history_line(raw, "h") == LINE  # a round trip holds
    assert "artifact_path" not in raw  # an optional field is written only when known


@pytest.mark.parametrize("field, value, named", [
    ("files", "lib/x", "files"), ("files", ["lib/x", 3], "files[1]"), ("backup_bytes", -1, "backup_bytes"),
    ("backup_bytes", True, "backup_bytes"), ("verb", "install", "verb"), ("commit", "../../x", "commit"),
    ("prefix_identity", {"path": "/env", "dev": "1"}, "prefix_identity.dev"), ("python", 7, "python"),
    ("id", None, "id"),
])
def test_a_wrong_typed_field_is_named(field, value, named):
    with pytest.raises(SchemaError) as info:
        statedir.parse_history_line({**LINE.to_json(), field: value}, "history.jsonl line 3")
    assert info.value.field == named and str(info.value).startswith(f"history.jsonl line 3: field {named!r}: expected")


def test_a_refused_line_is_reported_with_its_number_and_hides_nothing(tmp_path):
    sdir = tmp_path / ".rocmbuild"
    sdir.mkdir()
    good = json.dumps(LINE.to_json())
    (sdir / "history.jsonl").write_text("\n".join([good, json.dumps({**LINE.to_json(), "undoes": "x"}), good]) + "\n")
    ok, (bad,) = statedir.history_lines(sdir)
    assert [x.id for x in ok] == [TXN, TXN] and bad.line == 2 and "'undoes': expected a list" in bad.error


def test_origin_takes_the_typed_identity(tmp_path):
    here = PrefixIdentity(str(tmp_path), str(tmp_path.resolve()))
    assert origin(here, tmp_path) == "here" and origin(PrefixIdentity("/gone"), tmp_path) is None
