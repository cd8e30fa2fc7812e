"""The config file(s): order (system, user, ROCMBUILD_CONFIG; later wins; flags win), refusals
(unknown keys with a "did you mean", wrong types naming file, key and type), ``config list``,
and the defaults reaching the verbs (``plan`` shows the ``--parallel`` a build would use)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmbuild import config
from rocmbuild.errors import InputError
from tests.support.cli import rb


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def files(tmp_path, monkeypatch):
    system = _write(tmp_path / "etc" / "config.toml", 'jobs = 2\nlauncher = "none"\nkeep = 7\n'
                    '[[caches]]\nurl = "oci://sys.example/rocmbuild"\n')
    user = _write(config.user_file(), 'jobs = 3\n[[caches]]\nurl = "file:///srv/cache"\npush = true\n'
                  '[trust]\npublic_keys = ["lab:AAAA"]\n')
    run = _write(tmp_path / "run.toml", 'gpu_targets = "gfx1151"\n[sign]\nkey = "/keys/lab.secret"\n')
    monkeypatch.setenv("ROCMBUILD_CONFIG", str(run))
    return system, user, run


def test_later_files_win_key_by_key_and_each_value_names_its_file(files):
    system, user, run = files
    cfg = config.load(system)
    assert (cfg.jobs, cfg.launcher, cfg.keep, cfg.gpu_targets, cfg.sign_key) == (3, "none", 7, "gfx1151", "/keys/lab.secret")
    assert [c.url for c in cfg.caches] == ["file:///srv/cache"] and cfg.caches[0].push  # a list is replaced, not merged
    assert cfg.sources == {"jobs": str(user), "launcher": str(system), "keep": str(system), "caches": str(user),
                           "trust.public_keys": str(user), "gpu_targets": str(run), "sign.key": str(run)}
    assert cfg.files == (str(system), str(user), str(run))


@pytest.mark.parametrize("text,words", [
    ('launchr = "ccache"\n', ["unknown key 'launchr' ignored", "did you mean 'launcher'?"]),
    ('[[caches]]\nurl = "oci://h/r"\npassword_evn = "X"\n', ["unknown key 'caches[0].password_evn'", "did you mean 'password_env'"]),
    ('[trust]\npublic_key = []\n', ["unknown key 'trust.public_key'", "did you mean 'public_keys'"]),
])
def test_an_unknown_key_warns_with_a_did_you_mean_and_is_ignored(tmp_path, monkeypatch, capsys, text, words):
    """Issue 27, item 10: one unknown key pushed to a fleet must not stop every verb there."""
    monkeypatch.setattr(config, "_warned", set())
    bad = _write(tmp_path / "bad.toml", "keep = 3\n" + text)
    monkeypatch.setenv("ROCMBUILD_CONFIG", str(bad))
    cfg = config.load(tmp_path / "no-system.toml")
    assert cfg.keep == 3 and cfg.problems == {}  # the rest of the file is read
    err = capsys.readouterr().err
    assert str(bad) in err and all(w in err for w in words), err
    config.load(tmp_path / "no-system.toml")
    assert capsys.readouterr().err == ""  # said once per run


@pytest.mark.parametrize("text,key,words", [
    ('jobs = "8"\n', "jobs", ["'jobs' must be an integer, not str"]),
    ('jobs = true\n', "jobs", ["'jobs' must be an integer, not bool"]),
    ('[[caches]]\nurl = "oci://h/r"\npush = "yes"\n', "caches", ["'caches[0].push' must be true or false"]),
    ('[trust]\npublic_keys = "lab:AAAA"\n', "trust.public_keys", ["'trust.public_keys' must be a list of strings"]),
    ('[[caches]]\npush = true\n', "caches", ["has no url"]),
    ('launcher = "distcc"\n', "launcher", ["'launcher' must be one of"]),
    ('[sign]\nkey = "lab.secret"\n', "sign.key", ["must be an absolute path"]),
    ('jobs = 4\njobs = 5\n', "jobs", ["not valid TOML"]),
])
def test_a_bad_value_is_refused_where_it_is_used_naming_the_file_and_the_key(tmp_path, monkeypatch, text, key, words):
    bad = _write(tmp_path / "bad.toml", text)
    monkeypatch.setenv("ROCMBUILD_CONFIG", str(bad))
    cfg = config.load(tmp_path / "no-system.toml")
    cfg.require()  # nothing asked for: fine
    with pytest.raises(InputError) as e:
        cfg.require(key)
    said = e.value.message + " " + e.value.hint
    assert str(bad) in e.value.message and all(w in said for w in words), said
    with pytest.raises(InputError):
        config.parse_file(bad)


def test_a_named_config_that_is_missing_is_an_error_but_absent_defaults_are_not(tmp_path, monkeypatch):
    assert config.load(tmp_path / "none.toml") == config.Config(sources={}, files=())
    monkeypatch.setenv("ROCMBUILD_CONFIG", str(tmp_path / "gone.toml"))
    with pytest.raises(InputError, match="ROCMBUILD_CONFIG names"):
        config.load(tmp_path / "none.toml")


def test_config_list_shows_values_and_sources_and_a_bad_file_exits_2(tmp_path):
    user = _write(config.user_file(), 'jobs = 6\n[[caches]]\nurl = "oci://127.0.0.1:5000/r"\nusername_env = "U"\n'
                  'password_env = "P"\n')
    d = json.loads(rb("config", "list", "--json").stdout)
    got = {s["name"]: (s["value"], s["source"]) for s in d["settings"]}
    assert got["jobs"] == (6, str(user)) and got["keep"] == (None, None)
    assert got["caches"][0][0]["username_env"] == "U" and str(user) in d["files"]
    text = rb("config", "list").stdout
    assert "jobs" in text and str(user) in text
    keep = text.split("\nkeep", 1)[1].splitlines()[0]  # unset: the default in effect, not "(not set)" (issue 27)
    assert "5" in keep and "not set" not in text, text
    assert {s["name"]: s["default"] for s in d["settings"]}["keep"].startswith("5 ")
    _write(user, 'jbos = 6\n')
    r = rb("config", "list", "--json")  # an unknown key: a warning, and every verb goes on
    assert r.returncode == 0 and "unknown key 'jbos' ignored; did you mean 'jobs'?" in r.stderr, r.stderr


def test_a_bad_value_stops_only_the_verbs_that_use_it(txn_home, tmp_path):
    """Issue 27, item 10: ``jobs = "8"`` refuses a build that would use it (exit 2), not ``status``,
    ``recipes``, nor a build given ``--jobs``; ``config list`` names it (exit 2)."""
    user = _write(config.user_file(), 'jobs = "8"\n')
    recipe = txn_home.recipe("mini")
    r = rb("recipes", "--json")
    assert r.returncode == 0 and f"{user}: 'jobs' must be an integer" in r.stderr and "goes on" in r.stderr, r.stderr
    r = rb("plan", recipe, "--offline", "--json")
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 2 and "'jobs' must be an integer" in err["message"] and str(user) in err["message"]
    assert r.stderr.count("'jobs' must be an integer") == 1  # the error only, not a warning too
    assert rb("plan", recipe, "--offline", "--jobs", "2", "--json").returncode == 0
    assert rb("config", "list", "--json").returncode == 2
    _write(user, '[[caches]]\npush = true\n')  # caches: used by a lookup, not by --no-cache or status
    assert rb("plan", recipe, "--offline", "--json").returncode == 0
    assert rb("plan", recipe, "--json").returncode == 2


def test_the_config_sets_defaults_and_the_flag_wins(txn_home, tmp_path):
    recipe = txn_home.recipe("mini")
    _write(config.user_file(), "jobs = 3\n")

    def parallel(*flags: str) -> str:
        argv = json.loads(rb("plan", recipe, "--offline", *flags, "--json").stdout)["commands"]["build"]
        return argv[argv.index("--parallel") + 1]

    assert parallel() == "3"
    assert parallel("--jobs", "5") == "5"


@pytest.mark.parametrize("kind", ["directory", "FIFO"])
def test_a_config_path_that_is_a_directory_or_a_fifo_is_an_error_saying_so(tmp_path, kind):
    """Issue 26, small: the user's ``config.toml`` made a directory was silently ignored (and a
    FIFO there would block every verb forever): now it is the file's problem, named with what it
    is: ``config list`` and a verb that uses a setting exit 2, one that uses none warns and goes on."""
    import os

    user = config.user_file()
    user.parent.mkdir(parents=True, exist_ok=True)
    if kind == "directory":
        user.mkdir()
    else:
        os.mkfifo(user)
    r = rb("config", "list", "--json", timeout=60)
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 2 and err["message"] == f"{user}: is a {kind}, not a config file", err
    assert "TOML file" in err["hint"]
    r = rb("plan", "no-such-recipe", "--offline", "--json", timeout=60)  # uses jobs: refused before the recipe
    assert r.returncode == 2 and f"is a {kind}" in json.loads(r.stdout)["error"]["message"], r.stdout
    r = rb("recipes", "--json", timeout=60)  # uses no setting: one warning, and it goes on
    assert r.returncode == 0 and f"{user}: is a {kind}, not a config file" in r.stderr, r.stderr


def test_a_bad_run_as_stops_nothing_and_the_safe_default_holds(tmp_path, monkeypatch):
    """``run_as`` guards running another user's code as root: a bad value (or a broken file) must
    not stop ``status`` across a fleet, nor loosen anything: warned, and ``owner`` is the policy."""
    from rocmbuild.proc import runas
    from rocmbuild.cli import args as cli_args

    bad = _write(tmp_path / "bad.toml", 'run_as = "roo"\n')
    monkeypatch.setenv("ROCMBUILD_CONFIG", str(bad))
    cfg = config.load(tmp_path / "no-system.toml")
    assert "run_as" in cfg.problems and "'run_as' must be one of owner, refuse, root" in cfg.problems["run_as"].message
    ns = cli_args.argparse.Namespace(verb="status", run_as=None)
    runas.set_policy("root")
    try:
        cli_args.config_defaults(ns)  # no exit 2
        assert runas.policy() == "owner"
        _write(bad, 'run_as = "refuse"\n')
        cli_args.config_defaults(ns)
        assert runas.policy() == "refuse"
        cli_args.config_defaults(cli_args.argparse.Namespace(verb="status", run_as="root"))
        assert runas.policy() == "root"  # the flag wins
    finally:
        runas.set_policy("owner")
