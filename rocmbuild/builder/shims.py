"""The include dir rocmbuild makes for ``${HALF_INCLUDE_DIR}`` where the machine has only a bare
``half.hpp`` (Debian's ``libhalf-dev``: ``/usr/include/half.hpp``) and MIOpen's CMake looks for
``half/half.hpp`` (recipe/variables.py says when and why it is a copy).

Decisions: made right before configure (``build``; never by ``doctor`` or ``plan``, which change
nothing) as ``<cache home>/include/half-<sha16>/half/half.hpp``, through the cache home's fd
(:class:`rocmbuild.fs.root.Root`): every directory is created and opened beneath it without following
a symlink, and the file is written atomically (a temp beside it, renamed). A symlink planted at
``include``, ``half-<sha16>`` or ``half`` refuses the build (ConfinementError, exit 2) and writes
nothing elsewhere. The header's bytes are read once and must still have the hash the dir is named
after (a header replaced since the recipe was loaded: refused, run again). An existing file with
the right bytes is kept; any other is replaced.
"""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

from rocmbuild import ui
from rocmbuild.errors import RequirementError
from rocmbuild.recipe import Recipe, variables
from rocmbuild.fs.root import Root


def make(recipe: Recipe, home: Path, values: dict[str, variables.Variable] | None = None) -> Path | None:
    """Make ``${HALF_INCLUDE_DIR}`` for ``recipe`` when it is rocmbuild's to make; its path, or None."""
    v = variables.half_shim(recipe, values if values is not None else variables.resolve(home=home))
    if v is None or v.source is None or v.value is None:
        return None
    shim = Path(v.value)
    try:
        rel = shim.relative_to(home)
    except ValueError:  # resolved under another home than this build's: nothing of ours to make
        return None
    try:
        with open(v.source, "rb") as f:
            data = f.read(variables._HALF_MAX + 1)
    except OSError as exc:
        raise RequirementError(f"cannot read {v.source} for ${{HALF_INCLUDE_DIR}}: {exc.strerror}",
                               "install half.hpp again (Debian/Ubuntu: libhalf-dev)") from None
    if not shim.name.endswith(hashlib.sha256(data).hexdigest()[:16]):
        raise RequirementError(f"{v.source} changed while rocmbuild was preparing the build",
                               "run the command again")
    target = rel / "half" / "half.hpp"
    with Root.open(home, "the cache", create=True) as root:
        root.makedirs(str(target.parent))
        st = root.lstat(str(target))
        if (st is not None and stat.S_ISREG(st.st_mode) and st.st_size == len(data)
                and root.sha256(str(target)) == hashlib.sha256(data).hexdigest()):
            return shim
        root.write_atomic(str(target), data, mode=0o644)
    ui.info(f"${{HALF_INCLUDE_DIR}}: {shim} holds half/half.hpp (a copy of {v.source})")
    return shim
