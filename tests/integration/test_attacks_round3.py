"""Round 3 of the confinement attacks (after issue 26): variations the class tests did not cover.

Each test is an attack that broke the fixes of issue 26; those not fixed yet are marked
``xfail(strict=True)`` with the reason. A fake server on 127.0.0.1 (tests/support/recorder.py)
records what it was sent.
"""

from __future__ import annotations

import json

import pytest

from tests.support import recorder
from tests.support.cli import rb

TOKEN = "s3cret-token-9f1c"


@pytest.fixture
def server():
    fake = recorder.start(answer=lambda m, p, h: (200, {"Content-Type": "application/json"},
                                                  b'{"name": "rocmbuild/cache", "tags": []}'))
    yield fake
    fake.stop()


# -- class 6: credentials in a URL -------------------------------------------------------------

@pytest.mark.parametrize("lead", [" ", "\x01", "o\t"], ids=["space", "control", "tab-in-scheme"])
def test_a_url_urllib_cleans_up_still_has_its_credentials_refused(server, lead):
    """urllib drops C0 controls and spaces in front and tabs anywhere before it parses a URL; a
    check that reads the raw text saw no ``scheme://user@`` and let the token through to the
    registry (as Basic auth) and into the JSON."""
    url = (lead + f"oci://fleet:{TOKEN}@{server.host}/rocmbuild/cache") if lead != "o\t" else \
        f"o\tci://fleet:{TOKEN}@{server.host}/rocmbuild/cache"
    r = rb("cache", "list", "--remote", url, "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert TOKEN not in r.stdout + r.stderr
    assert "holds credentials" in json.loads(r.stdout)["error"]["message"]
    assert server.sent() == []


def test_a_cache_url_with_a_leading_space_is_refused_not_used(server):
    r = rb("cache", "list", "--remote", f" http://{server.host}/rocmbuild/cache", "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "space or a control character" in json.loads(r.stdout)["error"]["message"]
    assert server.sent() == []


@pytest.mark.parametrize("extra", [[], ["--sha256", "a" * 64, "--dry-run"]], ids=["no-sha", "dry-run"])
def test_an_artifact_url_with_credentials_is_refused_and_never_shown(server, tmp_path, extra):
    """``apply --artifact http://user:token@host/b.tar.gz`` echoed the token in every message and
    in the JSON details, and sent it."""
    url = f"http://fleet:{TOKEN}@{server.host}/b.tar.gz"
    r = rb("apply", "--artifact", url, "--env", str(tmp_path / "env"), *extra, "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert TOKEN not in r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert "holds credentials" in d["error"]["message"] and ".netrc" in d["error"]["hint"]
    assert server.sent() == []
