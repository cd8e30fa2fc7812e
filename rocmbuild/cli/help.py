"""The text of ``--help``: what the tool does, the commands most users need, the exit codes (read
from rocmbuild.errors, never copied), the environment variables, and an example for every verb.

Decisions: the examples live here beside the rest of the help text, keyed by verb name, and
``app.build_parser`` hangs them on each verb's parser (a verb added later gets its example by a
row here; ``tests/integration/test_first_contact.py`` fails for a verb without one). The
``--version`` text names the Python and the install path, the two facts a bug report needs.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

from rocmbuild import __version__
from rocmbuild.errors import EXIT_CODES

DESCRIPTION = (
    "rocmbuild builds GPU libraries (MIOpen, cuDNN sets, ...) from recipes and swaps them into a PyTorch\n"
    "environment: atomically (a crash leaves the old or the new state, never a mix), verified by the\n"
    "environment's own Python, and reversible with one command."
)

#: (name, what it means); every ROCMBUILD_* the code reads is here or in :data:`TESTING` (a test
#: greps the package)
ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("ROCMBUILD_HOME", "the build cache and artifacts (default $XDG_CACHE_HOME/rocmbuild, else ~/.cache/rocmbuild)"),
    ("ROCMBUILD_STATE_HOME", "rollback state of targets outside their prefix, and the known-targets records "
                             "(default $ROCMBUILD_HOME/state when that is set, else $XDG_STATE_HOME/rocmbuild, "
                             "else ~/.local/state/rocmbuild)"),
    ("ROCMBUILD_RECIPES", "more recipe directories, colon-separated (searched after --recipes-dir)"),
    ("ROCM_PATH", "the ROCm installation to build against (default /opt/rocm, else /usr)"),
    ("CONDA_PREFIX", "the target when none of --env, -n, --python is given (an active conda env)"),
    ("VIRTUAL_ENV", "the target when none of --env, -n, --python is given and no conda env is active"),
    ("CONDA_EXE", "the conda whose `run -p PREFIX` activates a conda target for the probe (else MAMBA_EXE, then "
                  "conda/mamba/micromamba on PATH; none: rocmbuild sources its activate.d scripts itself)"),
    ("MAMBA_EXE", "the mamba/micromamba used like CONDA_EXE when that is not set"),
    ("CONDA_ENVS_PATH", "more directories of conda envs for -n NAME (also CONDA_ENVS_DIRS, envs_dirs in .condarc)"),
    ("MAMBA_ROOT_PREFIX", "micromamba's root: its envs/ holds more conda envs for -n NAME"),
    ("CONDARC", "one more conda config file whose envs_dirs -n NAME searches"),
    ("NO_COLOR", "set: print no colours"),
    ("XDG_CACHE_HOME", "the cache's parent when ROCMBUILD_HOME is not set"),
    ("XDG_STATE_HOME", "the state's parent when neither ROCMBUILD_STATE_HOME nor ROCMBUILD_HOME is set"),
    ("XDG_CONFIG_HOME", "recipes in $XDG_CONFIG_HOME/rocmbuild/recipes and the user's config.toml (default ~/.config)"),
    ("ROCMBUILD_CONFIG", "one more config file, read after /etc/rocmbuild/config.toml and the user's"),
    ("DOCKER_CONFIG", "where Docker's config.json is (default ~/.docker): registry credentials for oci:// caches"),
    ("ROCMBUILD_DOWNLOAD_RETRIES", "how often a failed download is retried, with backoff (default 3; 0: never)"),
    ("ROCMBUILD_HEARTBEAT_S", "off a terminal, a progress line at least this often (default 30 seconds)"),
    ("ROCMBUILD_PROGRESS_STEP", "off a terminal, a progress line at each this many percent of the build (default 10)"),
    ("ROCMBUILD_SMOKE_DEVICE", "cpu: run the --smoke suite on the CPU, without a GPU (it proves the torch side, "
                               "not the GPU library)"),
)

#: variables only the test suite sets: named in a one-line note after the environment, not
#: explained among what users set (docs/testing.md says what each does)
TESTING: tuple[tuple[str, str], ...] = (
    ("ROCMBUILD_SYSFS_ROOT", "a faked /sys (the GPU topology), for tests"),
    ("ROCMBUILD_ROOT", "a faked / (where ROCm and /etc/os-release are looked for), for tests"),
    ("ROCMBUILD_NO_OPENAT2", "set: resolve paths beneath a root with the O_NOFOLLOW walk instead of openat2, for tests"),
    ("ROCMBUILD_FAILPOINTS", "die (exit 137) at the named transaction steps, for crash tests"),
    ("ROCMBUILD_PAUSEPOINTS", "pause at the named transaction steps, for tests"),
    ("ROCMBUILD_PAUSE_SECONDS", "how long such a pause lasts (default 60)"),
)

MOST_USED = (
    ("rocmbuild apply miopen-3.5.1 --env ~/miniconda3/envs/torch",
     "build (or take from the cache) and swap it in, verified"),
    ("rocmbuild status -n torch", "what the environment loads now, and what rocmbuild changed"),
    ("rocmbuild rollback -n torch", "undo the last apply, verified"),
)

#: verb -> example command lines (shown under "examples:" in the verb's --help)
EXAMPLES: dict[str, tuple[str, ...]] = {
    "recipes": ("rocmbuild recipes", "rocmbuild --json recipes"),
    "show": ("rocmbuild show miopen-3.5.1", "rocmbuild show ./my-miopen.toml -D MIOPEN_USE_MLIR=OFF"),
    "plan": ("rocmbuild plan miopen-develop", "rocmbuild plan miopen-3.5.1 --offline --gpu-targets gfx1151"),
    "build": ("rocmbuild build miopen-3.5.1 --jobs 8", "rocmbuild build --from-lock miopen-3.5.1.lock.json",
              "rocmbuild build miopen-3.5.1 --cache oci://registry.lab:5000/rocmbuild --require-cache",
              "rocmbuild build --check miopen-3.5.1"),
    "status": ("rocmbuild status --env ~/miniconda3/envs/torch", "rocmbuild status -n torch --hash"),
    "verify": ("rocmbuild verify -n torch --expect 3.5.1", "rocmbuild verify --python ./venv/bin/python --smoke"),
    "doctor": ("rocmbuild doctor", "rocmbuild doctor miopen-3.5.1 -n torch"),
    "log": ("rocmbuild log miopen-develop", "rocmbuild log miopen-develop --follow", "rocmbuild log miopen-develop --list"),
    "cache": ("rocmbuild cache dir", "rocmbuild cache rm miopen-develop", "rocmbuild cache verify", "rocmbuild cache list", "rocmbuild cache list --remote oci://registry.lab:5000/rocmbuild", "rocmbuild cache gc --keep-days 30 --dry-run"),
    "export": ("rocmbuild export miopen-3.5.1 -o /srv/ship/",),
    "lock": ("rocmbuild lock miopen-develop -o miopen-develop.lock.json",),
    "apply": ("rocmbuild apply miopen-3.5.1 -n torch", "rocmbuild apply miopen-3.5.1 --env ./venv --dry-run",
              "rocmbuild apply --artifact /srv/ship/miopen-3.5.1.tar.gz --env /opt/envs/torch --json",
              "rocmbuild apply miopen-3.5.1 -n torch --cache oci://registry.lab:5000/rocmbuild --require-cache",
              "rocmbuild apply --from-lock miopen-3.5.1.lock.json -n torch --offline"),
    "rollback": ("rocmbuild rollback -n torch", "rocmbuild rollback --env ./venv --to 2 --if-applied   # the state after txn 2",
                 "rocmbuild rollback -n torch --to 0   # the stock state"),
    "redo": ("rocmbuild redo -n torch   # re-apply what the last rollback undid",),
    "history": ("rocmbuild history -n torch",),
    "recover": ("rocmbuild recover --env ./venv",),
    "completion": ("rocmbuild completion bash > ~/.local/share/bash-completion/completions/rocmbuild",
                   "rocmbuild completion zsh > ~/.zfunc/_rocmbuild   # with fpath+=(~/.zfunc) in ~/.zshrc"),
    "push": ("rocmbuild push miopen-3.5.1 --to oci://registry.lab:5000/rocmbuild --sign-key ~/.config/rocmbuild/lab-1.secret",
             "rocmbuild push 3f2a9c0d41b7e655"),
    "key": ("rocmbuild key generate lab-1 --out ~/.config/rocmbuild/lab-1.secret",),
    "config": ("rocmbuild config list", "ROCMBUILD_CONFIG=./ci.toml rocmbuild config list --json"),
    "demo": ("rocmbuild demo", "rocmbuild demo --keep-dir /tmp/rocmbuild-demo"),
}


def _table(rows, indent: int = 2) -> str:
    """Two columns, the second wrapped to the terminal (at most 100 columns)."""
    width = max(len(name) for name, _ in rows)
    room = max(30, min(shutil.get_terminal_size().columns, 100) - indent - width - 2)
    out = []
    for name, text in rows:
        lines = textwrap.wrap(text, room) or [""]
        out.append(f"{'':{indent}}{name:{width}}  {lines[0]}")
        out += [f"{'':{indent + width + 2}}{line}" for line in lines[1:]]
    return "\n".join(out)


def epilog() -> str:
    """The part of the top-level --help after the verb list."""
    most = "\n".join(f"  {cmd}\n      {what}" for cmd, what in MOST_USED)
    return (f"the commands most users need:\n{most}\n\n"
            "global options (before or after the verb): --json, -q/--quiet, -v/--verbose, --debug\n"
            "`rocmbuild VERB --help` shows each verb's options and examples.\n\n"
            f"exit codes:\n{_table(EXIT_CODES)}\n\n"
            f"environment variables:\n{_table(ENVIRONMENT)}\n\n"
            + textwrap.fill("for tests only (set by rocmbuild's test suite, never needed in use; docs/testing.md): "
                            + ", ".join(name for name, _ in TESTING), 100))


def examples(verb: str) -> str | None:
    lines = EXAMPLES.get(verb)
    return ("examples:\n" + "\n".join(f"  {line}" for line in lines)) if lines else None


def version_text() -> str:
    package = Path(__file__).resolve().parents[1]
    return (f"rocmbuild {__version__}\n"
            f"Python {sys.version.split()[0]} ({sys.executable})\n"
            f"installed at {package}")
