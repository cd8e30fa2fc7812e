"""A rebuild costs what changed (issue 28): after a one-line change to one patch, the new key's
build (a new build tree) gets every object but the patched one from ccache, and its bytes are
those of a cold build of the same inputs.

Real git, cmake, ninja, gcc and ccache; the cache is the home's own (``$ROCMBUILD_HOME/ccache``,
under tmp_path), its counters read with ``ccache --print-stats``. The fixture library is built
with debug info (``RelWithDebInfo``: the working directory and the prefix maps matter to ccache
only then) and with ``MIOPEN_FIXTURE_STAMP`` (``__FILE__``, ``__DATE__``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import rb
from tests.support.recipes import write_fixture_recipe

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed")]

#: generated C files compiled beside src/miopen.c and src/stamp.c (all untouched by the patch)
GENERATED = 6
PATCH = """--- a/src/miopen.c
+++ b/src/miopen.c
@@ -24 +24 @@
-const char* miopenFixtureMarker(void) {{ return "stock"; }}
+const char* miopenFixtureMarker(void) {{ return "{word}"; }}
"""


def ccache(home: Path, *args: str) -> str:
    done = subprocess.run(["ccache", *args], env={**os.environ, "CCACHE_DIR": str(home / "ccache")},
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def counters(home: Path) -> dict[str, int]:
    """hits and misses since the last ``ccache -z`` (``--print-stats``: ``name<TAB>value``)."""
    values = {k: int(v) for k, v in (line.split("\t", 1) for line in ccache(home, "--print-stats").splitlines())}
    return {"hits": values["direct_cache_hit"] + values["preprocessed_cache_hit"], "misses": values["cache_miss"]}


def build(recipe: Path, home: Path) -> dict:
    proc = rb("build", recipe, "--json", env={"ROCMBUILD_HOME": str(home)}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hashes(tree: Path) -> dict[str, str]:
    return {p.relative_to(tree).as_posix(): ("link:" + os.readlink(p) if p.is_symlink()
                                             else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in tree.rglob("*") if p.is_file() or p.is_symlink()}


def test_a_one_line_patch_change_recompiles_only_the_patched_file(tmp_path, monorepo):
    recipe = write_fixture_recipe(tmp_path / "recipes", url=monorepo.url, generator="Ninja",
                                  build_type="RelWithDebInfo", source_extra='patches = ["0001-marker.patch"]',
                                  defines={"MIOPEN_FIXTURE_EXTRA_SOURCES": GENERATED, "MIOPEN_FIXTURE_STAMP": True})
    patch = tmp_path / "recipes" / "patches" / "mini" / "0001-marker.patch"
    patch.parent.mkdir(parents=True)
    home = tmp_path / "home"

    patch.write_text(PATCH.format(word="patched"))
    first = build(recipe, home)
    objects = GENERATED + 2  # + src/miopen.c, src/stamp.c
    assert counters(home) == {"hits": 0, "misses": objects}  # cold: every compile went through ccache

    patch.write_text(PATCH.format(word="patched-again"))  # one line of one patch
    ccache(home, "-z")
    second = build(recipe, home)
    assert second["key"] != first["key"] and second["cached"] is False  # a new key: a new build tree
    assert counters(home) == {"hits": objects - 1, "misses": 1}  # only src/miopen.c compiled again
    logs = "".join(f.read_text() for f in (home / "logs" / "mini").glob("2*.log"))
    for key in (first["key"], second["key"]):  # the command lines named each build's own tree
        assert f"-ffile-prefix-map={home}/build/{key}=." in logs

    lib = Path(second["artifact"]) / "tree" / "lib" / "libMIOpen.so.1.0"
    assert b"patched-again" in lib.read_bytes()  # the miss was the changed file: its change is in

    # the objects ccache gave are the bytes a cold compile of these inputs gives, in another home
    other = tmp_path / "elsewhere" / "a-longer-home"
    cold = build(recipe, other)
    assert counters(other) == {"hits": 0, "misses": objects}
    assert cold["key"] == second["key"]
    assert hashes(Path(cold["artifact"]) / "tree") == hashes(Path(second["artifact"]) / "tree")
