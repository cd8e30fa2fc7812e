"""Reproducible builds where the compiler allows: the same inputs give the same bytes in any
``$ROCMBUILD_HOME``, on any day (docs/caches.md, "Reproducible builds").

What a cmake build gets (unless the recipe says ``[build] reproducible = false``):

* ``SOURCE_DATE_EPOCH`` in the build's environment (gcc >= 7 and clang use it for ``__DATE__``
  and ``__TIME__``, cmake for ``string(TIMESTAMP)``, many tools for what they stamp): the
  committer time of the built commit (``git show -s --format=%ct``; the resolved commit, not a
  cherry-pick made on top of it, whose time is now) for a git source; the newest member mtime of
  the archive for a tarball; else :data:`FALLBACK_EPOCH`. ``[build.env]`` may set it itself (it
  wins). The value follows from what the key already holds (the commit, the tarball's sha256).
* Prefix maps appended to ``CMAKE_C_FLAGS`` and ``CMAKE_CXX_FLAGS`` (after the recipe's own
  value of those defines, else after ``$CFLAGS``/``$CXXFLAGS``, which cmake would otherwise have
  read: nothing the recipe or the user sets is dropped): the checkout's root and the build
  tree map to ``.``, so debug info, ``__FILE__`` and assertion texts name no absolute path of
  this machine. The longer (more specific) path is given last: gcc and clang let the last
  matching map win. ``-ffile-prefix-map`` (gcc >= 8, clang >= 10; it implies
  ``-fdebug-prefix-map`` and ``-fmacro-prefix-map``) unless the compiler's ``--version`` line
  (already asked for the cache key) says an older gcc or clang, which get ``-fdebug-prefix-map``.

Decisions: the cache key does not change (``reproducible`` is left out of the key while it is
true), so artifacts built before this stay hits; ``build --check`` says whether one matches a
rebuild. A compiler launcher (ccache with ``CCACHE_BASEDIR``) hands the compiler paths relative
to the build tree, which no absolute map rewrites: a build with ccache and one without name
their sources differently in debug info (each is reproducible on its own; ``--check`` rebuilds
with the launcher a build uses, its cache bypassed). The maps name the build tree, which is
per key, and still cost no ccache hit after a key change: ccache hashes a prefix-map option
without its value and the working directory as the maps rewrite it (``.``), so the maps stay
``DIR=.`` (mapping to a constant such as ``/rocmbuild/build`` would change every artifact's bytes
and no cache key; docs/cache.md, "A changed recipe recompiles what changed").
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from rocmbuild import ui
from rocmbuild.sources.git import Git, GitFailed
from rocmbuild.sources.tarball import download_path
from rocmbuild.sources.ziparchive import ZipReader, is_zip
from rocmbuild.errors import RocmbuildError
from rocmbuild.recipe.model import Build

if TYPE_CHECKING:
    from rocmbuild.store.cache import Tools
    from rocmbuild.sources.source import Checkout

#: SOURCE_DATE_EPOCH when the source gives no time: 1980-01-01T00:00:00Z, the earliest a zip
#: member can carry (0 trips tools that write zip or DOS times)
FALLBACK_EPOCH = 315532800
FILE_MAP = "-ffile-prefix-map"
DEBUG_MAP = "-fdebug-prefix-map"
#: the flags variables the maps are appended to, and the environment variable cmake reads
#: each from when no define sets it
FLAG_VARIABLES = (("CMAKE_C_FLAGS", "CFLAGS", "cc"), ("CMAKE_CXX_FLAGS", "CXXFLAGS", "cxx"))


@dataclass(frozen=True)
class Settings:
    """What makes one build reproducible: ``epoch`` (None: ``[build.env]`` sets its own) and where
    it came from, and the flags appended to each flags variable (``CMAKE_C_FLAGS`` -> flags)."""

    epoch: int | None
    epoch_from: str
    flags: tuple[tuple[str, str], ...]

    def env(self) -> dict[str, str]:
        return {} if self.epoch is None else {"SOURCE_DATE_EPOCH": str(self.epoch)}


def map_option(version_line: str) -> str:
    """``-ffile-prefix-map``, or ``-fdebug-prefix-map`` for a gcc older than 8 or a clang older
    than 10, judged by the compiler's ``--version`` line (an unknown compiler: the former)."""
    text = version_line.split(": ", 1)[-1]
    m = re.search(r"clang version (\d+)", text)
    if m:
        return FILE_MAP if int(m.group(1)) >= 10 else DEBUG_MAP
    m = re.search(r"(?:gcc|g\+\+|cc|c\+\+)\b.*?\s(\d+)\.\d+(?:\.\d+)?\s*$", text, re.IGNORECASE)
    if m:
        return FILE_MAP if int(m.group(1)) >= 8 else DEBUG_MAP
    return FILE_MAP


