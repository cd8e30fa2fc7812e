"""World builders for the tests (and the benchmarks): real repos, real builds, real envs.

Plain functions and frozen values, no pytest: the fixtures that wrap them are registered in
tests/conftest.py, and benchmarks/_common.py takes what it needs from here. One module per
world: ``project`` (the fixture C project and its cmake build), ``monorepo`` (the git repo that
holds it), ``recipes`` (the one fixture recipe), ``builds`` (artifacts without git),
``fake_torch`` and ``envs`` (target environments), ``machine`` (a ROCm tree, a GPU topology),
``world`` (the session's artifact cache), ``cli`` (the CLI as a process) and ``snapshots``
(a target's state, to compare).
"""
