"""A conda-like env whose code logs the uid that ran it: the world of the run-as tests
(tests/integration/test_other_owner.py, test_attacks_round3.py). Run as root only."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.envs import Env, make_env

OWNER = 1000
SYSTEM_PYTHON = "/usr/bin/python3.11"


def need_root() -> None:
    if os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.fail("these tests run as root with a system Python at " + SYSTEM_PYTHON)


@contextmanager
def logging_env(fixture_libs: Callable[[str], Path], prefix: str) -> Iterator[tuple[Env, Path, Path]]:
    """(env, log, base): an env (libMIOpen 3.5.0, root's, in a fresh 0755 dir under /tmp) whose
    ``activate.d`` script and ``.pth`` file append ``activate UID`` / ``pth UID`` to ``log``;
    removed on the way out."""
    need_root()
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        env = make_env(base / "env", layout="conda", lib_dir=fixture_libs("3.5.0"), base_python=SYSTEM_PYTHON)
        log = base / "ran.log"
        log.write_text("")
        (env.prefix / "conda-meta").mkdir(exist_ok=True)
        script = env.prefix / "etc/conda/activate.d/owner.sh"
        script.parent.mkdir(parents=True)
        script.write_text(f'echo "activate $(id -u)" >> "{log}"\n')
        (env.site_packages / "zz_owner.pth").write_text(
            f"import os; open({str(log)!r}, 'a').write('pth %d\\n' % os.getuid())\n")
        yield env, log, base
    finally:
        shutil.rmtree(base, ignore_errors=True)
