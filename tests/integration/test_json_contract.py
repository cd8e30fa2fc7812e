"""The `--json` contract of docs/json.md, held against the real CLI.

Every verb runs as a real ``python -m rocmbuild ... --json`` process (``rb``), once in a success
case and in at least one failure case, and its stdout must be exactly ONE JSON object with
``ok``/``verb``/``exit_code`` consistent with the process exit status; on failure ``error.message``
and ``error.hint`` are non-empty strings. The verb-specific top-level keys are read from the
``<!-- keys: NAME -->`` tables of docs/json.md: every documented key (not marked *optional*) must
be present, and no undocumented top-level key may appear (keys may be added -- in the doc first).

Artifacts come from the session ``txn_world`` (every build/apply here is a cache hit).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import REPO, rb
from tests.support.machine import make_rocm_tree

pytestmark = pytest.mark.usefixtures("txn_home")

DOC = REPO / "docs" / "json.md"
EXIT_CODES = {0, 1, 2, 3, 4, 5, 129, 130, 143}


# --------------------------------------------------------------------------------------------
# the documented contract, read from docs/json.md


def _doc_tables() -> dict[str, dict[str, bool]]:
    """NAME -> {key: optional} from each ``<!-- keys: NAME -->`` table."""
    tables: dict[str, dict[str, bool]] = {}
    lines = DOC.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"<!-- keys: ([\w-]+) -->", line.strip())
        if not m:
            continue
        keys: dict[str, bool] = {}
        for row in lines[i + 1:]:
            if not row.startswith("|"):
                break
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            km = re.fullmatch(r"`(\w+)`", cells[0])
            if km:
                keys[km.group(1)] = "*optional*" in row
        assert keys, f"empty key table {m.group(1)} in {DOC}"
        tables[m.group(1)] = keys
    return tables


TABLES = _doc_tables()
COMMON = set(TABLES["common"])
VERBS = ["recipes", "show", "plan", "build", "status", "verify", "doctor", "cache", "export", "lock", "apply",
         "rollback", "redo", "history", "recover", "demo", "completion", "push", "key", "config", "log"]


def test_the_doc_documents_every_verb_and_the_error_object():
    assert COMMON == {"ok", "verb", "exit_code"}
    assert {"message", "hint", "type"} <= set(TABLES["error"]) and TABLES["error"]["details"] is True
    for v in VERBS + ["apply-dry-run"]:
        assert v in TABLES, f"docs/json.md has no key table for {v}"
    from rocmbuild.cli import app as cli

    _parser, handlers = cli.build_parser()
    assert set(handlers) == set(VERBS), "a verb was added or removed: document its JSON in docs/json.md"


# --------------------------------------------------------------------------------------------
# checking one run


def _one_object(proc: subprocess.CompletedProcess) -> dict:
    """stdout is exactly one JSON object (whitespace around it allowed, nothing else)."""
    out = proc.stdout
    assert out.strip(), f"nothing on stdout (exit {proc.returncode}); stderr:\n{proc.stderr}"
    dec = json.JSONDecoder()
    start = len(out) - len(out.lstrip())
    obj, end = dec.raw_decode(out, start)
    assert out[end:].strip() == "", f"more than one JSON value / extra text on stdout: {out[end:end + 200]!r}"
    assert isinstance(obj, dict), f"stdout is JSON but not an object: {type(obj).__name__}"
    return obj


def _common(proc, verb: str | None) -> dict:
    d = _one_object(proc)
    assert COMMON <= set(d), sorted(d)
    assert d["verb"] == verb
    assert isinstance(d["exit_code"], int) and d["exit_code"] == proc.returncode
    assert proc.returncode in EXIT_CODES
    assert d["ok"] is (proc.returncode == 0)
    return d


def ok(proc, verb: str, table: str | None = None) -> dict:
    """A success: exit 0, ok true, no error, exactly the documented top-level keys."""
    assert proc.returncode == 0, proc.stderr
    d = _common(proc, verb)
    assert "error" not in d
    keys = TABLES[table or verb]
    required = {k for k, opt in keys.items() if not opt}
    present = set(d) - COMMON
    assert required <= present, f"{verb}: documented keys missing: {sorted(required - present)}"
    assert present <= set(keys), f"{verb}: undocumented top-level keys: {sorted(present - set(keys))}"
    return d


def fail(proc, verb: str | None, code: int, etype: str | None = None) -> dict:
    """A failure: the given exit code, ok false, ``{ok, verb, exit_code, error}`` and nothing else."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    d = _common(proc, verb)
    assert set(d) == COMMON | {"error"}, sorted(d)
    err = d["error"]
    assert isinstance(err, dict)
    keys = TABLES["error"]
    assert {k for k, opt in keys.items() if not opt} <= set(err) <= set(keys), sorted(err)
    for k in ("message", "hint", "type"):
        assert isinstance(err[k], str) and err[k].strip(), f"error.{k} empty: {err!r}"
    if etype:
        assert err["type"] == etype, err
    if "details" in err:
        assert isinstance(err["details"], dict) and err["details"]
    return err


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture
def env350(target_env):
    """A conda-layout env that loads MIOpen 3.5.0 under a torch compiled against 3.5.1."""
    return target_env("3.5.0", layout="conda", compile_version="3.5.1")


