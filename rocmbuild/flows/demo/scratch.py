"""The demo's scratch world: a directory holding a git repo of the shipped miniature MIOpen, its
recipe, a "stock" build of it and a venv whose ``torch`` is the demo stand-in loading that stock
library from ``torch/lib`` (the PyPI wheel layout).

Decisions:
* The tools are checked before anything is made: cmake, make (the recipe's generator), a C
  compiler (``$CC``, else cc, gcc or clang) and git. A missing one is a ``RequirementError``
  (exit 2, like every missing program) that names them all and how to get them.
* ``--keep-dir DIR`` writes into DIR only when it does not exist or is an empty directory (after
  resolving its symlinks): the demo never mixes its files with a user's.
* The stock library is built from the same source at 3.5.0 (``-DMIOPEN_DEMO_VERSION``) with
  plain cmake, as a vendor would have: it is what the env ships before rocmbuild touches it.
* The stand-in is copied as it ships (data/torch/__init__.py); it says on its first line that it
  is not PyTorch.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rocmbuild.proc import runner
from rocmbuild import ui
from rocmbuild.sources.git import Git
from rocmbuild.errors import InputError, RequirementError

DATA = Path(__file__).resolve().parent / "data"
RECIPE = "miopen-demo.toml"
STOCK_VERSION = "3.5.0"
COMPILERS = ("cc", "gcc", "clang")
TOOLS = {"cmake": "apt install cmake (or: pip install cmake)", "make": "apt install make",
         "git": "apt install git"}


@dataclass(frozen=True)
class Scratch:
    root: Path
    kept: bool

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def env(self) -> Path:
        return self.root / "env"

    @property
    def python(self) -> Path:
        return self.env / "bin" / "python"

    def site_packages(self) -> Path:
        return next(self.env.glob("lib/python3*/site-packages"))

    def library(self) -> Path:
        """The file the stand-in loads (a plain file, as in the PyPI wheels)."""
        return self.site_packages() / "torch" / "lib" / "libMIOpen.so"


def check_tools() -> None:
    """Every program the demo runs is on PATH, or one error naming what is missing."""
    missing = {name: hint for name, hint in TOOLS.items() if runner.which(name) is None}
    cc = os.environ.get("CC")
    if not any(runner.which(c) for c in ((cc,) if cc else COMPILERS)):
        missing[cc or "a C compiler (cc, gcc or clang)"] = "apt install gcc (or set CC to a C compiler)"
    if missing:
        raise RequirementError(
            f"rocmbuild demo builds a small C library and needs {', '.join(missing)}: not found on PATH",
            "; ".join(f"{n}: {h}" for n, h in missing.items())
            + " (Debian/Ubuntu, all at once: apt install cmake build-essential git); nothing was created",
            details={"missing": list(missing), "path": os.environ.get("PATH", "")})


def make_root(keep: str | None) -> Scratch:
    if keep is None:
        return Scratch(Path(tempfile.mkdtemp(prefix="rocmbuild-demo-")).resolve(), kept=False)
    root = Path(keep).expanduser().resolve()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise InputError(f"--keep-dir {keep}: {root} exists and is not an empty directory",
                         "name a new directory (the demo creates it) or an empty one; nothing was changed")
    root.mkdir(parents=True, exist_ok=True)
    return Scratch(root, kept=True)


def prepare(s: Scratch) -> None:
    """The repo, the recipe, the stock library and the env (each announced on one line)."""
    src = s.root / "miopen"
    shutil.copytree(DATA / "miopen", src)
    shutil.copy2(DATA / RECIPE, s.root / RECIPE)
    git = Git(src)
    git.run("init", "-q")
    git.run("add", "-A")
    git.run("-c", "user.name=rocmbuild demo", "-c", "user.email=demo@rocmbuild.invalid", "commit", "-q",
            "-m", "miniature MIOpen 3.5.1")
    ui.info(f"prepared {src}: a git repo of the miniature MIOpen 3.5.1 (recipe {s.root / RECIPE})")
    stock = _build_stock(src, s.root / "stock")
    _make_env(s, stock)
    ui.info(f"prepared {s.env}: a venv whose torch is the demo stand-in (not PyTorch), compiled against "
            f"MIOpen 3.5.0, loading the stock MIOpen {STOCK_VERSION} from torch/lib")


def _build_stock(src: Path, out: Path) -> Path:
    log = out / "build.log"
    bld, inst = out / "build", out / "install"
    steps: tuple[list[str | Path], ...] = (
        ["cmake", "-S", src, "-B", bld, "-G", "Unix Makefiles", f"-DMIOPEN_DEMO_VERSION={STOCK_VERSION}",
         "-DCMAKE_BUILD_TYPE=Release"],
        ["cmake", "--build", bld],
        ["cmake", "--install", bld, "--prefix", inst])
    for argv in steps:
        runner.run(argv, log=log, what=f"building the stock MIOpen {STOCK_VERSION} failed",
                   hint="the demo's own library does not build with this compiler: see the log")
    ui.info(f"prepared {inst}: the stock MIOpen {STOCK_VERSION}, built with plain cmake (log {log})")
    return next((inst / "lib").glob("libMIOpen.so.1.0.*"))


def _make_env(s: Scratch, stock_lib: Path) -> None:
    runner.run([sys.executable, "-m", "venv", "--without-pip", s.env], log=s.root / "stock" / "venv.log",
               error=RequirementError, what="python -m venv failed",
               hint="install the venv module of this Python (Debian/Ubuntu: apt install python3-venv)")
    torch = s.site_packages() / "torch"
    (torch / "lib").mkdir(parents=True)
    shutil.copy2(DATA / "torch" / "__init__.py", torch / "__init__.py")
    shutil.copy2(stock_lib, torch / "lib" / "libMIOpen.so")
