"""The holder record is read from a file anyone may have written: hostile until checked."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from rocmbuild.fs import locks
from rocmbuild.fs.locks import Holder, LockWait, parse_record
from rocmbuild.schema import SchemaError


def test_garbage_is_no_record():
    for data in (b"", b"  \n", b"\xff\xfe\x00garbage", b"[1, 2]", b'"123"', b'{"pid": "123"}', b"{",
                 b'{"argv": ["x"]}', b"null", b"1e400", b"-5", b"0", b"true", b'{"pid": -1}', b'{"pid": true}'):
        assert parse_record(data) is None, data


def test_a_bare_pid_from_an_older_rocmbuild_reads_as_that_pid():
    h = parse_record(b"4242\n", Path("/x/lock"))
    assert h is not None and h.pid == 4242 and h.since is None and h.argv == ()


def test_a_record_with_a_field_of_the_wrong_type_is_refused_naming_it(tmp_path):
    """The record is read by HOLDER_SPEC: a wrong-typed field refuses it whole (no pid is
    guessed from it); read_holder says why, and who is holding is then found by its descriptor."""
    bad = {"pid": os.getpid(), "argv": "not-a-list-but-iterable", "since": 1.0, "start": None, "host": None}
    for field, value in (("argv", "not-a-list-but-iterable"), ("since", "yesterday"), ("start", "early"),
                         ("host", 7), ("pid", 0)):
        data = json.dumps({**bad, "argv": [], field: value}).encode()
        assert parse_record(data) is None, field
        try:
            locks.holder_record(data)
        except SchemaError as exc:
            assert exc.field == field and f"field {field!r}: expected" in str(exc), str(exc)
        else:
            raise AssertionError(f"{field} = {value!r} was accepted")
    (tmp_path / "lock").write_bytes(json.dumps({**bad, "argv": [], "since": "yesterday"}).encode())
    h = locks.read_holder(tmp_path / "lock")
    assert h.pid is None and "'since': expected a number, got a string 'yesterday'" in h.unreadable
    assert "its holder record cannot be read" in locks.held_by(h) and "'since'" in locks.held_by(h)


def test_the_record_written_is_read_back_equal():
    rec = locks.holder_record(locks.my_record())
    assert rec == locks.HolderRecord(os.getpid(), rec.argv, rec.since, socket.gethostname(), rec.start)
    assert locks.holder_record((json.dumps(rec.to_json()) + "\n").encode()) == rec and rec.argv


def test_this_process_is_alive_and_a_reused_pid_is_not(tmp_path):
    me = parse_record(locks.my_record(), tmp_path / "lock")
    assert me is not None and me.pid == os.getpid() and me.alive() is True
    assert me.host == socket.gethostname() and "pytest" in me.command()
    reused = Holder(tmp_path / "lock", pid=os.getpid(), start=(me.start or 0) + 1)  # same pid, another process
    assert reused.alive() is False
    assert Holder(tmp_path / "lock", pid=2**22 + 12345).alive() is False  # above any pid_max


def test_a_holder_on_another_host_is_not_judged(tmp_path):
    h = Holder(tmp_path / "lock", pid=1, argv=("rocmbuild", "apply"), host="some-other-host", since=1.0)
    assert h.alive() is None and h.orphans() == []
    assert "on host some-other-host" in h.describe() and "rocmbuild apply" in h.describe()
    assert "since 1970-01-01" in h.describe() or "since 1969-12-31" in h.describe()


def test_markup_in_a_command_line_is_printed_as_is(tmp_path, capsys):
    h = Holder(tmp_path / "lock", pid=2**22 + 1, argv=("python", "-c", "[bold red]x[/]"), since=1.0)
    locks.say_waiting("the target", tmp_path / "lock", h, LockWait(True, 5))
    err = capsys.readouterr().err
    assert "[bold red]x[/]" in err and "giving up after 5 s" in err


def test_wait_timeout_implies_wait():
    assert LockWait.from_options(False, None) == LockWait(False, None)
    assert LockWait.from_options(False, 3.0) == LockWait(True, 3.0)
    assert LockWait.of(True) == LockWait(True) and LockWait.of(LockWait(True, 2)) == LockWait(True, 2)


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    import pytest

    from rocmbuild.fs.disk import FileLock
    from rocmbuild.errors import InputError

    canary = tmp_path / "canary"
    canary.write_text("precious\n")
    (tmp_path / "chain").symlink_to(canary)
    lock = tmp_path / "state" / "lock"
    lock.parent.mkdir()
    lock.symlink_to(tmp_path / "chain")  # a chain of links to a file that must not be truncated
    for shared in (False, True):
        with pytest.raises(InputError) as ei:
            FileLock(lock, shared=shared).acquire()
        assert ei.value.exit_code == 2 and "symbolic link" in ei.value.message
    assert canary.read_text() == "precious\n"
    assert locks.read_holder(lock).pid is None  # not read through the link either
    big = tmp_path / "big"
    big.write_bytes(b'{"pid": 1' + b" " * (2 * locks.RECORD_MAX) + b"}")
    assert locks.read_holder(big).pid is None  # longer than a record: not one
    assert Holder(big, pid=1, since=1e300).when() == ""