@pytest.fixture
def fake_rocm(tmp_path) -> dict[str, str]:
    """ROCM_PATH with the files doctor looks for (presence only)."""
    return {"ROCM_PATH": str(make_rocm_tree(tmp_path / "rocm"))}


HOLDER = textwrap.dedent("""
    import sys, time
    from rocmbuild.fs import disk
    from rocmbuild.home import cache_home
    from rocmbuild.swap import statedir
    lock = statedir.TargetLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    lock.release()
""")


# --------------------------------------------------------------------------------------------
# recipes / show / plan / build / export / lock (no target)


def test_recipes_show_plan(txn_home):
    mini = txn_home.recipe("mini")
    d = ok(rb("recipes", "--recipes-dir", txn_home.recipes, "--json"), "recipes")
    assert "mini" in [r["name"] for r in d["recipes"]]
    assert all(set(r) == {"name", "path", "description", "error"} for r in d["recipes"])
    assert str(txn_home.recipes) in d["search_path"]
    # recipes cannot fail but on usage: argparse rejects the line before the verb is known
    fail(rb("recipes", "--bogus", "--json"), "recipes", 2, "InputError")
    fail(rb("apply", "--keep", "0", "--json"), "apply", 2, "InputError")
    fail(rb("verify", "--expect", "banana", "--json"), "verify", 2, "InputError")
    fail(rb("status", "--probe-timeout", "-1", "--json"), "status", 2, "InputError")

    d = ok(rb("show", mini, "--json"), "show")
    assert d["name"] == "mini" and isinstance(d["recipe"], dict) and d["recipe"]["name"] == "mini"
    fail(rb("show", "no-such-recipe", "--json"), "show", 2, "RecipeError")

    d = ok(rb("plan", mini, "--json"), "plan")
    assert d["recipe"] == "mini" and d["source"]["resolved"] is True and d["cache"]["cached"] is True
    assert set(d["commands"]) == {"configure", "build", "install"}
    d = ok(rb("plan", mini, "--offline", "--json"), "plan")
    assert d["source"]["commit"] is None and d["cache"]["key"] is None and d["notes"]
    fail(rb("plan", "no-such-recipe", "--json"), "plan", 2, "RecipeError")


def test_build_export_lock(txn_home, tmp_path):
    mini = txn_home.recipe("mini")
    art = txn_home.artifacts["mini"]
    d = ok(rb("build", mini, "--json"), "build")
    assert d["cached"] is True and d["key"] == art.key and d["version"] == "3.5.1"
    assert [lib["name"] for lib in d["libraries"]] == ["libMIOpen"]
    fail(rb("build", "--json"), "build", 2, "InputError")
    err = fail(rb("build", mini, "--ref", "no-such-ref", "--json"), "build", 3, "FetchError")
    assert err["details"]["ref"] == "no-such-ref"

    bundle = tmp_path / "ship" / "mini.tar.gz"
    d = ok(rb("export", mini, "-o", bundle, "--json"), "export")
    assert d["file"] == str(bundle) and Path(d["sha256_file"]).is_file() and d["key"] == art.key
    assert isinstance(d["size"], int) and len(d["sha256"]) == 64
    d = ok(rb("export", art.key[:12], "-o", tmp_path / "by-key.tar.gz", "--json"), "export")
    assert d["key"] == art.key
    fail(rb("export", "no-such-recipe", "-o", tmp_path / "x.tar.gz", "--json"), "export", 2, "RecipeError")

    lock = tmp_path / "mini.lock.json"
    d = ok(rb("lock", mini, "-o", lock, "--json"), "lock")
    assert d["lock_file"] == str(lock) and d["lock"]["commit"] == art.manifest.commit
    assert json.loads(lock.read_text()) == d["lock"]
    fail(rb("lock", "no-such-recipe", "--json"), "lock", 2, "RecipeError")
    fail(rb("lock", mini, "--ref", "no-such-ref", "-o", tmp_path / "bad.lock.json", "--json"), "lock", 3, "FetchError")


