"""The pure pieces of readable state: the status summary (stock unknown said honestly), keys
shortened in text, tables and prose that fit a width without splitting a word."""

from __future__ import annotations

import re

from rocmbuild.cli import textlayout
from rocmbuild.results import InEffect, StatusChanges, Stock
from rocmbuild.results.stateresult import summary
from rocmbuild.results.swaprecords import Drift, Unreadable


def _apply(txn: str, recipe: str = "miopen-3.5.1", after: str | None = "3.5.1") -> InEffect:
    return InEffect(txn, "apply", recipe, "c" * 40, "3.5.0", after, ("/p/lib/libMIOpen.so.1.0",))


def test_summary_says_stock_unknown_when_the_first_transaction_recorded_no_version():
    c = StatusChanges(in_effect=(_apply("0003-20261129T235719Z"),), stock=Stock("0001-20261129T235717Z", None))
    assert summary(c, "3.5.1") == "miopen-3.5.1 3.5.1 (txn 0003) over stock unknown"


def test_summary_names_the_latest_apply_across_state_dirs_and_appends_what_is_wrong():
    older = _apply("0009-20261129T100000Z", "a")  # numbered in another state dir, earlier in time
    newer = _apply("0001-20261130T100000Z", "b", None)
    c = StatusChanges(in_effect=(older, newer), stock=Stock("0009-20261129T100000Z", "3.5.0"),
                      drift=(Drift("/p/x", "0001-20261130T100000Z", "file", "absent"),),
                      unreadable=(Unreadable("journal", "/p/.rocmbuild/journal/7.json", "bad"),))
    assert summary(c, None) == ("b ? (txn 0001) over stock 3.5.0; DRIFT: 1 path(s) changed since rocmbuild "
                                "placed them; 1 state file(s) cannot be read")
    assert summary(StatusChanges(), None) == "stock unknown: rocmbuild has changed nothing in this target"
    torn = StatusChanges(unreadable=(Unreadable("journal", "/p/.rocmbuild/journal/1.json", "torn"),))
    assert summary(torn, "3.5.1") == ("3.5.1 loaded now; what rocmbuild changed here is unknown; "
                                      "1 state file(s) cannot be read")  # never "changed nothing"


def test_short_keys_shortens_every_64_hex_run_and_nothing_shorter():
    key, commit = "ab" * 32, "c" * 40
    text = textlayout.short_keys(f"cache {key}: /home/x/artifacts/.tmp-{key}-12/destdir @ {commit}")
    assert not re.search(r"[0-9a-f]{64}", text)
    assert f"cache {key[:16]}…:" in text and f".tmp-{key[:16]}…-12/" in text and commit in text
    assert textlayout.short_keys("a" * 65) == "a" * 65  # not a key: a longer run is left alone


def test_wrap_breaks_at_spaces_and_after_slashes_never_inside_a_name():
    text = "history of /tmp/pytest-of-root/pytest-12/test_something_long0/env1-conda-3.5.0 (newest first)"
    out = textlayout.wrap(text, 30)
    assert all(len(line) <= 30 for line in out.splitlines()), out
    assert "".join(out.split()) == "".join(text.split())  # nothing lost, nothing added but breaks
    for name in ("pytest-of-root/", "test_something_long0/", "env1-conda-3.5.0", "(newest"):
        assert any(name in line for line in out.splitlines()), (name, out)


def test_table_fits_or_says_it_cannot():
    rows = [("0003 rollback", "2026-11-29 23:57:19", "miopen-develop (undoes 0002)", "3.6.0 -> 3.5.0",
             ("in effect", "backups pruned"))]
    headers = ("txn", "when", "what", "version", "state")
    for cols in (60, 200):
        out = textlayout.table(headers, rows, cols)
        assert out is not None and max(len(line) for line in out.splitlines()) <= cols, out
        assert "miopen-develop" in out and "rollback" in out and "pruned" in out
    wide = textlayout.table(headers, rows, 200)
    assert "0003 rollback  2026-11-29 23:57:19  miopen-develop (undoes 0002)" in wide
    assert textlayout.table(headers, rows, 30) is None  # the longest words do not fit: the caller lists rows


# --------------------------------------------------------------------------------------------
# every value shown passes names.safe_text

HOSTILE = "evil\x1b[2J\r\nFAKE: all good\u202e"


def _inert(text: str) -> None:
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text, repr(text)
    assert not [line for line in text.splitlines() if line.lstrip(" │├└─|`-").startswith("FAKE")], text


def test_tables_trees_and_lines_escape_every_value():
    rows = [("0001 apply", "2026-11-29", HOSTILE, "3.5.0 -> 3.5.1", ("in effect", HOSTILE))]
    out = textlayout.table(("txn", "when", "what", "version", "state"), rows, 400)
    _inert(out)
    assert "evil\\x1b[2J" in out and "in effect" in out
    tree = textlayout.tree(HOSTILE, [(HOSTILE, [HOSTILE, "ok"])], 200)
    _inert(tree)
    assert tree.count("evil\\x1b[2J\\x0d\\x0aFAKE: all good\\u202e") == 3
    lines = textlayout.lines(["one", HOSTILE, "three"])
    _inert(lines)
    assert lines.splitlines()[0] == "one" and lines.splitlines()[2] == "three"


def test_a_hostile_history_record_renders_as_one_row_of_escaped_cells():
    from rocmbuild.cli.statetext import history_row
    from rocmbuild.results import HistoryRow
    from rocmbuild.swap.statedir import HistoryLine

    row = history_row(HistoryRow(HistoryLine(id="0001-20261129T235717Z", verb="apply", recipe=HOSTILE,
                                             commit="c" * 12 + HOSTILE, time="2026-11-29T23:57:17Z",
                                             version_before=HOSTILE, version_after="3.5.1", outcome=HOSTILE)))
    out = textlayout.table(("txn", "when", "what", "version", "state"), [row], 400)
    _inert(out)
    assert out.count("FAKE: all good") == 3 and len(out.splitlines()) == 3  # recipe, version, state: one row


def test_status_changes_and_checks_render_stored_and_reported_text_escaped():
    from rocmbuild.builder.requirements import DoctorCheck
    from rocmbuild.cli.render import status_changes
    from rocmbuild.results.verdict import Check

    c = StatusChanges(in_effect=(_apply("0001-20261129T235717Z", HOSTILE, HOSTILE),),
                      unreadable=(Unreadable("journal", "/p/.rocmbuild/journal/1.json", HOSTILE),))
    _inert(status_changes(c, "/p"))
    doctor = DoctorCheck("requires x", "fail", HOSTILE, HOSTILE).render()
    _inert(doctor)
    assert len(doctor.splitlines()) == 2
    check = Check("torch version", False, "3.5.1", HOSTILE, HOSTILE).render()
    _inert(check)
    assert len(check.splitlines()) == 2
