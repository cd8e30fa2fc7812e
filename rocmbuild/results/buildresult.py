"""Results of the verbs that read recipes and build: recipes, show, plan, build, build --check."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from rocmbuild.errors import RocmbuildError
from rocmbuild.results.base import Json, Record, VerbResult, seconds_json

if TYPE_CHECKING:
    from rocmbuild.store.artifact import Artifact
    from rocmbuild.builder.rebuild import Difference
    from rocmbuild.builder.requirements import DoctorCheck
    from rocmbuild.sources.debarchive import Package
    from rocmbuild.store.cache import Inputs
    from rocmbuild.store.provenance import Origin

# recipes, show


@dataclass(frozen=True)
class RecipeEntry(Record):
    name: str
    path: str
    description: str
    error: str | None


@dataclass(frozen=True)
class RecipesResult(VerbResult):
    recipes: tuple[RecipeEntry, ...]
    search_path: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"recipes": [r.to_json() for r in self.recipes], "search_path": list(self.search_path)}


@dataclass(frozen=True)
class ShowResult(VerbResult):
    name: str
    path: str
    description: str
    recipe: Json  # the recipe's canonical form
    patch_files: tuple[str, ...]
    toml: str  # the recipe file as written (text output only)
    fixes: tuple[str, ...] = ()  # the names of [source] contains: what an artifact of it carries
    fixes_where: tuple[str, ...] = ()  # text only: where each is searched (the source, the artifact)
    overridden: tuple[str, ...] = ()  # "key = value" the command line set (text only: the JSON's recipe has them)
    package: Package | None = None  # a Debian package source (its architecture None until fetched)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "description": self.description, "recipe": self.recipe,
                "patch_files": list(self.patch_files), "fixes": list(self.fixes),
                "package": self.package.to_json() if self.package else None}


# plan, build


@dataclass(frozen=True)
class SourcePlan:
    url: str
    ref: str | None
    commit: str | None
    resolved: bool
    subdir: str | None
    sparse: tuple[str, ...]
    cherry_pick: tuple[str, ...]
    patches: tuple[str, ...]
    contains: tuple[Json, ...] = ()  # [source] contains: checked after the fetch, before configure

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "ref": self.ref, "commit": self.commit, "resolved": self.resolved,
                "subdir": self.subdir, "sparse": list(self.sparse), "cherry_pick": list(self.cherry_pick),
                "patches": list(self.patches), "contains": list(self.contains)}


@dataclass(frozen=True)
class BuildPlan(VerbResult):
    recipe: str
    path: str
    source: SourcePlan
    gpu_targets: str | tuple[str, ...] | None  # as the recipe has it: "a;b" or a list
    commands: Mapping[str, Sequence[str]]  # configure/build/install -> argv
    env: Mapping[str, str]
    destdir: str
    cache_key: str | None
    cached: bool
    inputs: Inputs  # the cache key's inputs, as store/cache.py computes them
    requirements: tuple["DoctorCheck", ...]  # the [requires] and the launcher
    notes: tuple[str, ...]
    substitute: str | None = None  # not cached here: the binary cache it would be substituted from
    signer: str | None = None  # the trusted key that signed what ``substitute`` holds (None: unsigned, or none)
    unreachable: tuple[str, ...] = ()  # the binary caches that could not be asked (it would be built)

    @property
    def action(self) -> str:
        """What ``build`` would do: ``cached`` (a local hit), ``substitute`` or ``build``."""
        return "cached" if self.cached else "substitute" if self.substitute else "build"

    @property
    def missing(self) -> tuple["DoctorCheck", ...]:
        return tuple(c for c in self.requirements if c.status == "fail")

    @property
    def install(self) -> str | None:
        """The missing requirements' install commands as one line (builder/hints.py)."""
        from rocmbuild.builder.hints import install_line

        return install_line(self.requirements)

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe, "path": self.path, "source": self.source.to_json(),
            "gpu_targets": self.gpu_targets, "commands": {k: list(v) for k, v in self.commands.items()},
            "env": dict(self.env), "install_env": {"DESTDIR": self.destdir},
            "cache": {"key": self.cache_key, "cached": self.cached, "inputs": self.inputs.to_json(),
                      "substitute": self.substitute, "signer": self.signer, "unreachable": list(self.unreachable),
                      "action": self.action},
            "requirements": [c.to_json() for c in self.requirements],
            "missing": [c.to_json() for c in self.missing], "install": self.install, "notes": list(self.notes),
        }


@dataclass(frozen=True)
class BuildResult(VerbResult):
    artifact: "Artifact"
    duration_s: float | None = None  # this run, start to end
    log: str | None = None  # this attempt's build log (None: a cache hit ran nothing)
    substituted: Origin | None = None  # from a binary cache (None: built here)
    added: bool | None = None  # this run put the artifact into the local cache (built or substituted now)

    @property
    def changed(self) -> bool:
        return (not self.artifact.cached) if self.added is None else self.added

    def to_json(self) -> dict[str, Any]:
        art, m = self.artifact, self.artifact.manifest
        return {
            "cached": art.cached, "artifact": str(art.path), "key": m.key, "recipe": m.recipe,
            "commit": m.commit, "version": m.version, "fixes": list(m.fixes),
            "fixes_found": [asdict(f) for f in m.found()], "log": self.log,
            "package": m.package.to_json() if m.package else None,
            "substituted": self.substituted.to_json() if self.substituted else None,
            "duration_s": seconds_json(self.duration_s),
            "libraries": [{"name": lib.name, "file": lib.file, "soname": lib.soname, "chain": list(lib.chain)}
                          for lib in m.libraries],
        }


@dataclass(frozen=True)
class CheckResult(VerbResult):
    """``build --check``: the cached artifact against a rebuild from zero (builder/rebuild.py)."""

    recipe: str
    key: str
    artifact: str
    substituted: Origin | None  # the cached artifact came from a binary cache (None: built here)
    compared: int  # paths compared (the union of both trees)
    differences: tuple["Difference", ...]
    duration_s: float | None = None
    log: str | None = None

    @property
    def identical(self) -> bool:
        return not self.differences

    @property
    def error(self) -> RocmbuildError | None:
        if self.identical:
            return None
        from rocmbuild.builder.rebuild import NotReproducible  # the builder's tree, only for a failed check

        names = ", ".join(d.path for d in self.differences[:5]) + (", ..." if len(self.differences) > 5 else "")
        return NotReproducible(
            f"the rebuild of {self.recipe} differs from the cached artifact {self.key[:16]} in "
            f"{len(self.differences)} of {self.compared} file(s): {names}",
            "the cached artifact is unchanged and still served; find what the build stamps into those files "
            "(a time, a path, a random value; `diffoscope OLD NEW` shows where), "
            f"or read the rebuild's log {self.log}",
            details={"differences": [d.to_json() for d in self.differences]})

    def to_json(self) -> dict[str, Any]:
        return {"identical": self.identical, "recipe": self.recipe, "key": self.key, "artifact": self.artifact,
                "substituted": self.substituted.to_json() if self.substituted else None, "compared": self.compared,
                "differences": [d.to_json() for d in self.differences],
                "duration_s": seconds_json(self.duration_s), "log": self.log}


# status, verify, doctor