def test_build_check(txn_home, tmp_path):
    """``build --check`` of the session's mini: a real rebuild beside the cache, identical."""
    d = ok(rb("build", txn_home.recipe("mini"), "--check", "--json", timeout=300), "build", "build-check")
    assert d["identical"] is True and d["differences"] == [] and d["key"] == txn_home.artifacts["mini"].key
    r = tmp_path / "r"
    r.mkdir()
    (r / "other.toml").write_text(Path(txn_home.recipe("mini")).read_text().replace('name = "mini"', 'name = "other"')
                                  .replace("[build]", "[build]\nbuild_type = \"Debug\""))
    err = fail(rb("build", r / "other.toml", "--check", "--json"), "build", 2, "InputError")
    assert err["details"]["recipe"] == "other"


# --------------------------------------------------------------------------------------------
# status / verify / doctor (read-only)


def test_status_verify_doctor(txn_home, env350, tmp_path, fake_rocm):
    p = env350.prefix
    d = ok(rb("status", "--env", p, "--json"), "status")
    assert d["target"]["prefix"] == str(p) and d["torch"]["runtime_version"] == "3.5.0"
    assert d["changes"]["in_effect"] == [] and [lib["kind"] for lib in d["libraries"]] == ["miopen"]
    fail(rb("status", "--env", tmp_path / "nope", "--json"), "status", 2, "TargetError")

    d = ok(rb("verify", "--env", p, "--expect", "3.5.0", "--json"), "verify")
    assert d["failures"] == [] and {c["name"] for c in d["checks"]} >= {"library", "version"}
    err = fail(rb("verify", "--env", p, "--expect", "3.5.9", "--json"), "verify", 4, "VerifyError")
    assert err["details"]["failures"] == ["version"]
    fail(rb("verify", "--env", tmp_path / "nope", "--json"), "verify", 2, "TargetError")

    d = ok(rb("doctor", "--env", p, "--json", env=fake_rocm), "doctor")
    assert d["failed"] == [] and all(set(c) == {"name", "status", "detail", "fix"} for c in d["checks"])
    fail(rb("doctor", "no-such-recipe", "--json"), "doctor", 2, "RecipeError")


def test_doctor_with_a_failed_check_keeps_its_checks_and_has_an_error(txn_home, tmp_path):
    """docs/json.md, doctor: failed checks are ok false / exit 2, carry `checks` + a non-empty
    `failed`, and an `error` object (RequirementError) naming them with their fixes."""
    r = rb("doctor", "--json", env={"ROCM_PATH": str(tmp_path / "no-rocm")})
    assert r.returncode == 2, r.stderr
    d = _common(r, "doctor")
    assert set(d) - COMMON == set(TABLES["doctor"]) | {"error"}
    assert "ROCm" in d["failed"]
    err = d["error"]
    assert err["type"] == "RequirementError" and "ROCm" in err["message"] and err["hint"].strip()


# --------------------------------------------------------------------------------------------
# apply (recipe, --from-lock, --artifact, --dry-run) / rollback / history / recover


