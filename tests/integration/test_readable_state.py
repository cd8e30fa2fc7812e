"""State a person can read: `status`'s one-line summary, drift with versions, `history` as a table
that fits the terminal (and `--limit`), `apply --dry-run` as a before -> after tree with versions
and the compatibility verdict, and no 64-hex key anywhere in text.

Real `python -m rocmbuild` processes against real fake-torch venvs and the session's real
artifacts (txn_world); `COLUMNS` sets the width as a terminal would.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.support.cli import rb

pytestmark = pytest.mark.slow

HEX64 = re.compile(r"[0-9a-f]{64}")
HEX16 = re.compile(r"\b[0-9a-f]{16}\b")


@pytest.fixture
def env350(target_env):
    return target_env("3.5.0", layout="conda", compile_version="3.5.1")


def _ok(*args, env=None):
    r = rb(*map(str, args), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def _json(*args):
    return json.loads(_ok(*args, "--json").stdout)


def _first_line(prefix) -> str:
    return _ok("status", "--env", prefix).stdout.splitlines()[0]


def test_status_says_in_one_line_what_is_in_effect_over_the_stock_version(txn_home, env350):
    p = env350.prefix
    assert _first_line(p) == "stock 3.5.0: rocmbuild has changed nothing in this target"
    assert _json("status", "--env", p)["changes"]["stock"] is None
    _ok("apply", txn_home.recipe("mini"), "--env", p)
    assert _first_line(p) == "mini 3.5.1 (txn 0001) over stock 3.5.0"
    _ok("apply", txn_home.recipe("mini-fix"), "--env", p)
    s = _json("status", "--env", p)
    assert s["summary"] == "mini-fix 3.5.1 (txn 0002) over stock 3.5.0"
    assert s["changes"]["stock"]["version"] == "3.5.0" and s["changes"]["stock"]["txn"].startswith("0001-")
    text = _ok("status", "--env", p).stdout
    assert text.splitlines()[0] == s["summary"] and "[in effect]" not in text
    # grouped per transaction: one heading line each, its paths on the line below
    heads = [line for line in text.splitlines() if line.startswith("  txn ")]
    assert [h.split()[1][:4] for h in heads] == ["0001", "0002"]
    assert "apply mini-fix" in heads[1] and "3.5.1 -> 3.5.1" in heads[1]
    assert "lib/libMIOpen.so.1.0" in text.split(heads[1], 1)[1].splitlines()[1]
    _ok("rollback", "--env", p)
    assert _first_line(p) == "mini 3.5.1 (txn 0001) over stock 3.5.0"
    _ok("rollback", "--env", p)
    assert _first_line(p) == "stock 3.5.0: every apply rocmbuild made here is undone"


def test_drift_says_what_was_placed_and_what_is_there_now_with_versions(txn_home, env350, fixture_libs):
    p = env350.prefix
    _ok("apply", txn_home.recipe("mini"), "--env", p)
    placed_sha = _json("status", "--env", p)["changes"]["in_effect"][0]
    lib = p / "lib/libMIOpen.so.1.0"
    with open(fixture_libs("3.4.0") / "libMIOpen.so.1.0", "rb") as src, open(lib, "r+b") as dst:
        shutil.copyfileobj(src, dst)  # `cp` over the file in place: the same inode, other bytes
        dst.truncate()
    db = next((p / "share/miopen/db").iterdir())
    db.unlink()
    s = _json("status", "--env", p)
    drift = {d["path"]: d for d in s["changes"]["drift"]}
    d = drift[str(lib)]
    assert d["placed_version"] == "3.5.1" and d["found_version"] == "3.4.0" and d["found_version_from"] == "process"
    assert d["written_in_place"] and d["found_kind"] == "file" and len(d["placed_sha256"]) == 64
    assert "inode" in d["expected"] and "bytes" in d["found"]  # identities stay in the JSON
    assert drift[str(db)]["found_kind"] == "absent"
    assert "DRIFT: 2 path(s)" in s["summary"] and s["summary"].startswith("mini 3.5.1 (txn 0001) over stock 3.5.0")
    text = _ok("status", "--env", p).stdout
    lines = {line.split(":", 1)[0]: line for line in text.splitlines() if line.startswith("DRIFT ")}
    lib_line = lines["DRIFT lib/libMIOpen.so.1.0"]
    assert f"placed 3.5.1 (sha {d['placed_sha256'][:16]}) by txn 0001" in lib_line
    assert "now overwritten in place" in lib_line and "version 3.4.0, as the target's torch reports it" in lib_line
    db_line = lines[f"DRIFT share/miopen/db/{db.name}"]
    assert "now missing" in db_line
    for line in lines.values():
        assert "inode" not in line and "bytes" not in line and not HEX64.search(line)
    assert placed_sha["recipe"] == "mini"


def test_drift_of_a_file_the_torch_does_not_load_says_version_unknown(txn_home, target_env, fixture_libs):
    env = target_env("3.5.0", layout="conda", compile_version="3.5.1")
    p = env.prefix
    _ok("apply", txn_home.recipe("mini"), "--env", p)
    lib = p / "lib/libMIOpen.so.1.0"
    tmp = lib.parent / ".update"
    shutil.copyfile(fixture_libs("3.4.0") / "libMIOpen.so.1.0", tmp)
    tmp.rename(lib)  # a package manager's update: a new file renamed over ours
    env.configure(load=str(fixture_libs("3.5.0") / "libMIOpen.so.1.0"))  # torch now loads another file
    line = next(x for x in _ok("status", "--env", p).stdout.splitlines() if x.startswith("DRIFT lib/"))
    assert "now a different file (version unknown: the target's torch does not load it)" in line


def _history_world(txn_home, prefix):
    _ok("apply", txn_home.recipe("mini"), "--env", prefix)
    _ok("apply", txn_home.recipe("mini-fix"), "--env", prefix)
    _ok("rollback", "--env", prefix)
    _ok("rollback", "--env", prefix)


def _tokens(text: str) -> set[str]:
    return {w for w in text.split() if w.strip("─")}  # the header rule is as wide as the table


def test_history_is_a_table_that_fits_the_terminal_newest_first(txn_home, env350):
    p = env350.prefix
    _history_world(txn_home, p)
    narrow = _ok("history", "--env", p, env={"COLUMNS": "60"}).stdout
    wide = _ok("history", "--env", p, env={"COLUMNS": "200"}).stdout
    assert max(len(line) for line in narrow.splitlines()) <= 60, narrow
    # no word split: every word of the narrow table is a word of the wide one (a long path may
    # break after a "/", never inside a name)
    wide_words = _tokens(wide)
    for w in _tokens(narrow) - wide_words:
        assert w.endswith("/") or any(("/" + w) in x for x in wide_words), (w, narrow)
    for word in ("mini-fix", "done", "undone", "rollback", "3.5.0", "3.5.1", "(undoes", "stock", "apply"):
        assert word in _tokens(narrow), (word, narrow)
    rows = [line for line in wide.splitlines() if re.match(r"^000\d ", line)]
    assert [r.split()[0] for r in rows] == ["0004", "0003", "0002", "0001"]  # newest first
    # a rollback is never "in effect": it is done, and marks what it undid
    assert "rollback" in rows[0] and "(undoes 0001)" in rows[0] and "in effect" not in rows[0] and "done" in rows[0]
    assert "undone by 0004" in rows[3] and "undone by 0003" in rows[2]
    assert "apply" in rows[2] and "mini-fix" in rows[2] and "3.5.1 -> 3.5.1" in rows[2] and "undone" in rows[2]
    assert max(len(line) for line in wide.splitlines()) <= 200
    assert not HEX64.search(narrow + wide)
    # too narrow for the table's longest words: one wrapped block per transaction, newest first
    tiny = _ok("history", "--env", p, env={"COLUMNS": "40"}).stdout
    assert max(len(line) for line in tiny.splitlines()) <= 40, tiny
    blocks = [line.split()[0] for line in tiny.splitlines() if re.match(r"^  000\d ", line)]
    assert blocks == ["0004", "0003", "0002", "0001"], tiny


def test_history_limit_shows_the_newest_n(txn_home, env350):
    p = env350.prefix
    _history_world(txn_home, p)
    text = _ok("history", "--env", p, "--limit", "2", env={"COLUMNS": "200"}).stdout
    rows = [line for line in text.splitlines() if re.match(r"^000\d ", line)]
    assert [r.split()[0] for r in rows] == ["0004", "0003"]
    assert "the newest 2 of 4 transactions" in text
    h = _json("history", "--env", p, "--limit", "2")
    assert [t["id"][:4] for t in h["transactions"]] == ["0003", "0004"]  # JSON: still oldest first
    assert h["limit"] == 2 and h["total"] == 4
    full = _json("history", "--env", p)
    assert full["limit"] is None and full["total"] == 4 and len(full["transactions"]) == 4
    bad = rb("history", "--env", p, "--limit", "0", "--json")
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"]["type"] == "InputError"


def test_dry_run_is_a_before_after_tree_with_versions_and_the_verdict(txn_home, env350):
    p = env350.prefix
    r = _ok("apply", txn_home.recipe("mini"), "--env", p, "--dry-run", env={"COLUMNS": "200"})
    text = r.stdout
    assert not HEX64.search(text + r.stderr), text
    assert "libMIOpen.so.1.0: file 3.5.0 (loaded now) -> mini 3.5.1 (sha " in text
    assert "libMIOpen.so.1: link -> libMIOpen.so.1.0, kept as it is" in text
    assert re.search(r"gfx1151\.db\.txt: absent -> file from mini \(sha [0-9a-f]{16}\)", text)
    assert "2 path(s) would change, 2 already as wanted" in text
    assert "compatibility: ok: artifact 3.5.1 vs compiled 3.5.1" in text
    assert "verification after the swap expects 3.5.1" in text
    assert re.search(r"\(artifact [0-9a-f]{16}\) on ", text) and HEX16.search(text)
    assert re.search(r"[├└]── lib\n", text) or "── lib" in text  # the tree: directory, then its files
    j = _json("apply", txn_home.recipe("mini"), "--env", p, "--dry-run")
    tp = j["target_plan"]
    assert tp["compatibility"]["ok"] is True and tp["artifact_version"] == "3.5.1"
    assert len(tp["plan"]["artifact"]) == 64 and len(j["build"]["cache"]["key"]) == 64  # full in JSON
    plan = _ok("plan", txn_home.recipe("mini"))  # the build plan alone: its key and build dirs shortened too
    assert not HEX64.search(plan.stdout) and f"cache    {j['build']['cache']['key'][:16]}…" in plan.stdout
    # an incompatible artifact: the refusal, no 64-hex either
    bad = rb("apply", txn_home.recipe("mini-develop"), "--env", p, "--dry-run")
    assert bad.returncode == 2 and not HEX64.search(bad.stdout + bad.stderr)


def test_no_64_hex_in_status_text_even_with_hashes(txn_home, env350):
    p = env350.prefix
    _ok("apply", txn_home.recipe("mini"), "--env", p)
    text = _ok("status", "--env", p, "--hash").stdout
    assert not HEX64.search(text) and HEX16.search(text)
    assert len(_json("status", "--env", p, "--hash")["libraries"][0]["sha256"]) == 64
