"""The links check of verification: every name of the target's chain must lead to a placed file."""

from __future__ import annotations

import os

from rocmbuild.environment.verify import check_links


def test_every_name_resolving_to_the_placed_file_passes(tmp_path):
    real = tmp_path / "libMIOpen.so.1.0.70002"
    real.write_bytes(b"\x7fELF new")
    os.symlink(real.name, tmp_path / "libMIOpen.so.1")
    os.symlink("libMIOpen.so.1", tmp_path / "libMIOpen.so")  # a chain of two hops
    c = check_links((tmp_path / "libMIOpen.so.1", tmp_path / "libMIOpen.so"), [real])
    assert c.ok and c.name == "links", c


def test_a_dangling_name_and_a_name_leading_elsewhere_fail(tmp_path):
    real = tmp_path / "libMIOpen.so.1.0"
    real.write_bytes(b"\x7fELF new")
    other = tmp_path / "libMIOpen.so.1.0.70002"
    other.write_bytes(b"\x7fELF old")
    os.symlink("miopen/lib/nothing.so", tmp_path / "libMIOpen.so")  # dangling
    os.symlink(other.name, tmp_path / "libMIOpen.so.1")  # still the old file
    c = check_links((tmp_path / "libMIOpen.so", tmp_path / "libMIOpen.so.1"), [real])
    assert not c.ok
    assert "dangling" in c.found and str(other) in c.found, c.found