def _dry_runs(txn_home, p, mini, bundle) -> None:
    # dry runs: recipe, bundle, an incompatible artifact (exit 2 like the real apply, plan keys kept)
    d = ok(rb("apply", mini, "--env", p, "--dry-run", "--json"), "apply", "apply-dry-run")
    assert d["dry_run"] is True and "build" in d and "artifact" not in d
    assert d["target_plan"]["already_applied"] is False and d["target_plan"]["plan"]["verb"] == "apply"
    d = ok(rb("apply", "--artifact", bundle, "--env", p, "--dry-run", "--json"), "apply", "apply-dry-run")
    assert d["artifact"]["key"] == txn_home.artifacts["mini"].key and "build" not in d
    r = rb("apply", txn_home.recipe("mini-develop"), "--env", p, "--dry-run", "--json")
    assert r.returncode == 2, r.stderr
    d = _common(r, "apply")
    assert set(d) - COMMON - {"error"} <= set(TABLES["apply-dry-run"])
    assert d["target_plan"] is None and d["target_error"]["type"] == "InputError" and d["target_error"]["hint"]
    assert d["error"]["message"] == d["target_error"]["message"] and d["already_applied"] is False
    # a ref that was never built: the file actions are only known after the build (target_note)
    d = ok(rb("apply", mini, "--ref", "release/rocm-rel-7.0", "--env", p, "--dry-run", "--json"), "apply", "apply-dry-run")
    assert d["target_plan"] is None and d["target_note"] and d["build"]["cache"]["cached"] is False


def _locked_by_another_run(txn_home, p) -> None:
    # locked by another run: exit 5 for apply and rollback
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(p / ".rocmbuild"), "600"],
                              stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        assert holder.stdout.readline().strip() == "locked"
        err = fail(rb("apply", txn_home.recipe("mini-fix"), "--env", p, "--json"), "apply", 5, "LockedError")
        assert set(err["details"]) == {"lock", "pid"}
        fail(rb("rollback", "--env", p, "--json"), "rollback", 5, "LockedError")
    finally:
        holder.kill()
        holder.wait()


def test_apply_every_source_and_rollback(txn_home, env350, tmp_path):
    p = env350.prefix
    mini = txn_home.recipe("mini")
    bundle = tmp_path / "mini.tar.gz"
    lock = tmp_path / "mini.lock.json"
    assert rb("export", mini, "-o", bundle).returncode == 0
    assert rb("lock", mini, "-o", lock).returncode == 0

    # nothing to roll back yet
    fail(rb("rollback", "--env", p, "--json"), "rollback", 2, "TargetError")

    _dry_runs(txn_home, p, mini, bundle)

    # failures before anything changes
    fail(rb("apply", "--env", p, "--json"), "apply", 2, "InputError")
    err = fail(rb("apply", txn_home.recipe("mini-develop"), "--env", p, "--json"), "apply", 2, "InputError")
    assert "check" in err["details"]
    err = fail(rb("apply", "--artifact", bundle, "--sha256", "0" * 64, "--env", p, "--json"), "apply", 3, "FetchError")
    assert set(err["details"]) == {"expected", "actual"}
    # verification fails: rolled back, exit 4
    err = fail(rb("apply", mini, "--env", p, "--expect", "3.5.9", "--json"), "apply", 4, "VerifyError")
    assert {"txn", "failures", "verdict", "restored"} <= set(err["details"]) and err["details"]["restored"]["ok"]

    # apply for real, then the no-op (recipe and --from-lock)
    d = ok(rb("apply", mini, "--env", p, "--json"), "apply")
    assert d["already_applied"] is False and d["txn"] and "copy_bytes" in d and d["verdict"]["ok"] is True
    assert d["target"]["prefix"] == str(p) and d["plan"]["version_after"] == "3.5.1"
    first = d["txn"]
    for args in ([mini], ["--from-lock", lock]):
        d = ok(rb("apply", *args, "--env", p, "--json"), "apply")
        assert d["already_applied"] is True and d["txn"] is None and "copy_bytes" not in d and d["pruned"] == []
    d = ok(rb("apply", mini, "--env", p, "--dry-run", "--json"), "apply", "apply-dry-run")
    assert d["target_plan"]["already_applied"] is True

    _locked_by_another_run(txn_home, p)

    d = ok(rb("rollback", "--env", p, "--json"), "rollback")
    assert d["undoes"] == [first] and d["txn"] and d["verdict"]["ok"] is True and d["plan"]["verb"] == "rollback"
    undone = d["txn"]
    d = ok(rb("redo", "--env", p, "--json"), "redo")
    assert d["redoes"] == undone and d["reapplies"] == [first] and d["changed"] is True
    fail(rb("redo", "--env", p, "--json"), "redo", 2, "TargetError")  # nothing left to redo
    d = ok(rb("rollback", "--env", p, "--json"), "rollback")
    assert d["in_effect"] == []

    # --artifact applies the bundle (imported into the cache) like a recipe
    d = ok(rb("apply", "--artifact", bundle, "--env", p, "--json"), "apply")
    assert d["already_applied"] is False and d["txn"]
    d = ok(rb("apply", "--artifact", bundle, "--env", p, "--json"), "apply")
    assert d["already_applied"] is True
    fail(rb("rollback", "--env", p, "--to", "no-such-txn", "--json"), "rollback", 2, "TargetError")


