"""Progress a user can live with: real ``rocmbuild build`` runs of a paced fixture project (custom
commands that sleep between steps, ninja and make), watched while they run on a pseudo-terminal,
through a pipe and with ``--json``; and the build log, one per attempt, read mid-build."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from rocmbuild.home import cache_home
from tests.integration.test_json_contract import TABLES
from tests.support.cli import rb
from tests.support.recipes import write_fixture_recipe
from tests.support.watch import Watched, make_paced_repo, screen

STEP = re.compile(r"\b(\d+)/(\d+)\b")


@pytest.fixture
def paced(tmp_path):
    """``paced(generator="Ninja", pace=1, steps=6) -> recipe path``: the paced fixture project."""
    url = make_paced_repo(tmp_path / "paced-repo")

    def make(generator: str = "Ninja", pace: int = 1, steps: int = 6, name: str = "paced") -> Path:
        return write_fixture_recipe(tmp_path / "recipes", name, url=url, subdir=None, generator=generator, jobs=1,
                                    defines={"MIOPEN_FIXTURE_PACE": pace, "MIOPEN_FIXTURE_PACED_STEPS": steps})

    return make


@pytest.fixture
def watch():
    """``watch(args, tty=..., env=...) -> Watched``; every process group started is killed at teardown."""
    started: list[Watched] = []

    def start(args, **kw) -> Watched:
        w = Watched(args, **kw)
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()


def _bar_line(w: Watched) -> str:
    lines = [line for line in screen(w.received()) if "building paced" in line]
    return lines[-1] if lines else ""


def test_terminal_shows_count_percent_eta_and_target_then_a_line_that_stays(paced, watch):
    w = watch(["build", paced("Ninja")], tty=True)
    w.wait_for(lambda w: "Generating paced/paced_2.c" in _bar_line(w), what="the bar at paced_2")
    first = _bar_line(w)
    m = STEP.search(first)
    assert m and int(m.group(2)) >= 12, first  # ninja's N/M, the real step count
    assert re.search(r"\d+%", first) and "ETA " in first and re.search(r"\d+\.\ds", first), first
    w.wait_for(lambda w: "Generating paced/paced_5.c" in _bar_line(w), what="the bar at paced_5")
    later = _bar_line(w)
    assert int(STEP.search(later).group(1)) > int(m.group(1)), (first, later)  # it moves while the build runs
    assert w.finish() == 0, w.text()
    final = screen(w.received())
    assert not any("ETA" in line for line in final), final  # the bar is gone ...
    built = [line for line in final if line.startswith("built in ")]
    assert built and re.fullmatch(r"built in \d+\.\ds \(\d+ steps\)", built[0]), final  # ... its last line stays
    for done in ("fetched in ", "configured in ", "installed in "):
        assert any(line.startswith(done) for line in final), (done, final)
    assert "built" in w.out.decode() and "log: " in w.out.decode()  # the result: stdout


@pytest.mark.parametrize("columns", [80, 64])
def test_a_narrow_terminal_keeps_count_percent_elapsed_and_eta(paced, watch, columns):
    """The target name gives way (cut at its start, keeping the file name), never the figures."""
    w = watch(["build", paced("Ninja")], tty=True, columns=columns)
    w.wait_for(lambda w: (m := STEP.search(_bar_line(w))) is not None and int(m.group(1)) >= 3,
               what="the bar at step 3")
    line = _bar_line(w)
    assert len(line) <= columns, line
    assert re.search(r"\d+%", line) and "ETA " in line and re.search(r"\d+\.\ds", line), line
    if columns == 80:
        assert re.search(r"ETA \S+ +\S", line), line  # and what is being built, its name's end at least
    assert w.finish() == 0, w.text()


def test_make_shows_a_percent_and_no_invented_count(paced, watch):
    w = watch(["build", paced("Unix Makefiles")], tty=True)
    w.wait_for(lambda w: "Generating paced/paced_3.c" in _bar_line(w), what="make's bar at paced_3")
    line = _bar_line(w)
    assert re.search(r"\b\d+%", line) and "ETA " in line, line
    assert not STEP.search(line), line  # make says how far in percent, never how many steps
    assert w.finish() == 0, w.text()
    built = [x for x in screen(w.received()) if x.startswith("built in ")]
    assert built and "steps" not in built[0], built


def test_piped_heartbeats_arrive_while_the_build_is_silent(paced, watch):
    # a 10000% step: no step line ever, so every "build:" line is a heartbeat
    w = watch(["build", paced(pace=2, steps=3)], tty=False,
              env={"ROCMBUILD_HEARTBEAT_S": "0.5", "ROCMBUILD_PROGRESS_STEP": "10000"})
    beats = lambda w: [x for x in w.text().splitlines() if x.startswith("build: ")]  # noqa: E731
    w.wait_for(lambda w: len(beats(w)) >= 4, timeout=60, what="four heartbeats")
    assert w.proc.poll() is None  # they came while the build still ran
    lines = beats(w)
    assert all(re.search(r"elapsed", x) for x in lines), lines
    counted = [x for x in lines if STEP.search(x)]
    assert counted and all("ETA " in x for x in counted), lines  # N/M and an ETA once a step is known
    assert w.finish() == 0, w.text()
    assert "\x1b[" not in w.text()  # plain text off a terminal
    assert re.search(r"^built in \d", w.text(), re.M)


def test_piped_default_cadence_one_line_per_ten_percent(paced, watch):
    w = watch(["build", paced(pace=1, steps=6)], tty=False)
    assert w.finish() == 0, w.text()
    lines = [x for x in w.text().splitlines() if x.startswith("build: ")]
    decades = [int(float(re.search(r"\((\d+)%\)", x).group(1)) // 10) for x in lines]
    assert len(lines) >= 5 and decades == sorted(set(decades)), lines  # one per 10% step, never two in one
    assert re.search(r"^configured in \d", w.text(), re.M) and re.search(r"^built in \d", w.text(), re.M)


@pytest.mark.parametrize("env", [{"TERM": "dumb"}, {"NO_COLOR": "1"}], ids=["TERM=dumb", "NO_COLOR"])
def test_dumb_terminal_and_no_color_stay_readable(paced, watch, env):
    w = watch(["build", paced()], tty=True, env=env)
    assert w.finish() == 0, w.text()
    raw = w.text()
    assert not re.search(r"\x1b\[[0-9;]*m", raw), raw[-500:]  # no colour codes at all
    final = screen(w.received())
    assert any(x.startswith("built in ") for x in final), final
    if env.get("TERM") == "dumb":  # no cursor tricks there: the plain lines, step by step
        assert "\x1b[" not in raw
        assert any(re.match(r"build: \d+/\d+ \(\d+%\), .* elapsed", x) for x in final), final


def test_json_events_on_stderr_and_one_object_on_stdout(paced, watch):
    w = watch(["build", paced(), "--json"], tty=False, env={"ROCMBUILD_HEARTBEAT_S": "0.5"})
    assert w.finish() == 0, w.text()
    events = [json.loads(x) for x in w.text().splitlines() if x.startswith("{")]
    phases = [(e["phase"], e["state"]) for e in events if e["event"] == "phase"]
    assert phases == [(p, s) for p in ("fetch", "configure", "build", "install") for s in ("start", "done")], phases
    every = [e for e in events if e["event"] == "progress"]
    # a slow configure on a loaded machine may get a heartbeat of its own (0.5 s here): the build's
    # steps are the build phase's
    assert every and all(e["phase"] in ("fetch", "configure", "build", "install") for e in every)
    progress = [e for e in every if e["phase"] == "build"]
    assert progress and all(isinstance(e["elapsed_s"], float) for e in progress)
    last = progress[-1]
    assert last["total"] >= 12 and last["done"] == last["total"] and last["eta_s"] == 0.0 and last["percent"] == 100.0
    assert all(set(e) == set(TABLES["event-progress"]) for e in every)  # docs/json.md, exactly
    assert all(set(e) == set(TABLES["event-phase"]) for e in events if e["event"] == "phase")
    out = json.loads(w.out)  # exactly one object
    assert out["ok"] and out["cached"] is False and out["duration_s"] > 2.0
    log = Path(out["log"])
    # logs/<recipe>/<stamp>-<key16>.log (docs/progress.md)
    assert log.is_file() and log.parent.name == "paced" and log.name.endswith(f"-{out['key'][:16]}.log")
    assert "Linking" in log.read_text()
    again = rb("build", paced(), "--json")
    hit = json.loads(again.stdout)
    assert hit["cached"] is True and hit["log"] is None and isinstance(hit["duration_s"], float)
    assert not [x for x in again.stderr.splitlines() if x.startswith("{") and '"build"' in x]  # nothing was built


def test_the_log_grows_while_the_build_runs(paced, watch):
    w = watch(["build", paced(pace=1, steps=6)], tty=False)
    logs = cache_home() / "logs" / "paced"  # the recipe's logs
    w.wait_for(lambda w: "Generating paced/paced_2.c" in w.text(), what="paced_2")
    (log,) = [p for p in logs.glob("*.log") if not p.is_symlink()]
    early = log.read_text()
    assert "paced_2.c" in early and "Linking C static library" not in early  # written up to now, not later
    w.wait_for(lambda w: "Generating paced/paced_5.c" in w.text(), what="paced_5")
    later = log.read_text()
    assert len(later) > len(early) and "paced_5.c" in later and w.proc.poll() is None
    assert w.finish() == 0


def test_each_attempt_keeps_its_log_and_the_link_names_the_newest(paced):
    recipe = paced()
    failed = rb("build", recipe, "--json", env={"MIOPEN_FIXTURE_BREAK": "1"})
    assert failed.returncode == 3, failed.stderr
    err = json.loads(failed.stdout)["error"]
    logs = cache_home() / "logs" / "paced"  # the recipe's logs
    (first,) = [p for p in logs.glob("*.log") if not p.is_symlink()]
    assert str(first) in err["message"] and str(first) in err["hint"] and err["details"]["log"] == str(first)
    ok = rb("build", recipe, "--json")
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    attempts = sorted(p for p in logs.glob("*.log") if not p.is_symlink())
    assert len(attempts) == 2 and first in attempts  # the failed attempt's log is still there ...
    assert "broken on purpose" in first.read_text() and "Linking" not in first.read_text()  # ... as it was
    link = logs / "latest.log"  # the recipe's newest attempt
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert link.resolve() == Path(out["log"]) != first and "Linking" in link.read_text()


def test_apply_reports_phases_duration_and_no_log_for_a_cached_build(txn_home, target_env):
    env = target_env("3.5.0", layout="conda", compile_version="3.5.1")
    r = rb("apply", txn_home.recipe("mini"), "--env", env.prefix, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["log"] is None and out["duration_s"] > 0
    phases = [json.loads(x) for x in r.stderr.splitlines() if x.startswith("{")]
    names = [(e["phase"], e["state"]) for e in phases if e["event"] == "phase"]
    assert ("probe", "done") in names and ("swap", "start") in names and ("verify", "done") in names, names
    assert names.index(("verify", "done")) < names.index(("swap", "done"))  # verification is part of the swap
    text = rb("rollback", "--env", env.prefix)
    assert text.returncode == 0 and re.search(r"^verified in \d", text.stderr, re.M), text.stderr


def test_a_reader_that_leaves_ends_the_events_not_the_build(paced):
    """``rocmbuild build --json 2>&1 | head -1``: stderr closes after one line; the build goes on."""
    import subprocess
    import sys

    from tests.support.cli import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO), "ROCMBUILD_HEARTBEAT_S": "0.3"}
    rd, wr = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "rocmbuild", "build", str(paced(pace=1, steps=3)), "--json"],
                            stdout=subprocess.PIPE, stderr=wr, env=env, cwd=str(REPO), start_new_session=True)
    os.close(wr)
    try:
        with os.fdopen(rd, "rb") as f:
            assert f.readline().startswith(b"{")
        out, _ = proc.communicate(timeout=120)  # stderr's reader is gone from here on
    finally:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 0 and json.loads(out)["cached"] is False


def test_a_download_is_a_row_of_the_one_display_on_a_terminal(tmp_path, watch):
    """A tarball source over http, on a terminal: the download runs as its own phase inside fetch
    (one live display: rich refuses two at once) and leaves its line."""
    import functools
    import hashlib
    import http.server
    import tarfile
    import threading

    from tests.support.project import MIOPEN_SRC

    served = tmp_path / "www"
    served.mkdir()
    with tarfile.open(served / "miopen.tar.gz", "w:gz") as tf:
        tf.add(MIOPEN_SRC, arcname="MIOpen-3.5.1")
    sha = hashlib.sha256((served / "miopen.tar.gz").read_bytes()).hexdigest()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None  # type: ignore[assignment]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/miopen.tar.gz"
        recipe = write_fixture_recipe(tmp_path / "recipes", "tb", tarball=url, sha256=sha, ref=None, subdir=None,
                                      generator="Ninja", jobs=1)
        w = watch(["build", recipe], tty=True)
        assert w.finish() == 0, w.text()
    finally:
        server.shutdown()
        server.server_close()
    final = screen(w.received())
    assert any(line.startswith("downloaded in ") for line in final), final
    assert any(line.startswith("fetched in ") for line in final) and "LiveError" not in w.text(), final


DOCS = Path(__file__).resolve().parents[2] / "docs"
LOG_NAME = re.compile(r"logs/([A-Za-z0-9][A-Za-z0-9._+-]*)/(\d{8}T\d{6}Z)-([0-9a-f]{16})(-\d+)?\.log$")


def test_the_log_paths_the_docs_give_are_the_real_ones(paced):
    """Issue 27, item 2: every ``tail -F`` path in docs/ names the running build's log once ``~`` and
    ``<recipe>`` are filled in, every sample ``log`` has the real name's shape, and no doc names the
    old ``logs/<key>.log`` but as what older releases wrote."""
    out = json.loads(rb("build", paced(), "--json").stdout)
    log = Path(out["log"])
    m = LOG_NAME.search(str(log))
    assert m and m.group(1) == "paced" and out["key"].startswith(m.group(3)), log
    home = str(cache_home())
    tails, samples = [], []
    for doc in sorted(DOCS.glob("*.md")):
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            tails += [(doc.name, n, t) for t in re.findall(r"tail -F (\S+?)`", line)]
            samples += [(doc.name, n, s) for s in re.findall(r"(?:log: |\"log\": \")(\S+\.log)", line)]
            if "logs/<key>" in line:
                assert "older release" in line or "Old `logs/" in line or "link `logs/<key>.log`" in line, (doc, n, line)
    assert tails and samples
    for doc, n, t in tails:
        path = Path(t.replace("~/.cache/rocmbuild", home).replace("$ROCMBUILD_HOME", home).replace("<recipe>", "paced"))
        assert path.resolve() == log, (doc, n, t)
    for doc, n, s in samples:
        assert LOG_NAME.search(s), (doc, n, s)
