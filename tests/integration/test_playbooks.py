"""The Ansible playbooks of examples/ansible, run for real by ``ansible-playbook`` against several
local hosts (``ansible_connection: local``), each with its own target env, ``ROCMBUILD_HOME`` and
config file, applying one recipe from a ``file://`` binary cache that the ``mini`` artifact was
pushed to once for the module, signed (hosts run with ``rocmbuild_require_cache``: no compiler).

What a fleet operator relies on: ``--check`` changes nothing and says "would substitute from URL"
or "would build"; a real run reports ``changed`` and a re-run does not; a failed host rolls back
its whole batch and stops the rollout; an artifact signed by another key changes no host; a
locked target is retried; ``rollback.yml`` can run twice.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import REPO, rb
from tests.support.snapshots import listing, snapshot

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-core is not installed")

PLAYBOOKS = REPO / "examples" / "ansible"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)"
                   r"\s+rescued=(\d+)", re.M)


@dataclass
class Host:
    name: str
    env: object  # tests.support.envs.Env
    home: Path
    config: Path  # the rocmbuild config file the playbook writes on the host


@dataclass
class Run:
    proc: subprocess.CompletedProcess
    recap: dict[str, dict[str, int]]

    @property
    def text(self) -> str:
        return self.proc.stdout + self.proc.stderr


@dataclass
class Cache:
    url: str
    public_key: str
    key: str  # the artifact key of the recipe
    recipe: str

    def extra(self, **more) -> dict:
        return {"rocmbuild_recipe": self.recipe, "rocmbuild_cache_url": self.url,
                "rocmbuild_public_key": self.public_key, "rocmbuild_require_cache": True, **more}


@pytest.fixture(scope="module")
def cache(txn_world, tmp_path_factory) -> Cache:
    """A ``file://`` binary cache holding the ``mini`` artifact (3.5.1), signed by the key ``fleet``."""
    where = tmp_path_factory.mktemp("fleet-cache")
    env = {"ROCMBUILD_HOME": str(txn_world.home)}
    made = rb("key", "generate", "fleet", "--out", where / "fleet.secret", "--json", env=env)
    assert made.returncode == 0, made.stderr
    url, key = f"file://{where / 'cache'}", txn_world.artifacts["mini"].key
    r = rb("push", key, "--to", url, "--sign-key", where / "fleet.secret", env=env)
    assert r.returncode == 0, r.stderr
    assert (r.stdout + r.stderr).count("pushed") == 1, (r.stdout, r.stderr)  # said once, by the result
    return Cache(url, json.loads(made.stdout)["public_key"], key, txn_world.recipe("mini"))


@pytest.fixture(scope="module")
def bundle(txn_world, tmp_path_factory) -> Path:
    """The ``mini`` artifact (3.5.1) exported once, with its .sha256 beside it."""
    out = tmp_path_factory.mktemp("fleet-bundle") / "mini-3.5.1.tar.gz"
    r = rb("export", txn_world.recipe("mini"), "-o", out, env={"ROCMBUILD_HOME": str(txn_world.home)})
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture
def fleet(target_env, tmp_path):
    """``fleet(n, bad=())``: n local hosts (h1..hn) in an inventory; each host's torch is compiled
    against MIOpen 3.5.x and loads the stock 3.5.0, except the ``bad`` ones, whose torch (3.4)
    cannot load the bundle's 3.5.1. Returns (inventory path, hosts)."""

    def make(n: int, bad: tuple[str, ...] = ()) -> tuple[Path, list[Host]]:
        hosts, inv = [], {}
        for i in range(1, n + 1):
            name = f"h{i}"
            env = target_env("3.5.0", name=f"env-{name}", compile_version="3.4.0" if name in bad else "3.5.0")
            home = tmp_path / f"home-{name}"
            shim = tmp_path / f"rocmbuild-{name}"
            shim.write_text(f"#!/bin/sh\nROCMBUILD_HOME='{home}' PYTHONPATH='{REPO}' ROCMBUILD_DOWNLOAD_RETRIES=0 "
                            f"exec '{sys.executable}' "
                            '-m rocmbuild "$@"\n')
            shim.chmod(0o755)
            config = tmp_path / f"etc-{name}" / "rocmbuild" / "config.toml"
            hosts.append(Host(name, env, home, config))
            inv[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                         "rocmbuild_env": str(env.prefix), "rocmbuild_bin": str(shim),
                         "rocmbuild_config_file": str(config)}
        path = tmp_path / "inventory.yml"
        path.write_text(json.dumps({"rocm_gpu": {"hosts": inv}}))  # JSON is YAML
        return path, hosts

    return make


