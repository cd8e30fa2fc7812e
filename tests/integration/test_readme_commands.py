"""Issue 27: the README's own command lines, read from README.md at test time and run as a new user
would, so they cannot go stale again.

* Set-up: the fenced line of "## Set-up" (venv, ``pip install -e .``, ``rocmbuild demo``), run in a
  fresh copy of the checkout's tracked files; pip installs the deps as it would for a user.
* The fleet: every ``$ `` line of "## Fleets and provisioning", in order, on two "machines" (a
  builder and a node: their own cache home and config), against a real local OCI registry; each
  exits 0 and prints the README's key lines. The log path of "Following a long build" is checked
  on the fleet's real build.

Decisions:
* Only what must differ here is substituted: the registry's port, ``/envs/nodeN`` (scratch venvs
  made as the demo makes its own), ``/etc/rocmbuild/lab-1.secret`` (a scratch file), the README's
  public key (the one ``key generate`` just printed), ``/home/me`` (the checkout) and, for the
  log path, the recipe name.
* No shell: a line is split with :mod:`shlex`; ``NAME=VALUE`` prefixes go to the environment,
  ``$PWD`` is the working dir, ``&&`` runs the next command on success and ``|`` pipes into the
  next process (the README's ``grep``), all in one process group, killed on timeout.
* The output is compared on its key lines only (the README's samples are excerpts, "the paths
  are shortened"): each README line that starts like one of :data:`KEY_LINES` must be printed,
  with hashes, stamps and sizes masked.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from rocmbuild.flows.demo import scratch
from tests.support.cli import REPO

README = REPO / "README.md"
TIMEOUT = 300

#: the README output lines the fleet run must print (masked): the ones that say what happened
KEY_LINES = re.compile(r'^\s*(secret key written|trust it on each machine|pushed |miopen-demo: substituted|'
                       r'target: would substitute|"changed"|"already_applied"|rocmbuild: ok|miopen-demo 3\.5\.1 @|'
                       r'miopen-demo 3\.5\.1 \(txn|undo with|substituted from|artifact substituted from)')


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def fenced(text: str) -> list[tuple[str, str]]:
    """The fenced blocks of ``text``: (language, body)."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def commands(body: str) -> list[tuple[str, list[str]]]:
    """The ``$ `` lines of a block (continuations joined), each with the output lines after it."""
    out: list[tuple[str, list[str]]] = []
    lines = iter(body.replace("\\\n", " ").splitlines())
    for line in lines:
        if line.startswith("$ "):
            out.append((line[2:].strip(), []))
        elif out:
            out[-1][1].append(line)
    return out


def run_line(line: str, cwd: Path, env: dict, timeout: float = TIMEOUT) -> tuple[int, str]:
    """Run one README command line without a shell (see the module's Decisions): (exit, stdout+stderr)."""
    words = [w.replace("$PWD", str(cwd)) for w in shlex.split(line, comments=True)]
    text = ""
    for chain in _split(words, "&&"):
        code, out = _pipeline(_split(chain, "|"), cwd, env, timeout)
        text += out
        if code:
            return code, text
    return 0, text


def _split(words: list[str], sep: str) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for w in words:
        if w == sep:
            parts.append([])
        else:
            parts[-1].append(w)
    return parts


