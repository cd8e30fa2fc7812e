"""Benchmark: N machines apply one recipe from a cold start, with and without a binary cache.

Goal (issue #17): on the fixture build paced to 30 s, a substituted apply (pull + apply) takes at
most 10% of a building one (build + apply), and each machine pulls exactly the bundle's bytes.

Set-up: the fixture monorepo and recipe, its C compiler a wrapper that sleeps ``--pace`` seconds
while it compiles ``src/miopen.c`` (the library's one source; cmake's own compiler checks and the
link are not slowed), so one build takes about ``--pace`` seconds, like a (short) real MIOpen build. Each
"machine" is a fresh ``ROCMBUILD_HOME`` and a fresh fake-torch env holding the stock 3.5.0.

1. without the cache: each machine runs ``apply RECIPE --env ENV --no-cache`` (fetch, configure,
   the paced build, the swap, verification); the first one then pushes its artifact, signed, to
   a real OCI registry (Debian's docker-registry on 127.0.0.1, started and ended here, as the
   tests start it);
2. with the cache: each new machine gets a config file with the cache URL and the builder's
   public key and runs ``apply RECIPE --env ENV --require-cache`` (lookup, pull, checks, import,
   swap, verification; no compiler);
3. the same with ``--parallel`` machines pulling at once.

Bytes pulled are counted by a small HTTP proxy per machine in front of the registry (every
response body byte the machine received: manifests, signature and the bundle); the compiler
wrapper logs every compile, so "zero compiles" is counted too. Run from the repository root:
``python benchmarks/fleet.py --machines 3``.

Measured on this 2-core VM, quiet, ``--machines 2 --parallel 2``: build + apply 34.50 s per
machine (median), pull + apply 2.67 s (7.7%: goal <= 10% MET), 2 at once 2.76 s each (8.0%); every
machine pulled the 20,394 B bundle blob exactly once (31,066 B with manifests and signature), 0
compiles. Under load (other jobs on both cores), ``--parallel 8``: 8 at once 33.8-38.0 s each, CPU
bound on 2 cores, each still pulling exactly the bundle.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.server
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import ROOT, build_library, fixture_recipe, make_env, make_monorepo, registry  # noqa: E402

GOAL = 0.10


@dataclass
class Proxy:
    """A counting HTTP proxy in front of the registry for one machine (GET and HEAD only)."""

    server: http.server.ThreadingHTTPServer
    counts: dict = field(default_factory=lambda: {"total": 0, "bundle": 0})

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_proxy(upstream: str, bundle_digest: str) -> Proxy:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_HEAD(self) -> None:
            self.forward(body=False)

        def do_GET(self) -> None:
            self.forward(body=True)

        def forward(self, body: bool) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("accept", "range", "authorization")}
            with requests.request(self.command, upstream + self.path, headers=headers, stream=True,
                                  allow_redirects=False, timeout=60) as r:
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in ("connection", "transfer-encoding", "keep-alive"):
                        self.send_header(k, v)
                self.end_headers()
                if not body:
                    return
                for chunk in r.raw.stream(1 << 20, decode_content=False):
                    self.wfile.write(chunk)
                    proxy.counts["total"] += len(chunk)
                    if bundle_digest in self.path:
                        proxy.counts["bundle"] += len(chunk)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    proxy = Proxy(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return proxy


@dataclass(frozen=True)
class World:
    work: Path
    recipe: Path
    stock: Path  # the staged lib dir of the envs' libMIOpen 3.5.0
    compiles: Path  # the compiler wrapper's log: one line per compile


def make_world(work: Path, pace: float, pad_mb: int) -> World:
    work.mkdir(parents=True, exist_ok=True)
    compiles = work / "compiles.log"
    compiles.write_text("")
    wrapper = work / "cc-paced"
    real = shutil.which("cc") or "cc"
    wrapper.write_text('#!/bin/sh\ncase "$*" in\n'
                       f'  *" -c "*/src/miopen.c) echo "$$" >> "{compiles}"; sleep {pace} ;;\n'
                       f'  *--version*) ;;\n  *) echo "$$" >> "{compiles}" ;;\nesac\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    repo = make_monorepo(work / "rocm-libraries", big_mb=1)
    recipe = work / "fleet.toml"
    recipe.write_text(fixture_recipe(name="fleet", url=repo.url, ref="rocm-7.1.0", data=None, jobs=2,
                                     defines={"CMAKE_C_COMPILER": str(wrapper), "MIOPEN_FIXTURE_PAD_MB": pad_mb}))
    stock = build_library("3.5.0", work / "stock")
    return World(work, recipe, stock, compiles)


@dataclass
class Machine:
    name: str
    home: Path
    env_prefix: Path
    config: Path | None = None
    seconds: float = 0.0
    result: dict = field(default_factory=dict)
    pulled: dict = field(default_factory=dict)


def new_machine(w: World, name: str) -> Machine:
    e = make_env(w.work / f"env-{name}", layout="conda", lib_dir=w.stock, compile_version="3.5.0")
    return Machine(name, w.work / f"home-{name}", e.prefix)


def rocmbuild(args: list, env: dict) -> tuple[float, dict]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rocmbuild", *map(str, args), "--json"], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"rocmbuild {args[0]} failed ({done.returncode}):\n{done.stderr}\n{done.stdout}")
    return seconds, json.loads(done.stdout)


def machine_env(m: Machine) -> dict:
    env = dict(os.environ, ROCMBUILD_HOME=str(m.home), PYTHONPATH=str(ROOT))
    if m.config is not None:
        env["ROCMBUILD_CONFIG"] = str(m.config)
    return env


def build_apply(w: World, m: Machine) -> Machine:
    m.seconds, m.result = rocmbuild(["apply", w.recipe, "--env", m.env_prefix, "--no-cache"], machine_env(m))
    assert m.result["changed"] and m.result["log"], m.result
    return m


def pull_apply(w: World, m: Machine, proxy: Proxy, public_key: str) -> Machine:
    m.config = w.work / f"config-{m.name}.toml"
    m.config.write_text(f'[[caches]]\nurl = "oci://127.0.0.1:{proxy.port}/rocmbuild/fleet"\n\n'
                        f'[trust]\npublic_keys = ["{public_key}"]\n')
    m.seconds, m.result = rocmbuild(["apply", w.recipe, "--env", m.env_prefix, "--require-cache"], machine_env(m))
    assert m.result["changed"] and m.result["substituted"], m.result
    m.pulled = dict(proxy.counts)
    return m


def compiles(w: World) -> int:
    return len(w.compiles.read_text().splitlines())


def report(title: str, machines: list[Machine], bundle_size: int | None) -> None:
    print(title)
    for m in machines:
        pulled = (f"  pulled {m.pulled['total']:>10} B (bundle blob {m.pulled['bundle']} B of {bundle_size} B)"
                  if m.pulled else "")
        print(f"  machine {m.name:>4}: {m.seconds:7.2f} s{pulled}")


def cold_runs(w: World, n: int) -> list[Machine]:
    print(f"without the cache: {n} machine(s) build + apply (paced build) ...", flush=True)
    before = compiles(w)
    machines = [build_apply(w, new_machine(w, f"b{i}")) for i in range(1, n + 1)]
    print(f"  compiles: {compiles(w) - before} ({(compiles(w) - before) // n} per machine)")
    return machines


def cached_runs(w: World, reg, n: int, digest: str, public_key: str, parallel: bool) -> list[Machine]:
    prefix = "p" if parallel else "s"
    machines = [new_machine(w, f"{prefix}{i}") for i in range(1, n + 1)]
    proxies = [start_proxy(f"http://{reg.host}", digest) for _ in machines]
    before = compiles(w)
    start = time.perf_counter()
    try:
        if parallel:
            with concurrent.futures.ThreadPoolExecutor(n) as pool:
                done = list(pool.map(lambda mp: pull_apply(w, mp[0], mp[1], public_key), zip(machines, proxies, strict=True)))
        else:
            done = [pull_apply(w, m, p, public_key) for m, p in zip(machines, proxies, strict=True)]
    finally:
        for p in proxies:
            p.stop()
    wall = time.perf_counter() - start
    assert compiles(w) == before, "a substituting machine ran the compiler"
    print(f"  {'all at once' if parallel else 'one after another'}: {wall:.2f} s wall, 0 compiles")
    return done


def push(w: World, builder: Machine, reg, key_file: Path) -> dict:
    key = Path(builder.result["artifact"]).name  # the artifact directory is named by its key
    _s, res = rocmbuild(["push", key, "--to", reg.url("rocmbuild/fleet"), "--sign-key", key_file],
                        machine_env(builder))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machines", type=int, default=3, help="machines per run (with and without the cache)")
    ap.add_argument("--parallel", type=int, default=8, help="machines pulling at once in the last run")
    ap.add_argument("--pace", type=float, default=30.0, help="seconds the library's compile is made to take")
    ap.add_argument("--pad-mb", type=int, default=16, help="extra MiB in the library (a bigger bundle)")
    args = ap.parse_args()
    if registry.missing():
        sys.exit(f"cannot run: {registry.missing()}")
    with tempfile.TemporaryDirectory(prefix="rocmbuild-fleet-") as tmp_:
        tmp = Path(tmp_)
        w = make_world(tmp / "world", args.pace, args.pad_mb)
        reg = registry.start(tmp / "registry")
        try:
            return run(w, reg, args)
        finally:
            reg.stop()


def run(w: World, reg, args) -> int:
    key_file = w.work / "builder.secret"
    _s, made = rocmbuild(["key", "generate", "builder", "--out", key_file], dict(os.environ, PYTHONPATH=str(ROOT)))
    cold = cold_runs(w, args.machines)
    pushed = push(w, cold[0], reg, key_file)
    size, digest = pushed["size"], pushed["bundle_sha256"]
    print(f"the builder pushed {pushed['recipe']} {pushed['version']} ({pushed['key'][:16]}): bundle {size} B, "
          f"signed by {pushed['signer']}")
    print(f"with the cache: {args.machines} machine(s) pull + apply ...", flush=True)
    serial = cached_runs(w, reg, args.machines, digest, made["public_key"], parallel=False)
    print(f"with the cache: {args.parallel} machine(s) pull + apply at once ...", flush=True)
    together = cached_runs(w, reg, args.parallel, digest, made["public_key"], parallel=True)
    print()
    print(f"fixture build paced to {args.pace:.0f} s, library padded by {args.pad_mb} MiB, {os.cpu_count()} cores")
    report("build + apply (no cache), per machine:", cold, None)
    report("pull + apply (cache), one machine at a time:", serial, size)
    report(f"pull + apply (cache), {args.parallel} at once:", together, size)
    b = statistics.median(m.seconds for m in cold)
    s = statistics.median(m.seconds for m in serial)
    p = statistics.median(m.seconds for m in together)
    exact = all(m.pulled["bundle"] == size for m in serial + together)
    ratio_met, bytes_met = s <= GOAL * b, exact
    print(f"median: build + apply {b:.2f} s; pull + apply {s:.2f} s ({s / b:.1%}); {args.parallel} at once "
          f"{p:.2f} s each ({p / b:.1%})")
    print(f"goal: substituted apply <= {GOAL:.0%} of a building one -> {'MET' if ratio_met else 'NOT MET'}; "
          f"bundle bytes pulled = bundle size ({size} B) on every machine -> {'MET' if bytes_met else 'NOT MET'}")
    return 0 if ratio_met and bytes_met else 1


if __name__ == "__main__":
    sys.exit(main())