def playbook(name: str, inventory: Path, tmp_path: Path, *args: str, extra: dict | None = None,
             timeout: float = 300) -> Run:
    """``ansible-playbook -i INVENTORY examples/ansible/NAME ARGS`` in its own process group."""
    home = tmp_path / "ansible-home"
    scratch = tmp_path / "host-tmp"
    scratch.mkdir(exist_ok=True)
    cfg = tmp_path / "ansible.cfg"  # this one only: no ansible.cfg of the machine or the user is read
    cfg.write_text("[defaults]\n")
    env = dict(os.environ, LC_ALL="C.UTF-8", LANG="C.UTF-8", ANSIBLE_HOME=str(home),
               ANSIBLE_LOCAL_TEMP=str(home / "tmp"), ANSIBLE_REMOTE_TEMP=str(home / "remote-tmp"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_CONFIG=str(cfg), TMPDIR=str(scratch))
    argv = ["ansible-playbook", "-i", str(inventory), str(PLAYBOOKS / name), *args]
    if extra:
        argv += ["-e", json.dumps(extra)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(tmp_path), start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever ansible left in its group
        except ProcessLookupError:
            pass
    recap = {m[0]: dict(zip(("ok", "changed", "unreachable", "failed", "skipped", "rescued"), map(int, m[1:]), strict=True))
             for m in RECAP.findall(out)}
    return Run(subprocess.CompletedProcess(argv, proc.returncode, out, err), recap)


def states(hosts: list[Host]) -> dict[str, dict]:
    return {h.name: snapshot(h.env.prefix) for h in hosts}


def history(h: Host) -> list[dict]:
    r = rb("history", "--env", h.env.prefix, "--json", env={"ROCMBUILD_HOME": str(h.home)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["transactions"]


def loaded_version(h: Host) -> str:
    code = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); a=[ctypes.c_size_t() for _ in range(3)]; "
            "l.miopenGetVersion(*[ctypes.byref(x) for x in a]); print('.'.join(str(x.value) for x in a))")
    return subprocess.run([sys.executable, "-c", code, str(h.env.prefix / "lib" / "libMIOpen.so.1")],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_check_mode_then_rollout_then_rerun(fleet, cache, tmp_path):
    inventory, hosts = fleet(3)
    before = states(hosts)
    listings = {h.name: listing(h.env.prefix) for h in hosts}
    extra = cache.extra(rocmbuild_serial=[1, 2])

    # --check: the dry run with a scratch config; says where the artifact would come from, changes nothing
    check = playbook("rollout.yml", inventory, tmp_path, "--check", extra=extra)
    assert check.proc.returncode == 0, check.text
    assert set(check.recap) == {"h1", "h2", "h3"} and all(r["changed"] >= 1 and r["failed"] == 0
                                                         for r in check.recap.values()), check.text
    would = f"would change: would substitute from {cache.url} (key {cache.key[:16]}, signed by fleet)"
    assert check.proc.stdout.count(would) == 3, check.text
    assert {h.name: listing(h.env.prefix) for h in hosts} == listings  # not even .rocmbuild/
    assert not any(h.config.parent.exists() for h in hosts)
    assert not any((h.home / "artifacts").exists() for h in hosts)  # nothing downloaded
    assert list((tmp_path / "host-tmp").iterdir()) == []  # the scratch configs are gone
    # a cache that cannot be reached: each host would build, and says why
    closed = dict(extra, rocmbuild_cache_url="oci://127.0.0.1:9/none")
    nocache = playbook("rollout.yml", inventory, tmp_path, "--check", extra=closed)
    assert nocache.proc.stdout.count("would change: would build (oci://127.0.0.1:9/none unreachable)") == 3, nocache.text

    # the real rollout: the config written, the artifact substituted, reported changed with txn and versions
    first = playbook("rollout.yml", inventory, tmp_path, extra=extra)
    assert first.proc.returncode == 0, first.text
    for h in hosts:
        assert first.recap[h.name]["changed"] >= 1 and first.recap[h.name]["failed"] == 0, first.text
        assert loaded_version(h) == "3.5.1"
        assert f'url = "{cache.url}"' in h.config.read_text() and cache.public_key in h.config.read_text()
        txn = history(h)[-1]["id"]
        assert (f"{h.name}: changed txn={txn} version=3.5.0->3.5.1 (substituted from {cache.url}, signed by fleet)"
                in first.proc.stdout), first.text

    # a re-run and a re-run in check mode: nothing to do, nothing reported as changed
    for args in ((), ("--check",)):
        again = playbook("rollout.yml", inventory, tmp_path, *args, extra=extra)
        assert again.proc.returncode == 0, again.text
        assert {n: r["changed"] for n, r in again.recap.items()} == {"h1": 0, "h2": 0, "h3": 0}, again.text
        assert again.proc.stdout.count(": unchanged txn=none version=3.5.1\"") == 3, again.text
    assert all(len(history(h)) == 1 for h in hosts)
    assert states(hosts) != before


def test_a_failed_host_rolls_back_its_batch_and_stops_the_rollout(fleet, cache, tmp_path):
    inventory, hosts = fleet(4, bad=("h2",))
    before = states(hosts)
    h4_listing = listing(hosts[3].env.prefix)
    run = playbook("rollout.yml", inventory, tmp_path, extra=cache.extra(rocmbuild_serial=3))
    assert run.proc.returncode != 0, run.text
    # h2 refused the bundle (its torch cannot load 3.5.1); h1 and h3 had applied it: rolled back
    assert "the rollout stopped here: rocmbuild apply failed on h2 (exit 2)" in run.proc.stdout, run.text
    assert states(hosts) == before  # every env of the batch byte for byte as it was
    assert history(hosts[1]) == []
    for h in (hosts[0], hosts[2]):
        verbs = [t["verb"] for t in history(h)]
        assert verbs == ["apply", "rollback"] and loaded_version(h) == "3.5.0"
        assert f"{h.name}: its batch failed on h2; its change was rolled back" in run.proc.stdout, run.text
    assert all(run.recap[n]["failed"] == 1 for n in ("h1", "h2", "h3")), run.text
    # the next batch (h4) was never touched
    assert "h4" not in run.recap or run.recap["h4"]["ok"] == 0
    assert listing(hosts[3].env.prefix) == h4_listing and not hosts[3].config.exists()


def test_an_artifact_signed_by_another_key_changes_no_host(fleet, cache, tmp_path):
    inventory, hosts = fleet(2)
    before = states(hosts)
    other = rb("key", "generate", "other", "--out", tmp_path / "other.secret", "--json")
    extra = cache.extra(rocmbuild_serial=2, rocmbuild_public_key=json.loads(other.stdout)["public_key"])
    run = playbook("rollout.yml", inventory, tmp_path, extra=extra)
    assert run.proc.returncode != 0, run.text
    assert "not a trusted key" in run.proc.stdout and "exit 3" in run.proc.stdout, run.text
    assert states(hosts) == before and all(history(h) == [] for h in hosts)
    assert not any((h.home / "artifacts" / "imported").exists() for h in hosts)
    # a malformed key: the playbook refuses before touching a host
    run = playbook("rollout.yml", inventory, tmp_path, extra=cache.extra(rocmbuild_public_key='x"\n[sign]'))
    assert run.proc.returncode != 0 and "NAME:BASE64" in run.proc.stdout, run.text


HOLDER = textwrap.dedent("""
    # hold the target's lock until the apply has substituted the artifact (the target's lock comes next), then
    # a few seconds more: the first attempts meet the lock (exit 5), a later one gets through
    import os, sys, time
    from rocmbuild.swap import statedir
    lock = statedir.TargetLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.05)
    time.sleep(float(sys.argv[3]))
    lock.release()
""")


def test_a_locked_target_is_retried(fleet, cache, tmp_path):
    inventory, hosts = fleet(1)
    imported = hosts[0].home / "artifacts" / "imported" / cache.key  # substituted: the target's lock comes next
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(hosts[0].env.prefix / ".rocmbuild"),
                               str(imported), "4"],
                              stdout=subprocess.PIPE, text=True, cwd=str(REPO), start_new_session=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert holder.stdout.readline().strip() == "locked"
        run = playbook("rollout.yml", inventory, tmp_path,
                       extra=cache.extra(rocmbuild_lock_delay=1, rocmbuild_lock_retries=10))
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    assert run.proc.returncode == 0, run.text
    assert "FAILED - RETRYING: [h1]: Apply with rocmbuild" in run.proc.stdout, run.text
    assert run.recap["h1"]["changed"] >= 1 and loaded_version(hosts[0]) == "3.5.1"
    assert [t["verb"] for t in history(hosts[0])] == ["apply"]


def test_rollback_playbook_twice(fleet, bundle, tmp_path):
    inventory, hosts = fleet(2)
    before = states(hosts)
    for h in hosts:  # applied by hand, as a first rollout would have
        r = rb("apply", "--artifact", bundle, "--env", h.env.prefix, "--json", env={"ROCMBUILD_HOME": str(h.home)})
        assert r.returncode == 0, r.stderr
    applied = states(hosts)
    assert applied != before
    check = playbook("rollback.yml", inventory, tmp_path, "--check", extra={"rocmbuild_serial": 2})
    assert check.proc.returncode == 0 and all(r["changed"] == 0 for r in check.recap.values()), check.text
    assert states(hosts) == applied  # check mode runs nothing
    first = playbook("rollback.yml", inventory, tmp_path, extra={"rocmbuild_serial": 2})
    assert first.proc.returncode == 0, first.text
    assert all(first.recap[h.name]["changed"] == 1 for h in hosts), first.text
    assert states(hosts) == before
    second = playbook("rollback.yml", inventory, tmp_path, extra={"rocmbuild_serial": 2})
    assert second.proc.returncode == 0, second.text
    assert all(second.recap[h.name]["changed"] == 0 for h in hosts), second.text
    assert second.proc.stdout.count("nothing to roll back") == 2, second.text
    assert states(hosts) == before and all([t["verb"] for t in history(h)] == ["apply", "rollback"] for h in hosts)
