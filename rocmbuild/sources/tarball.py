"""Archive sources: one checked download per sha256; a tarball source is extracted fresh for
every fetch, a prebuilt one is not extracted here at all (the builder extracts its subtree
straight into the artifact: :mod:`rocmbuild.builder.pipeline`).

Decisions: a cached download (``home/downloads/<sha256>``) is re-hashed before reuse and fetched
again if it changed (and its mtime set to now: ``cache gc`` removes downloads unused for
``--keep-days``); the tree is extracted into a temp dir and renamed to
``home/src/tarball-<sha256[:16]>/`` (a half-extracted tree is never seen); a single top-level
directory in the archive becomes the root. Downloading and safe extraction are
:mod:`rocmbuild.sources.archive`'s (shared with artifact bundles).
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from rocmbuild import ui
from rocmbuild.sources.archive import download
from rocmbuild.sources.extract import safe_extract
from rocmbuild.fs.disk import sha256_file
from rocmbuild.home import downloads_dir, src_dir

if TYPE_CHECKING:
    from rocmbuild.sources.debarchive import Package


def tree_path(sha256: str, home: Path) -> Path:
    """Where the tarball with this sha256 is extracted (nothing is created)."""
    return src_dir(home) / f"tarball-{sha256[:16]}"


def download_path(sha256: str, home: Path) -> Path:
    """Where the archive with this sha256 is kept (content-addressed; nothing is created)."""
    return downloads_dir(home) / sha256.lower()


def source_package(archive: str | None, sha256: str | None, home: Path) -> Package | None:
    """What ``show`` says of a Debian package source before any build: the control fields of the
    ``.deb`` at hand (the checked download, else a local path), else the name and version an
    ``apt:`` archive pins (architecture None); None for anything else. Never fails: a damaged
    file is the build's to report."""
    from rocmbuild.sources.debarchive import Package, apt_spec, is_deb, read_package

    if not archive:
        return None
    parsed = urllib.parse.urlparse(archive)
    at_hand = [download_path(sha256, home)] if sha256 else []
    if parsed.scheme == "file":
        at_hand.append(Path(urllib.parse.unquote(parsed.path)))
    elif not parsed.scheme:
        at_hand.append(Path(archive).expanduser())
    for path in at_hand:
        try:
            if path.is_file() and is_deb(path):
                return read_package(path)
        except Exception:  # noqa: BLE001 (any decoding error of hostile bytes: the build names it)
            continue
    if parsed.scheme == "apt":
        try:
            name, version = apt_spec(archive[len("apt:"):])
        except ValueError:
            return None
        pkg, _, arch = name.partition(":")
        return Package(pkg, version, arch or None)
    return None


def touch_download(path: Path) -> None:
    """Mark a download as used now (its mtime: what ``cache gc`` ages downloads by)."""
    try:
        os.utime(path)
    except OSError:
        pass


def fetch(url: str, sha256: str, home: Path) -> Path:
    """The checked download of ``url`` at ``downloads/<sha256>``, downloaded only if missing or changed."""
    sha = sha256.lower()
    archive = download_path(sha, home)
    if archive.is_file():
        if sha256_file(archive) == sha:
            ui.info(f"using cached download {archive}")
            touch_download(archive)
        else:
            ui.warn(f"cached download {archive} changed on disk; downloading again")
            archive.unlink()
    if not archive.is_file():
        ui.info(f"downloading {url}")
        download(url, archive, sha, home=home)
    return archive


def unpack(url: str, sha256: str, home: Path) -> Path:
    """Download ``url`` (once per sha256), extract it fresh and return the tree's root."""
    sha = sha256.lower()
    archive = fetch(url, sha, home)
    final = tree_path(sha, home)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        safe_extract(archive, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    entries = list(final.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink() else final
