"""MIOpen's version tweak carries the source: two builds of different sources never share a user
kernel cache dir (``~/.cache/miopen/<major.minor.patch.tweak>/``; docs/miopen.md).

What MIOpen's CMake reads (verified in MIOpen 2.17 ``rocm-5.2.3``, ROCm/MIOpen 3.3.0 and
rocm-libraries' ``projects/miopen``, with rocm-cmake's ``ROCMSetupVersion.cmake``): no define
names the tweak. ``rocm_setup_version(VERSION x.y.z)`` sets ``MIOpen_VERSION_TWEAK`` (a normal
variable, so a ``-D`` of it is shadowed) to the output of ``${GIT} describe --dirty --long
--match [0-9]*`` (retried with ``--always``) run in the source dir, where ``GIT`` is the cache
variable of ``find_program(GIT NAMES git)``; ``version.h`` gets ``MIOPEN_VERSION_TWEAK`` from it.
So the tweak is whatever that command prints: a tarball tree gives an empty tweak (every tarball
build of 3.5.1 shares ``3.5.1.``), or the commit of an enclosing repository; patches give a
``-dirty`` that two patch sets share.

Decisions:
* rocmbuild sets ``GIT`` itself (``-DGIT:STRING=/bin/sh;-c;echo <tweak>;rocmbuild-tweak``: the
  describe arguments land in the shell's positional parameters, unused), so the tweak is
  ``<commit[:12]>``, or ``<tarball sha256[:12]>``, with ``-<8 hex>`` of the patches' sha256 and the
  cherry-picks when there are any: only what the cache key hashes already, so the key is unchanged;
* only for a MIOpen recipe (``[verify] encoding = "miopen"``) that is built (not prebuilt) and
  whose own defines do not name ``GIT``; an unresolved commit gives no define (``plan`` offline).
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from rocmbuild.recipe.model import Recipe

PROGRAM = "/bin/sh"
# cache entries MIOpen's CMake derives from the tweak once and then keeps (``set(... CACHE ...)``):
# a kept build tree (a retry's copy) configured with another tweak must lose them, or the new
# library names its user find-db files with the old tweak (seen on the real MIOpen 2.17 build:
# version.h took the new tweak, ``GetUserDbSuffix()`` still said the old one).
DERIVED = ("MIOPEN_USER_DB_SUFFIX",)
MARKER = "rocmbuild-tweak"
_HEX = re.compile(r"[0-9a-f]+")


def applies(recipe: "Recipe") -> bool:
    return (recipe.verify.encoding == "miopen" and not recipe.build.prebuilt
            and recipe.build.define("GIT") is None)


def version_tweak(commit: str | None, tarball_sha256: str | None, patch_sha256: Sequence[str] = (),
                  cherry_pick: Sequence[str] = ()) -> str | None:
    """The tweak for a source: hex and ``-`` only (a token in ``version.h``); None: not known yet."""
    base = (commit or tarball_sha256 or "").lower()[:12]
    if not _HEX.fullmatch(base or "-"):
        return None
    if not patch_sha256 and not cherry_pick:
        return base
    extra = hashlib.sha256("\n".join(["patches", *patch_sha256, "cherry_pick", *cherry_pick]).encode())
    return f"{base}-{extra.hexdigest()[:8]}"


def for_recipe(recipe: "Recipe", commit: str | None, patch_sha256: Sequence[str]) -> str | None:
    """The tweak a build of ``recipe`` at ``commit`` sets (None: none is set)."""
    if not applies(recipe):
        return None
    return version_tweak(commit, recipe.source.sha256, patch_sha256, recipe.source.cherry_pick)


def define(tweak: str) -> str:
    """The configure argument making ``rocm_setup_version`` take ``tweak`` as ``git describe``'s output."""
    if not re.fullmatch(r"[0-9a-f]+(-[0-9a-f]+)?", tweak):
        raise ValueError(f"not a version tweak: {tweak!r}")
    return f"-DGIT:STRING={PROGRAM};-c;echo {tweak};{MARKER}"