#: a directory the flags can name as it is (cmake splits CMAKE_<LANG>_FLAGS at spaces, and a
#: shell reads the command lines of both generators)
_PLAIN = re.compile(r"^[A-Za-z0-9._/+,@%:-]+$")


def mappable(d: Path) -> bool:
    return bool(_PLAIN.match(str(d)))


def prefix_maps(option: str, dirs: tuple[Path, ...]) -> str:
    """``option=DIR=.`` for each directory, shortest first (the last matching map wins); a
    directory with a space, a quote or another character a shell reads is left out (a warning
    says so: :func:`settings`)."""
    unique = sorted({str(d) for d in dirs if mappable(d)}, key=len)
    return " ".join(f"{option}={d}=." for d in unique)


def source_date_epoch(checkout: Checkout, home: Path) -> tuple[int, str]:
    """(seconds, where they came from) for ``checkout`` (see the module notes)."""
    if checkout.commit:
        try:
            _status, out, _err = Git(checkout.root).run("show", "-s", "--format=%ct", checkout.commit, timeout=60)
            return int(out.strip().splitlines()[-1]), f"the commit time of {checkout.commit[:12]}"
        except (GitFailed, RocmbuildError, ValueError, IndexError, OSError):
            pass
    if checkout.tarball_sha256:
        newest = newest_mtime(download_path(checkout.tarball_sha256, home))
        if newest is not None:
            return newest, "the newest file time in the archive"
    return FALLBACK_EPOCH, "the fixed fallback (1980-01-01)"


def newest_mtime(archive: Path) -> int | None:
    """The newest member mtime of a tar or zip archive (None: none, or unreadable)."""
    try:
        reader = ZipReader(archive) if is_zip(archive) else tarfile.open(archive, "r:*")
        with reader as tf:
            times = [int(m.mtime) for m in tf.getmembers() if m.mtime]
    except (OSError, tarfile.TarError, ValueError, RocmbuildError):
        return None
    return max(times) if times else None


def settings(build: Build, checkout: Checkout, *, home: Path, build_dir: Path, tools: Tools) -> Settings | None:
    """The reproducibility settings of one build (None: the recipe turned them off, or nothing
    is compiled)."""
    if not build.reproducible or build.prebuilt:
        return None
    if "SOURCE_DATE_EPOCH" in dict(build.env):
        epoch, where = None, "[build.env]"
    else:
        epoch, where = source_date_epoch(checkout, home)
    dirs = (Path(checkout.root), Path(checkout.source_dir), Path(build_dir))
    odd = [str(d) for d in dirs if not mappable(d)]
    if odd:
        ui.warn(f"not mapped to '.' (a space or a character a shell reads in the path): {', '.join(odd)}; "
                "the build's files may name it (a ROCMBUILD_HOME of plain characters avoids this)")
    return Settings(epoch, where, _flags(dirs, tools))


def planned(build: Build, dirs: tuple[Path, ...], tools: Tools) -> Settings | None:
    """What :func:`settings` will give, for ``plan`` (reads nothing: the epoch is left unknown)."""
    if not build.reproducible or build.prebuilt:
        return None
    where = "[build.env]" if "SOURCE_DATE_EPOCH" in dict(build.env) else "the commit time (an archive: its newest file)"
    return Settings(None, where, _flags(dirs, tools))


def _flags(dirs: tuple[Path, ...], tools: Tools) -> tuple[tuple[str, str], ...]:
    compiler = {"cc": tools.cc, "cxx": tools.cxx}
    return tuple((var, prefix_maps(map_option(compiler[which]), dirs)) for var, _env, which in FLAG_VARIABLES)


def flag_values(build: Build, s: Settings | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The flags variables to pass (name -> value): the recipe's define (or the ``$CFLAGS`` /
    ``$CXXFLAGS`` cmake would have read: ``[build.env]``, then ``environ``) with the maps appended.
    None: nothing (the recipe's defines pass as they are)."""
    if s is None:
        return {}
    env = {**environ, **dict(build.env)}
    out = {}
    for var, env_name, _which in FLAG_VARIABLES:
        mine = dict(s.flags)[var]
        own = build.define(var)
        if own is None or isinstance(own, bool):
            base = env.get(env_name, "")
        else:
            base = ";".join(own) if isinstance(own, tuple) else str(own)
        out[var] = f"{base.strip()} {mine}".strip()
    return out
