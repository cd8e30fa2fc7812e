"""What a conda tool prints around its answer cannot end in "internal error" (issue 26, class 4):
``conda run`` that prints ``{not json`` (or nested brackets) after the environment dump.

Real: a venv laid out like a conda env, a stand-in ``conda`` script (no conda here) that runs the
command as ``conda run -p PREFIX`` does and then prints its own line, the real probe.
"""

from __future__ import annotations

import pytest

from rocmbuild.environment.target import discover

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("after", ["{not json", "[" * 5000, "{" + "[" * 5000])
def test_conda_run_printing_junk_after_the_dump_is_still_read(target_env, tmp_path, monkeypatch, after):
    env = target_env("3.5.1")
    (env.prefix / "conda-meta").mkdir(exist_ok=True)
    conda = tmp_path / "bin" / "conda"
    conda.parent.mkdir()
    conda.write_text('#!/bin/bash\n[ "$1" = run ] && [ "$2" = -p ] || exit 9\np=$3; shift 3\n'
                     'export CONDA_PREFIX="$p" SET_BY_CONDA_RUN=1\n"$@"\nrc=$?\n'
                     f"printf '%s\\n' '{after}'\nexit $rc\n")
    conda.chmod(0o755)
    monkeypatch.setenv("CONDA_EXE", str(conda))
    t = discover(env=str(env.prefix))
    assert t.activation.how == f"conda run ({conda})"
    assert t.activation.change("SET_BY_CONDA_RUN").source == "conda run"
