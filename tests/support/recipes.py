"""The fixture recipe: one TOML text for the fixture project, varied by keywords.

Tests and benchmarks used to carry their own copies of this text; they now call
:func:`fixture_recipe` and pass only what differs. Values are written with ``json.dumps``,
whose output is valid TOML for the types recipes use here (strings, integers, booleans, lists
of those); a table is left out when it would be empty, and ``None`` leaves out a key. The text
keeps one ``key = value`` per line so that tests may still edit it with ``str.replace``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

# how the fixture project states its version (tests/fixtures/miopen/CMakeLists.txt)
VERSION_RULE = "{ file = \"CMakeLists.txt\", regex = 'rocm_setup_version\\(VERSION ([0-9.]+)' }"

def _line(key: str, value) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return f"{key} = {json.dumps(value)}"


def _table(header: str, pairs: Mapping[str, object] | None) -> list[str]:
    lines = [_line(k, v) for k, v in (pairs or {}).items() if v is not None]
    return [f"[{header}]", *lines] if lines else []


def _source(*, url, ref, subdir, sparse, version, tarball, sha256, extra) -> list[str]:
    lines = ["[source]"]
    if tarball is not None:
        lines += [_line("tarball", tarball), _line("sha256", sha256)]
    else:
        lines.append(_line("git", url))
    for key, value in (("ref", ref), ("subdir", subdir), ("sparse", sparse)):
        if value is not None:
            lines.append(_line(key, value))
    if version is not None:
        lines.append(f"version = {version}")
    if extra:
        lines.append(extra)
    return lines


def fixture_recipe(
    *,
    name: str | None = "mini",
    description: str | None = None,
    url: str = "file:///unused",
    ref: str | None = "develop",
    subdir: str | None = "projects/miopen",
    sparse: Sequence[str] | None = None,
    version: str | None = VERSION_RULE,
    tarball: str | None = None,
    sha256: str | None = None,
    source_extra: str = "",
    generator: str | None = None,
    jobs: int | None = None,
    build_type: str | None = None,
    launcher: str | None = None,
    reproducible: bool | None = None,
    defines: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    programs: Sequence[str] | None = None,
    libraries: Sequence[str] | None = ("libMIOpen",),
    data: Sequence[str] | None = ("share/miopen/db",),
    verify: str | None = "source",
) -> str:
    """The recipe text for the fixture project.

    Defaults: git ``url`` at ``ref`` ``develop``, ``subdir`` ``projects/miopen`` (the monorepo
    layout), the version read from CMakeLists.txt, ``[install]`` of libMIOpen and its perf db,
    ``[verify] version = "source"``. ``version`` is raw TOML (an inline table or a quoted
    string); ``source_extra`` is raw TOML lines appended to ``[source]`` (patches, cherry_pick).
    ``tarball`` (with ``sha256``) replaces ``git``. ``libraries=None`` / ``verify=None`` leave
    those tables out (a recipe that is only a source, as the fetch tests use).
    """
    head = [_line(k, v) for k, v in (("name", name), ("description", description)) if v is not None]
    lines = head + _source(url=url, ref=ref, subdir=subdir, sparse=sparse, version=version, tarball=tarball,
                           sha256=sha256, extra=source_extra)
    lines += _table("build", {"generator": generator, "jobs": jobs, "build_type": build_type, "launcher": launcher,
                              "reproducible": reproducible})
    lines += _table("build.defines", defines)
    lines += _table("build.env", env)
    lines += _table("requires", {"programs": programs})
    lines += _table("install", {"libraries": libraries, "data": data} if libraries is not None else None)
    lines += _table("verify", {"version": verify})
    return "\n".join(lines) + "\n"


def write_fixture_recipe(directory: Path, name: str = "mini", **kw) -> Path:
    """Write :func:`fixture_recipe` as ``directory/<name>.toml`` (directory created); returns the path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.toml"
    path.write_text(fixture_recipe(name=name, **kw))
    return path
