"""names.py: the grammar of recipe names, versions and commits, and safe_text / safe_lines."""

from __future__ import annotations

import pytest

from rocmbuild import names

GOOD_RECIPES = ["miopen-develop", "cudnn-9.10.2", "miopen-3.5.1", "mini", "a", "x_y+z", "A1", "r" * 100]
BAD_RECIPES = ["../x", "a/b", "a\nb", "mini\n", ".", "..", "", "a..b", "a.", "-x", ".hidden", "r" * 101,
               "r" * 200, "a b", "a\x1bb", "é", "a\\b", None, 3]

GOOD_VERSIONS = ["3.5.1", "3.6.0+abc", "9.10.2", "3.6.0-dev", "1.0~rc1", "v2", "2024_01", "0"]
BAD_VERSIONS = ["", ".", "../1", "1/2", "3.5.1\n", "3.5.1\nFAKE", "3.5\x1b[2J", "3 5", "+1", "1..2", "9" * 65,
                "3.5\r", None, 351]

SHA1 = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "0123456789abcdef" * 4


@pytest.mark.parametrize("name", GOOD_RECIPES)
def test_real_recipe_names_are_accepted(name):
    assert names.is_recipe_name(name)
    assert names.bad_name_reason("recipe", name) is None


@pytest.mark.parametrize("name", BAD_RECIPES)
def test_names_that_could_steer_a_path_or_a_terminal_are_refused(name):
    assert not names.is_recipe_name(name)
    reason = names.bad_name_reason("recipe", name)
    assert reason and "expected" in reason
    assert "\n" not in reason and "\x1b" not in reason and "\r" not in reason


@pytest.mark.parametrize("version", GOOD_VERSIONS)
def test_real_versions_are_accepted(version):
    assert names.is_version(version)


@pytest.mark.parametrize("version", BAD_VERSIONS)
def test_bad_versions_are_refused(version):
    assert not names.is_version(version)
    assert names.bad_name_reason("version", version)


def test_commits_are_40_or_64_lowercase_hex_digits():
    assert names.is_commit(SHA1) and names.is_commit(SHA256)
    for bad in (SHA1.upper(), SHA1[:-1], SHA1 + "\n", SHA1 + "0", "", "g" * 40, None):
        assert not names.is_commit(bad), bad


def test_bad_name_reason_names_a_non_string_type_and_shortens_long_values():
    assert "got int" in names.bad_name_reason("recipe", 3)
    assert len(names.bad_name_reason("recipe", "/" * 5000)) < 400


@pytest.mark.parametrize("ch, shown", [
    ("\x00", "\\x00"), ("\x07", "\\x07"), ("\x1b", "\\x1b"), ("\r", "\\x0d"), ("\n", "\\x0a"), ("\x7f", "\\x7f"),
    ("\x85", "\\x85"), ("\x9b", "\\x9b"), ("\u202e", "\\u202e"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"),
    ("\ufeff", "\\ufeff"), ("\udcff", "\\xff"),
])
def test_safe_text_escapes_control_characters(ch, shown):
    assert names.safe_text(f"a{ch}b") == f"a{shown}b"


def test_safe_text_keeps_printable_text_and_non_ascii():
    for s in ("miopen 3.5.1 [build] gmake[2]: *** Error 1", "café", "日本語", "Ünïcödé → ✓", "emoji 😀", "a b"):
        assert names.safe_text(s) == s
    assert names.safe_text("a\tb") == "a b"
    assert names.safe_text(42) == "42"


def test_safe_text_makes_a_terminal_attack_inert():
    out = names.safe_text("desc \x1b[2J\x1b]0;title\x07 clear\r\nFAKE: all good")
    assert "\x1b" not in out and "\r" not in out and "\n" not in out and "\x07" not in out
    assert out == "desc \\x1b[2J\\x1b]0;title\\x07 clear\\x0d\\x0aFAKE: all good"


def test_safe_lines_keeps_line_breaks_and_escapes_the_rest():
    out = names.safe_lines("error: build failed\n  tail \x1b[31mred\r\nFAKE\u202e")
    assert out.split("\n") == ["error: build failed", "  tail \\x1b[31mred\\x0d", "FAKE\\u202e"]
    assert names.safe_lines("one line") == "one line"


def test_recipe_version_never_leaves_a_double_space():
    from rocmbuild.names import recipe_version

    assert recipe_version("miopen-3.5.1-deb", None) == "miopen-3.5.1-deb"
    assert recipe_version("miopen-3.5.1-deb", "") == "miopen-3.5.1-deb"
    assert recipe_version("mini", "3.5.1") == "mini 3.5.1"
