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


# -- class 8: another user's code as root -------------------------------------------------------

OWNER = 1000
SYSTEM_PYTHON = "/usr/bin/python3.11"


@pytest.fixture
def rootenv(fixture_libs):
    """(env, log): a conda-like env owned by root whose activate.d script and .pth file log the
    uid that ran them; nothing of it chowned yet (each attack gives one piece to uid 1000)."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from tests.support.envs import make_env

    if os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.fail("these tests run as root with a system Python at " + SYSTEM_PYTHON)
    base = Path(tempfile.mkdtemp(prefix="rocmbuild-attack-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        env = make_env(base / "env", layout="conda", lib_dir=fixture_libs("3.5.0"), base_python=SYSTEM_PYTHON)
        log = base / "ran.log"
        log.write_text("")
        os.chmod(log, 0o666)
        (env.prefix / "conda-meta").mkdir(exist_ok=True)
        script = env.prefix / "etc/conda/activate.d/owner.sh"
        script.parent.mkdir(parents=True)
        script.write_text(f'echo "activate $(id -u)" >> "{log}"\n')
        (env.site_packages / "zz_owner.pth").write_text(
            f"import os; open({str(log)!r}, 'a').write('pth %d\\n' % os.getuid())\n")
        yield env, log
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _uids_that_ran(log) -> set[str]:
    lines = log.read_text().splitlines()
    log.write_text("")
    return {ln.split()[1] for ln in lines}


def _give(path, uid=OWNER) -> None:
    import os

    os.chown(path, uid, uid, follow_symlinks=False)


@pytest.mark.parametrize("piece", ["site-packages", "pth", "activate.d", "activate-script"])
def test_a_root_owned_env_holding_another_users_code_does_not_run_it_as_root(rootenv, piece):
    """The owner is judged from the prefix, bin/ and bin/python only: an env whose prefix and
    interpreter are root's but whose site-packages, a .pth file, activate.d or a script in it is
    uid 1000's ran that code as root (``status --env``)."""
    env, log = rootenv
    target = {"site-packages": env.site_packages, "pth": env.site_packages / "zz_owner.pth",
              "activate.d": env.prefix / "etc/conda/activate.d",
              "activate-script": env.prefix / "etc/conda/activate.d/owner.sh"}[piece]
    _give(target)
    r = rb("status", "--env", str(env.prefix), "--json")
    ran = _uids_that_ran(log)
    assert ran, (r.stdout, r.stderr)
    assert "0" not in ran, f"uid 1000's {piece} ran as root: {ran}"