def test_history_and_recover(txn_home, env350, tmp_path):
    p = env350.prefix
    mini = txn_home.recipe("mini")
    d = ok(rb("history", "--env", p, "--json"), "history")
    assert d["prefix"] == str(p) and d["transactions"] == [] and d["unfinished"] == []
    d = ok(rb("recover", "--env", p, "--json"), "recover")  # nothing to recover: still exit 0
    assert d["recovered"] == []

    # a killed apply prints nothing at all (documented: empty stdout = killed)
    r = rb("apply", mini, "--env", p, "--json", env={"ROCMBUILD_FAILPOINTS": "mid-swap"})
    assert r.returncode == 137 and r.stdout == ""

    d = ok(rb("history", "--env", p, "--json"), "history")
    assert [u["verb"] for u in d["unfinished"]] == ["apply"] and isinstance(d["backup_bytes"], int)
    d = ok(rb("recover", "--env", p, "--json"), "recover")
    assert len(d["recovered"]) == 1
    rec = d["recovered"][0]
    assert {"id", "verb", "interrupted_at", "restored", "actions"} <= set(rec) and rec["restored"]["ok"] is True

    assert rb("apply", mini, "--env", p).returncode == 0
    d = ok(rb("history", "--env", p, "--json"), "history")
    t = d["transactions"][-1]
    assert t["verb"] == "apply" and t["outcome"] == "committed" and t["in_effect"] is True

    for verb in ("history", "recover"):
        fail(rb(verb, "--env", tmp_path / "nope", "--json"), verb, 2, "TargetError")


def test_cache_verify_all_good_and_quarantined(txn_world, tmp_path, monkeypatch):
    import shutil

    home = tmp_path / "home"
    for art in txn_world.artifacts.values():  # only the world's own (other tests add to the session's home)
        shutil.copytree(art.path, home / "artifacts" / art.path.name, symlinks=True)
    env = {"ROCMBUILD_HOME": str(home)}
    d = ok(rb("cache", "verify", "--json", env=env), "cache")
    assert d["checked"] == len(d["artifacts"]) >= len(txn_world.artifacts) and d["quarantined"] == []
    assert {a.key for a in txn_world.artifacts.values()} <= {e["key"] for e in d["artifacts"] if e["kind"] == "built"}
    assert {e["status"] for e in d["artifacts"]} == {"ok"}
    victim = home / "artifacts" / txn_world.artifacts["mini"].key / "tree/share/miopen/db/gfx1151.db.txt"
    victim.chmod(0o644)
    victim.write_bytes(b"fixture perf DB\n")  # same size
    r = rb("cache", "verify", "--json", env=env)
    assert r.returncode == 3, r.stderr
    d = _common(r, "cache")
    assert set(d) - COMMON - {"error"} == set(TABLES["cache"]) and d["error"]["type"] == "FetchError"
    (bad,) = [e for e in d["artifacts"] if e["status"] == "quarantined"]
    assert bad["key"] == txn_world.artifacts["mini"].key and d["quarantined"] == [bad["quarantined_to"]]