def _pipeline(stages: list[list[str]], cwd: Path, env: dict, timeout: float) -> tuple[int, str]:
    procs: list[subprocess.Popen] = []
    err_path = cwd.parent / "readme-stderr.txt"
    with open(err_path, "w+") as err:
        try:
            for argv in stages:
                e = dict(env)
                while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
                    k, _, v = argv.pop(0).partition("=")
                    e[k] = v
                group = {"process_group": procs[0].pid if procs else 0}  # one group (a session can't be joined)
                procs.append(subprocess.Popen(argv, cwd=cwd, env=e, text=True, stderr=err,
                                              stdin=procs[-1].stdout if procs else subprocess.DEVNULL,
                                              stdout=subprocess.PIPE, **group))
                if len(procs) > 1:
                    procs[-2].stdout.close()  # the next stage owns the pipe now
            out, _ = procs[-1].communicate(timeout=timeout)
            codes = [p.wait(timeout=timeout) for p in procs]
        finally:
            if procs:
                try:
                    os.killpg(procs[0].pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        err.seek(0)
        return next((c for c in reversed(codes) if c), 0), out + err.read()


def mask(text: str) -> str:
    text = re.sub(r"\d{8}T\d{6}Z", "STAMP", text)
    text = re.sub(r"\b[0-9a-f]{12,64}\b", "HEX", text)
    text = re.sub(r"\d+(\.\d+)? [KMG]?i?B\b", "SIZE", text)
    return re.sub(r"\s+", " ", text).strip()


def user_env(tmp: Path, name: str, path_first: Path | None = None) -> dict:
    """A user's environment on one "machine": its own ``$HOME`` (so rocmbuild's cache and config
    are the defaults the README names, ``~/.cache/rocmbuild`` and ``~/.config/rocmbuild``)."""
    drop = ("ROCMBUILD_", "PYTHON", "VIRTUAL_ENV", "CONDA", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(HOME=str(tmp / name / "home"), ROCMBUILD_TEST_SESSION=os.environ.get("ROCMBUILD_TEST_SESSION", ""))
    if "PIP_CACHE_DIR" not in env:  # pip's download cache stays the real user's, not the scratch HOME's
        env["PIP_CACHE_DIR"] = str(Path.home() / ".cache" / "pip")
    (tmp / name / "home").mkdir(parents=True, exist_ok=True)
    if path_first:
        env["PATH"] = f"{path_first}{os.pathsep}{env['PATH']}"
    return env


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A fresh copy of the checkout's tracked files (as in the working tree) and the Set-up line's
    result there: (dir, exit, output)."""
    root = tmp_path_factory.mktemp("readme") / "rocmbuild"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = REPO / rel
        if src.is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / rel)
    (line,) = [body.strip() for lang, body in fenced(section("Set-up")) if "venv" in body and "demo" in body]
    code, out = run_line(line, root, user_env(root.parent, "user"))
    return root, code, out


def test_the_set_up_line_installs_and_the_demo_passes(checkout):
    root, code, out = checkout
    assert code == 0, out[-3000:]
    assert re.search(r"^demo passed in [\d.]+ s", out, re.M), out[-3000:]
    assert (root / ".venv" / "bin" / "rocmbuild").exists()


def test_the_fleet_section_runs_as_written_on_a_local_registry(checkout, oci_registry, tmp_path):
    root, code, _ = checkout
    assert code == 0, "the set-up failed (see the set-up test)"
    text = section("Fleets and provisioning")
    venv_bin = root / ".venv" / "bin"
    builder = user_env(tmp_path, "builder", venv_bin)
    node = user_env(tmp_path, "node", venv_bin)
    node["ROCMBUILD_CONFIG"] = str(tmp_path / "node" / "config.toml")
    secret = tmp_path / "builder" / "lab-1.secret"

    # the demo's dir the section starts from (named in its prose), then nodes made like the demo's env
    (keep,) = set(re.findall(r"`(rocmbuild demo --keep-dir demo)`", text))
    code, out = run_line(keep, root, builder)
    assert code == 0, out[-3000:]
    stock = next((root / "demo" / "stock" / "install" / "lib").glob("libMIOpen.so.1.0.*"))
    nodes = {}
    for n in ("node1", "node2"):
        s = scratch.Scratch(tmp_path / n, kept=True)
        scratch._make_env(s, stock)
        nodes[f"/envs/{n}"] = str(s.env)

    subs: dict[str, str] = {"/etc/rocmbuild/lab-1.secret": str(secret), **nodes}
    readme_key = re.search(r"lab-1:[A-Za-z0-9+/]+=*", text).group(0)

    def sub(s: str) -> str:
        s = re.sub(r"127\.0\.0\.1:\d+", oci_registry.host, s)
        for a, b in subs.items():
            s = s.replace(a, b)
        return s

    blocks = fenced(text)
    toml = next(body for lang, body in blocks if lang == "toml")
    ran: list[str] = []
    checked: list[str] = []
    last_provision = None
    for lang, body in blocks:
        if lang == "toml":  # "on every other machine, the config": the node's from here on
            Path(node["ROCMBUILD_CONFIG"]).write_text(sub(toml))
            continue
        for line, expected in commands(body):
            machine = node if Path(node["ROCMBUILD_CONFIG"]).exists() else builder
            if line.startswith("... "):  # "the next boot": the last command of that name, again
                assert last_provision and line.split()[1] in last_provision, line
                line = last_provision
            elif "provision.sh" in line:
                last_provision = line
            code, out = run_line(sub(line), root, machine)
            ran.append(line)
            assert code == 0, (line, out[-3000:])
            if line.startswith("rocmbuild key generate"):
                subs[readme_key] = re.search(r"^lab-1:\S+$", out, re.M).group(0)
            if line.startswith("rocmbuild build "):
                _check_the_log_path(machine, out)
            subs["/home/me"] = str(root)
            got = mask(out)
            for want in filter(KEY_LINES.match, expected):
                assert mask(sub(want)) in got, (line, want, out[-3000:])
                checked.append(want.strip())
    verbs = [next(w for w in shlex.split(line) if "=" not in w) for line in ran]
    assert ran and verbs.count("rocmbuild") >= 6 and "examples/provision.sh" in verbs, ran
    assert len(ran) >= 9, ran
    for key in ("pushed ", "miopen-demo: substituted", "target: would substitute", '"changed": false',
                "rocmbuild: ok apply changed", "rocmbuild: ok apply unchanged", "secret key written"):
        assert any(c.startswith(key) for c in checked), (key, checked)
    print("ran:", *ran, "checked:", *checked, sep="\n  ")


def _check_the_log_path(env: dict, build_out: str) -> None:
    """The README's "Following a long build" path, with this recipe and this cache home, is the log
    the build just wrote; and ``rocmbuild log RECIPE --follow`` prints it and ends."""
    follow = section("The workflow on a ROCm machine")
    m = re.search(r"`rocmbuild log (\S+) --follow` \(or `tail -F ~/(\.cache/rocmbuild/logs/\1/latest\.log)`\)", follow)
    assert m, "the README's log path line changed: update this test with it"
    recipe = m.group(1)
    named = re.search(r"\(log: (\S+\.log)\)", build_out)
    home = Path(env["HOME"])
    logs = home / ".cache" / "rocmbuild" / "logs" / "miopen-demo"
    newest = max(logs.glob("*-*.log"), key=lambda p: p.stat().st_mtime)
    assert named and Path(named.group(1)) == newest, build_out[-2000:]
    path = home / m.group(2).replace(recipe, "miopen-demo")
    assert path.resolve() == newest.resolve(), (path, newest)
    m = re.search(r"`(rocmbuild log \S+ --follow)`", follow)
    code, out = run_line(m.group(1).replace(recipe, "miopen-demo"), home, env, timeout=60)  # the build ended: so does --follow
    assert code == 0 and newest.read_text().strip().splitlines()[-1] in out, out[-2000:]
