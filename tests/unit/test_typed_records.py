"""The small records rocmbuild reads back, each a frozen value parsed once by its schema and
written whole by its to_json(): the build tree's owner, the configure record, tools.json and a
signature file. A wrong-typed field is refused naming it (what each caller then does is its
kind's: advisory records are taken as none, a signature file is exit 3); a round trip holds."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from rocmbuild import schema as s
from rocmbuild.builder import buildtree, retry
from rocmbuild.errors import EXIT_BUILD
from rocmbuild.remote import trust
from rocmbuild.store import cache

SHA = "a" * 64


def _refused(spec, doc, field):
    with pytest.raises(s.SchemaError) as info:
        s.load(spec, doc, "x.json")
    assert info.value.field == field and f"x.json: field {field!r}: expected" in str(info.value), str(info.value)


# --------------------------------------------------------------------------------------------
# the build tree's owner


def test_the_owner_record_round_trips_and_a_session_is_added_by_replace(tmp_path):
    owner = buildtree.Owner(tmp_path / "tree")
    owner.started(4242)
    owner.started(4243)
    back = buildtree.read_owner(tmp_path / "tree")
    assert back == owner.record and back.sessions == (4242, 4243) and back.pid == os.getpid()
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.pid = 1  # type: ignore[misc]


@pytest.mark.parametrize("field, value, named", [("sessions", 5, "sessions"), ("sessions", ["7"], "sessions[0]"),
                                                 ("pid", "12", "pid"), ("start", 1.5, "start"),
                                                 ("command", "rocmbuild build", "command")])
def test_a_wrong_typed_owner_field_is_named_and_the_record_taken_as_none(tmp_path, field, value, named, capsys):
    good = {"pid": 1, "start": None, "command": ["rocmbuild"], "since": "t", "sessions": [1]}
    _refused(buildtree.OWNER_SPEC, {**good, field: value}, named)
    (tmp_path / buildtree.OWNER).write_text(json.dumps({**good, field: value}))
    assert buildtree.read_owner(tmp_path) is None
    assert f"'{named}'" in capsys.readouterr().err  # said as a warning
    assert buildtree.users(tmp_path) == []  # no process works in it: never a TypeError


# --------------------------------------------------------------------------------------------
# the configure record


def test_the_configure_record_round_trips(tmp_path):
    retry.reconcile(tmp_path, ["cmake", "-DA=1", "-DGIT=abc"], {"CC": "gcc"})
    rec = retry.read_configured(tmp_path)
    assert rec == retry.ConfiguredRecord(("A", "GIT"), {"CC": "gcc"}, "abc")
    assert s.load(retry.CONFIGURED_SPEC, json.loads(json.dumps(rec.to_json())), "c") == rec


@pytest.mark.parametrize("field, value", [("defines", "A"), ("env", {"CC": 1}), ("git", 7), ("defines", None)])
def test_a_wrong_typed_configure_record_drops_the_cache_whole(tmp_path, field, value):
    good = {"defines": ["A"], "env": {}}
    named = f"{field}.CC" if field == "env" else field
    _refused(retry.CONFIGURED_SPEC, {**good, field: value}, named)
    (tmp_path / retry.CONFIGURED).write_text(json.dumps({**good, field: value}))
    (tmp_path / "CMakeCache.txt").write_text("A:STRING=1\n")
    assert retry.read_configured(tmp_path) is None
    retry.reconcile(tmp_path, ["cmake", "-DA=1"], {})
    assert not (tmp_path / "CMakeCache.txt").exists()  # how it was made is unknown: a fresh configure
    assert retry.read_configured(tmp_path) == retry.ConfiguredRecord(("A",), {})


# --------------------------------------------------------------------------------------------
# tools.json


def test_a_wrong_typed_tools_json_is_asked_again_and_rewritten_whole(tmp_path, capsys):
    _refused(cache.TOOLS_SPEC, {"/usr/bin/cc:1:2": 13}, "/usr/bin/cc:1:2")
    (tmp_path / "tools.json").write_text(json.dumps({"/usr/bin/cc:1:2": 13}))
    version = cache.tool_version("sh", tmp_path)  # sh --version: a real program on every machine
    assert isinstance(version, str) and "tools.json" in capsys.readouterr().err
    db = s.load(cache.TOOLS_SPEC, json.loads((tmp_path / "tools.json").read_text()), "tools.json")
    assert list(db.values()) == [version]  # the refused entry is gone, the new one is there
    assert cache.tool_version("sh", tmp_path) == version and capsys.readouterr().err == ""


# --------------------------------------------------------------------------------------------
# a signature file


@pytest.fixture(scope="module")
def signed():
    secret = trust.SecretKey.generate("lab-1")
    manifest = b'{"key": "x"}'
    return secret, manifest, trust.sign(secret, SHA, manifest, SHA)


def test_a_signature_file_round_trips_and_checks(signed):
    secret, manifest, data = signed
    doc = trust.read_signature(data)
    assert doc.signer == "lab-1" and doc.key == SHA and doc.claims(SHA, manifest, SHA)
    assert trust.read_signature(json.dumps(doc.to_json()).encode()) == doc
    trusted = trust.trusted_keys([secret.public().text()])
    assert trust.check("c", SHA, manifest, SHA, data, trusted) == "lab-1"


@pytest.mark.parametrize("field, value", [("signer", 7), ("signer", "../x"), ("signature", "not base64!"),
                                          ("signature", "AAAA"), ("format", "v2"), ("key", 5)])
def test_a_wrong_typed_signature_field_is_exit_3_naming_it(signed, field, value):
    secret, manifest, data = signed
    bad = json.dumps({**json.loads(data), field: value}).encode()
    with pytest.raises(s.SchemaError) as info:
        trust.read_signature(bad)
    assert info.value.field == field
    trusted = trust.trusted_keys([secret.public().text()])
    with pytest.raises(trust.UntrustedError) as err:
        trust.check("c", SHA, manifest, SHA, bad, trusted)
    assert err.value.exit_code == EXIT_BUILD == 3
    assert "signature file cannot be read" in str(err.value) and f"field {field!r}: expected" in str(err.value)
    assert trust.check("c", SHA, manifest, SHA, bad, trusted, allow_unsigned=True) is None
    assert trust.signer_of(bad) is None


def test_a_signature_file_that_is_not_json_or_too_long_is_refused(signed):
    for data in (b"[" * 4000, b"{", b"x" * (trust.MAX_SIG + 1)):
        with pytest.raises(s.SchemaError):
            trust.read_signature(data)
    assert trust.read_signature(None) is None and trust.read_signature(b"") is None


# --------------------------------------------------------------------------------------------
# an outside-prefix state dir's target.json, a known-target record


def test_the_target_and_known_target_records_round_trip(tmp_path, monkeypatch):
    from rocmbuild.errors import StateError
    from rocmbuild.swap import knowntargets, statedir

    rec = statedir.TargetRecord("/env", "/opt/rocm/lib")
    (tmp_path / "target.json").write_text(json.dumps(rec.to_json()))
    assert statedir.read_target_record(tmp_path) == rec
    (tmp_path / "target.json").write_text(json.dumps({**rec.to_json(), "libdir": ["/x"]}))
    with pytest.raises(StateError) as info:
        statedir.read_target_record(tmp_path)
    assert info.value.exit_code == 2 and "field 'libdir': expected a string" in info.value.message
    known = tmp_path / "known.json"
    known.write_bytes(knowntargets.record_json(tmp_path / ".rocmbuild", "/env", "t"))
    assert knowntargets.read_record(known) == knowntargets.KnownRecord(str(tmp_path / ".rocmbuild"), "/env", "t")
    known.write_text(json.dumps({"state_dir": "relative"}))
    _refused(knowntargets.RECORD_SPEC, json.loads(known.read_text()), "state_dir")
