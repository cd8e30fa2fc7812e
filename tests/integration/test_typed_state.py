"""Typed state through the real CLI: a bundle's manifest, a lock file, a history line and a journal
whose fields have the wrong type are refused by their schema with the exit code of their kind
(3: an artifact, 2: a lock file or a target's state), naming the file, the field and what was
expected; never exit 1, and a target is never left in a state its verbs cannot read.

Real bundles exported from the session's artifacts and repacked with a changed manifest, real
venvs with a fake torch, real ``python -m rocmbuild`` processes.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from rocmbuild.store import bundle
from tests.support.cli import rb
from tests.support.snapshots import listing

pytestmark = pytest.mark.slow

MANIFEST = "rocmbuild-artifact/manifest.json"


def _json(proc) -> dict:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def _repack(src: Path, dst: Path, manifest: dict) -> None:
    """``src`` with its manifest replaced (the manifest stays the first member, as export writes it)."""
    data = json.dumps(manifest).encode()
    with tarfile.open(src) as tin, tarfile.open(dst, "w:gz") as tout:
        for m in tin.getmembers():
            body = tin.extractfile(m).read() if m.isfile() else None
            if m.name == MANIFEST:
                body, m.size = data, len(data)
            tout.addfile(m, io.BytesIO(body) if body is not None else None)


@pytest.fixture
def bundle_of(txn_world, tmp_path, monkeypatch):
    """``bundle_of(change)``: the ``mini`` artifact exported, its manifest changed by ``change``
    (a function of the manifest dict), no .sha256 beside it; ROCMBUILD_HOME is a fresh machine."""
    out = bundle.export(txn_world.artifacts["mini"], tmp_path / "mini.tar.gz")
    with tarfile.open(out.file) as tf:
        original = json.loads(tf.extractfile(MANIFEST).read())
    home = tmp_path / "machine-b"
    monkeypatch.setenv("ROCMBUILD_HOME", str(home))

    def make(change) -> Path:
        manifest = json.loads(json.dumps(original))
        change(manifest)
        evil = tmp_path / f"evil-{len(list(tmp_path.glob('evil-*')))}.tar.gz"
        _repack(Path(out.file), evil, manifest)
        return evil

    make.home = home  # type: ignore[attr-defined]
    return make


def _nothing_imported(home: Path) -> bool:
    arts = home / "artifacts"
    return not arts.exists() or not [p for p in arts.rglob("*") if not p.name.startswith(".")]


def _refused_as_artifact(proc, field: str) -> dict:
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    err = _json(proc)["error"]
    assert err["type"] == "ArtifactError" and "manifest.json" in err["message"] and repr(field) in err["message"], err
    assert "expected" in err["message"] and err["details"]["schema"]["field"] == field
    return err


def test_a_manifest_commit_that_is_no_commit_is_refused_and_the_target_stays_readable(bundle_of, target_env):
    env = target_env("3.5.0", compile_version="3.5.1")
    evil = bundle_of(lambda m: m.update(commit=7))
    before = listing(env.prefix)
    r = rb("apply", "--artifact", evil, "--env", env.prefix, "--json")
    err = _refused_as_artifact(r, "commit")
    assert "a commit" in err["message"] and "integer 7" in err["message"]
    assert listing(env.prefix) == before and _nothing_imported(bundle_of.home)  # refused before anything was written
    for verb in ("status", "history"):
        for extra in ((), ("--json",)):
            p = rb(verb, "--env", env.prefix, *extra)
            assert p.returncode == 0, (verb, p.stderr)
    assert "internal error" not in rb("history", "--env", env.prefix).stderr


@pytest.mark.parametrize("change,field", [
    (lambda m: m.update(recipe=["a"]), "recipe"),
    (lambda m: m.update(recipe="../../tmp/x"), "recipe"),
    (lambda m: m.update(version="3.5\n1"), "version"),
    (lambda m: m.update(libraries="libMIOpen"), "libraries"),
    (lambda m: m.update(libraries=[1]), "libraries[0]"),
    (lambda m: m["libraries"][0].update(links="lib/libMIOpen.so"), "libraries[0].links"),
    (lambda m: m["libraries"][0].pop("file"), "libraries[0].file"),
    (lambda m: m["files"][0].update(size="12"), "files[0].size"),
    (lambda m: m.update(schema=True), "schema"),
], ids=["recipe-list", "recipe-path", "version-newline", "libraries-str", "library-int", "links-str",
        "library-no-file", "size-str", "schema-bool"])
def test_a_malformed_manifest_is_a_corrupt_artifact(bundle_of, target_env, change, field):
    env = target_env("3.5.0", compile_version="3.5.1")
    evil = bundle_of(change)
    before = listing(env.prefix)
    r = rb("apply", "--artifact", evil, "--env", env.prefix, "--json")
    _refused_as_artifact(r, field)
    assert listing(env.prefix) == before and _nothing_imported(bundle_of.home)
    dry = rb("apply", "--artifact", evil, "--env", env.prefix, "--dry-run", "--json")  # inspect reads it in place
    _refused_as_artifact(dry, field)


def test_a_manifest_refused_at_import_names_the_bundle_in_text_too(bundle_of, target_env):
    env = target_env("3.5.0", compile_version="3.5.1")
    evil = bundle_of(lambda m: m.update(recipe=["a"]))
    r = rb("apply", "--artifact", evil, "--env", env.prefix)
    assert r.returncode == 3 and str(evil) in r.stderr and "'recipe'" in r.stderr, r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------------------------------------
# lock files: user input (exit 2)


@pytest.fixture
def lock_file(txn_home, tmp_path):
    out = tmp_path / "mini.lock.json"
    r = rb("lock", txn_home.recipe("mini"), "-o", out)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("change,field,expected", [
    ({"recipe": 5}, "recipe", "a recipe"),
    ({"overrides": {"jobs": "x"}}, "overrides.jobs", "an integer"),
    ({"overrides": {"jobs": True}}, "overrides.jobs", "an integer"),
    ({"overrides": {"defines": "A=1"}}, "overrides.defines", "a list"),
    ({"commit": "HEAD; rm -rf /"}, "commit", "a commit"),
    ({"recipe_sha256": None}, "recipe_sha256", "a string"),
    ({"schema": "1"}, "schema", "an integer"),
])
def test_a_malformed_lock_file_is_exit_2_naming_file_field_and_expectation(lock_file, target_env, change, field,
                                                                           expected):
    env = target_env("3.5.0", compile_version="3.5.1")
    data = json.loads(lock_file.read_text())
    data.update(change)
    lock_file.write_text(json.dumps(data))
    for verb in ("build", "apply"):
        extra = ("--env", str(env.prefix)) if verb == "apply" else ()
        r = rb(verb, "--from-lock", lock_file, *extra, "--json")
        assert r.returncode == 2, (verb, r.returncode, r.stderr)
        err = _json(r)["error"]
        assert err["type"] == "InputError" and str(lock_file) in err["message"], err
        assert repr(field) in err["message"] and f"expected {expected}" in err["message"], err


# --------------------------------------------------------------------------------------------
# a target's state written with a wrong type (by an older rocmbuild, or by hand)


def test_a_history_line_with_a_mistyped_commit_is_reported_not_exit_1(txn_home, target_env):
    env = target_env("3.5.0", compile_version="3.5.1")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    assert rb("apply", txn_home.recipe("mini-fix"), "--env", env.prefix).returncode == 0
    hist = env.prefix / ".rocmbuild/history.jsonl"
    lines = hist.read_text().splitlines()
    bad = json.loads(lines[0])
    bad["commit"] = 7  # what an import of a manifest with "commit": 7 wrote before
    hist.write_text("\n".join([json.dumps(bad), lines[1]]) + "\n")
    for verb in ("status", "history"):
        p = rb(verb, "--env", env.prefix)
        assert p.returncode == 0 and "internal error" not in p.stderr, (verb, p.stderr)
    h = _json(rb("history", "--env", env.prefix, "--json"))
    assert [t["id"] for t in h["transactions"]] == [json.loads(lines[1])["id"]]  # the other line is read
    (u,) = h["unreadable"]
    assert u["kind"] == "history" and u["line"] == 1 and "'commit'" in u["error"] and "expected a commit" in u["error"]
    r = rb("rollback", "--env", env.prefix)  # a bad history line warns; the journals are the record
    assert r.returncode == 0, r.stderr


def test_a_journal_with_a_mistyped_commit_is_unreadable_and_refuses_changes(txn_home, target_env):
    env = target_env("3.5.0", compile_version="3.5.1")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    journal = next((env.prefix / ".rocmbuild/journal").glob("*.json"))
    data = json.loads(journal.read_text())
    data["plan"]["commit"] = 7
    journal.write_text(json.dumps(data))
    for verb in ("status", "history"):
        p = rb(verb, "--env", env.prefix)
        assert p.returncode == 0 and "internal error" not in p.stderr, (verb, p.stderr)
    s = _json(rb("status", "--env", env.prefix, "--json"))
    (u,) = s["changes"]["unreadable"]
    assert u["kind"] == "journal" and "'plan.commit'" in u["error"] and str(journal) in u["error"]
    r = rb("rollback", "--env", env.prefix, "--json")
    assert r.returncode == 2 and _json(r)["error"]["type"] == "StateError", r.stderr


@pytest.mark.parametrize("change,field", [
    (lambda d: d["steps"][0].update(index="0"), "steps[0].index"),
    (lambda d: d["plan"]["actions"][0].update(before={"kind": 3}), "plan.actions[0].before.kind"),
    (lambda d: d["plan"]["actions"][0].update(create_dirs="lib"), "plan.actions[0].create_dirs"),
    (lambda d: d.update(id="../../../tmp/x"), "id"),
    (lambda d: d.update(meta={"python": 3}), "meta.python"),
])
def test_a_mistyped_journal_field_is_named(txn_home, target_env, change, field):
    env = target_env("3.5.0", compile_version="3.5.1")
    assert rb("apply", txn_home.recipe("mini"), "--env", env.prefix).returncode == 0
    journal = next((env.prefix / ".rocmbuild/journal").glob("*.json"))
    data = json.loads(journal.read_text())
    change(data)
    journal.write_text(json.dumps(data))
    s = rb("status", "--env", env.prefix, "--json")
    assert s.returncode == 0, s.stderr
    (u,) = _json(s)["changes"]["unreadable"]
    assert repr(field) in u["error"], u["error"]
    r = rb("apply", txn_home.recipe("mini-fix"), "--env", env.prefix, "--json")
    assert r.returncode == 2 and _json(r)["error"]["type"] == "StateError", r.stderr
