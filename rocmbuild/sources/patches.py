"""Patches: check every patch of a recipe, then apply them all in one ``git apply`` (or none).

Decisions: paths in patch files are relative to the recipe's ``subdir`` (upstream MIOpen patches
are written against the MIOpen tree), applied at the tree root with ``--directory=<subdir>``; the
concatenation of all patches is checked first and, when that fails, growing prefixes name the first
patch that does not apply while the tree stays unchanged. A tarball's tree is patched with no
repository at all (``Git(..., repository=False)``: ``GIT_DIR=/dev/null``): git discovers neither a
``.git`` the tarball carries (whose config could name filter drivers, hooks or an fsmonitor) nor an
enclosing repository (such as a dotfiles repo around ``~/.cache``).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Sequence

from rocmbuild import ui
from rocmbuild.sources.git import Git, last_line
from rocmbuild.fs.disk import sha256_file
from rocmbuild.errors import FetchError


def apply_patches(
    root: Path, subdir: str | None, patch_files: Sequence[Path], *, log: Path | None = None, in_repo: bool = True
) -> tuple[str, ...]:
    """Check all patches, then apply them at ``root`` with paths relative to ``root/subdir``.

    Returns the sha256 of each patch file, in order. Raises :class:`FetchError` naming the first
    patch that does not apply (and the file git complained about); the tree is then unchanged.
    """
    if not patch_files:
        return ()
    g = Git(root, log, repository=in_repo)
    opts = [f"--directory={subdir}"] if subdir else []
    contents = []
    for p in patch_files:
        try:
            data = Path(p).read_bytes()
        except OSError as exc:
            raise FetchError(f"cannot read patch {p}: {exc}", "check the file exists and is readable") from exc
        contents.append(data if data.endswith(b"\n") else data + b"\n")
    with tempfile.TemporaryDirectory(prefix="rocmbuild-patches-") as tmp:
        def combined(n: int) -> Path:
            f = Path(tmp) / f"first-{n}.patch"
            f.write_bytes(b"".join(contents[:n]))
            return f

        everything = combined(len(contents))
        status, _, err = g.run("apply", "--check", *opts, str(everything), check=False)
        if status != 0:
            for i, p in enumerate(patch_files):
                status, _, err = g.run("apply", "--check", *opts, str(combined(i + 1)), check=False)
                if status != 0:
                    failing = failing_file(err)
                    raise FetchError(
                        f"patch {p} does not apply"
                        + (f" to {failing}" if failing else "")
                        + f" (in {root / subdir if subdir else root}): {last_line(err)}",
                        "update the patch for this ref (paths in patches are relative to the recipe's "
                        "subdir), or drop it from source.patches; nothing was applied",
                        details={"patch": str(p), "file": failing, "git": err.strip()},
                    )
            raise FetchError(f"patches do not apply: {last_line(err)}", "check the patches in source.patches")
        g.run("apply", *opts, str(everything))
    for p in patch_files:
        ui.info(f"applied patch {Path(p).name}")
    return tuple(sha256_file(Path(p)) for p in patch_files)


def failing_file(err: str) -> str | None:
    """The file ``git apply`` complained about, from its error output (None if it names none)."""
    for pattern in (r"error: ([^\s:]+): patch does not apply", r"error: patch failed: ([^\s:]+):\d+",
                    r"error: ([^\s:]+): No such file or directory", r"error: ([^\s:]+): does not exist in index",
                    r"error: ([^\s:]+): already exists in working directory"):
        m = re.search(pattern, err)
        if m:
            return m.group(1)
    return None
