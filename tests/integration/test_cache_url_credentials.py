"""Credentials in a cache URL are refused, never used, printed or stored (issue 26, class 6).

A fake registry and a fake web server on 127.0.0.1 (tests/support/recorder.py) record what they
were sent: with ``oci://USER:TOKEN@HOST/REPO`` (or ``https://``/``http://``) on the command line or
in the config, every verb that would use the cache exits 2 with a hint naming
``username_env``/``password_env``, nothing reaches the server, and the token is in no output, no
JSON and no file of the home. A provenance file an older release wrote with such a URL is shown
redacted by ``cache list`` and ``build``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import recorder
from tests.support.cli import rb
from tests.support.pushed import push_mini

TOKEN = "s3cret-token-9f1c"


def _files_holding(root: Path, needle: str) -> list[str]:
    hits = []
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                if not p.is_symlink() and needle.encode() in p.read_bytes():
                    hits.append(str(p))
            except OSError:
                pass
    return hits


@pytest.fixture
def server():
    fake = recorder.start(answer=recorder.empty_registry)
    yield fake
    fake.stop()


def _refused(r, *, said: str = "holds credentials") -> dict:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert TOKEN not in r.stdout and TOKEN not in r.stderr
    d = json.loads(r.stdout)
    assert said in d["error"]["message"] and "***@" in d["error"]["message"]
    assert "username_env" in d["error"]["hint"] and "password_env" in d["error"]["hint"]
    assert "internal error" not in r.stderr
    return d


@pytest.mark.parametrize("scheme", ["oci", "http"])
def test_a_url_with_credentials_on_the_command_line_is_exit_2_and_sends_nothing(txn_home, server, tmp_path, scheme):
    url = f"{scheme}://fleet:{TOKEN}@{server.host}/rocmbuild/cache"
    secret = tmp_path / "lab-1.secret"
    assert rb("key", "generate", "lab-1", "--out", str(secret)).returncode == 0
    key = txn_home.artifacts["mini"].key
    _refused(rb("cache", "list", "--remote", url, "--json"))
    _refused(rb("push", key[:16], "--to", url, "--sign-key", str(secret), "--json"))
    _refused(rb("plan", txn_home.recipe("mini"), "--cache", url, "--json"))
    assert server.sent() == []  # not one request: the credentials went nowhere
    assert _files_holding(txn_home.home, TOKEN) == [] and _files_holding(tmp_path, TOKEN) == []


def test_a_url_with_credentials_in_the_config_is_exit_2_for_the_verbs_that_use_it(txn_home, server, tmp_path):
    from rocmbuild import config

    url = f"oci://fleet:{TOKEN}@{server.host}/rocmbuild/cache"
    config.user_file().parent.mkdir(parents=True, exist_ok=True)
    config.user_file().write_text(f'[[caches]]\nurl = "{url}"\npush = true\n')
    _refused(rb("config", "list", "--json"))
    _refused(rb("plan", txn_home.recipe("mini"), "--json"))
    _refused(rb("cache", "list", "--remote", f"oci://{server.host}/rocmbuild/cache", "--json"))
    st = rb("cache", "dir", "--json")  # a verb that does not use [[caches]]: a warning, redacted
    assert st.returncode == 0, st.stderr
    assert TOKEN not in st.stdout + st.stderr and "***@" in st.stderr
    assert server.sent() == []


def test_an_older_provenance_holding_credentials_is_shown_redacted(tmp_path, monorepo):
    p = push_mini(tmp_path, monorepo)
    r = rb("build", str(p.recipe), "--cache", f"file://{p.cache}", "--json", timeout=300)
    assert r.returncode == 0 and json.loads(r.stdout)["substituted"], (r.stdout, r.stderr)
    prov = Path(os.environ["ROCMBUILD_HOME"]) / "artifacts" / "imported" / p.key / "provenance.json"
    doc = json.loads(prov.read_text())
    assert doc["cache"] == f"file://{p.cache}"
    doc["cache"] = doc["source"] = f"oci://fleet:{TOKEN}@registry.lab:5000/rocmbuild"  # what a URL held before
    mode = prov.stat().st_mode
    prov.chmod(0o644)
    prov.write_text(json.dumps(doc))
    prov.chmod(mode)
    for argv in (("cache", "list"), ("cache", "list", "--json"), ("build", str(p.recipe), "--json")):
        shown = rb(*argv)
        assert shown.returncode == 0, (argv, shown.stdout, shown.stderr)
        assert TOKEN not in shown.stdout + shown.stderr, argv
    listed = json.loads(rb("cache", "list", "--json").stdout)
    [entry] = [a for a in listed["artifacts"] if a["key"] == p.key]
    assert "oci://***@registry.lab:5000/rocmbuild" in json.dumps(entry)