def test_cache_list_and_gc(txn_world, tmp_path):
    import shutil

    home = tmp_path / "home"
    for art in txn_world.artifacts.values():  # only the world's own (other tests add to the session's home)
        shutil.copytree(art.path, home / "artifacts" / art.path.name, symlinks=True)
    env = {"ROCMBUILD_HOME": str(home)}
    d = ok(rb("cache", "list", "--json", env=env), "cache", "cache-list")
    assert {a.key for a in txn_world.artifacts.values()} == {a["key"] for a in d["artifacts"]}
    assert all(isinstance(a["size"], int) and a["size"] > 0 and a["targets"] == [] for a in d["artifacts"])
    d = ok(rb("cache", "gc", "--keep-days", "0", "--dry-run", "--json", env=env), "cache", "cache-gc")
    assert d["dry_run"] is True and d["freed_bytes"] == sum(c["bytes"] for c in d["removed"]) > 0
    d = ok(rb("cache", "gc", "--json", env=env), "cache", "cache-gc")
    assert d["removed"] == [] and d["keep_days"] == 30
    fail(rb("cache", "gc", "--keep-days", "-3", "--json", env=env), "cache", 2, "InputError")


def test_rollback_if_applied_succeeds_with_nothing_to_undo(txn_home, env350):
    from tests.support.snapshots import snapshot

    p = env350.prefix
    before = snapshot(p)
    d = ok(rb("rollback", "--env", p, "--if-applied", "--json"), "rollback")
    assert d["nothing_to_roll_back"] is True and d["txn"] is None and d["plan"] is None and d["undoes"] == []
    assert d["target"]["prefix"] == str(p) and snapshot(p) == before
    first = ok(rb("apply", txn_home.recipe("mini"), "--env", p, "--json"), "apply")["txn"]
    d = ok(rb("rollback", "--env", p, "--if-applied", "--json"), "rollback")
    assert d["nothing_to_roll_back"] is False and d["undoes"] == [first] and d["verdict"]["ok"] is True
    assert snapshot(p) == before
    d = ok(rb("rollback", "--env", p, "--if-applied", "--json"), "rollback")  # twice: still fine
    assert d["nothing_to_roll_back"] is True
    d = ok(rb("rollback", "--env", p, "--to", first, "--if-applied", "--json"), "rollback")  # undone already
    assert d["nothing_to_roll_back"] is True and snapshot(p) == before
    # without the flag the refusal stays; an unknown --to id is an error either way
    fail(rb("rollback", "--env", p, "--json"), "rollback", 2, "TargetError")
    fail(rb("rollback", "--env", p, "--to", "no-such-txn", "--if-applied", "--json"), "rollback", 2, "TargetError")
    text = rb("rollback", "--env", p, "--if-applied")
    assert text.returncode == 0 and "nothing to roll back" in text.stdout


def test_demo(tmp_path):
    d = ok(rb("demo", "--json", env={"TMPDIR": str(tmp_path)}, timeout=300), "demo")
    assert d["failed_step"] is None and d["kept"] is False and not Path(d["scratch"]).exists()
    assert all(set(s) == {"name", "command", "env", "exit_code", "expected_exit_code", "ok", "seconds", "checks"}
               for s in d["steps"])


def test_completion_and_global_flags_before_the_verb():
    for shell in ("bash", "zsh"):
        data = ok(rb("--json", "completion", shell), "completion")
        assert data["shell"] == shell and "_rocmbuild" in data["script"]
    fail(rb("--json", "completion", "tcsh"), "completion", 2, "InputError")


def test_fleet_verbs_config_key_push_and_cache_list_remote(txn_home, tmp_path):
    d = ok(rb("config", "list", "--json"), "config")
    assert [s["name"] for s in d["settings"]][:2] == ["jobs", "gpu_targets"]
    secret = tmp_path / "lab.secret"
    d = ok(rb("key", "generate", "lab", "--out", str(secret), "--json"), "key")
    assert d["public_key"].startswith("lab:") and d["secret_file"] == str(secret)
    fail(rb("key", "generate", "lab", "--out", str(secret), "--json"), "key", 2, "InputError")
    url = f"file://{tmp_path / 'cache'}"
    key = txn_home.artifacts["mini"].key
    d = ok(rb("push", key, "--to", url, "--sign-key", str(secret), "--json"), "push")
    assert d["uploaded"] is True and d["signer"] == "lab"
    fail(rb("push", key, "--to", url, "--json"), "push", 2, "InputError")  # no signing key
    d = ok(rb("cache", "list", "--remote", url, "--json"), "cache", "cache-remote")
    assert [a["key"] for a in d["artifacts"]] == [key] and d["artifacts"][0]["trusted"] is False
    fail(rb("cache", "list", "--remote", f"file://{tmp_path / 'none'}", "--json"), "cache", 2, "InputError")
