"""The plan: which path becomes what. Artifact + target facts -> :class:`Plan`; changes nothing.

Decisions (the mapping rules in full: docs/transactions.md, "Planning"):
* the target's names win, never the artifact's: the new bytes go to the file the target's chain
  resolves to, under its name; links are kept (:mod:`rocmbuild.swap.mapping`); a library set is
  one plan, members torch has not mapped yet found beside the mapped ones;
* ``[install] data`` dirs land at ``<libdir>/../<data path>``; missing parents are recorded so a
  revert removes them again; a library loaded from outside the prefix is refused unless asked;
  old MIOpen DB files the artifact does not replace are moved aside (:mod:`rocmbuild.swap.dbfiles`);
* every destination is checked by :class:`~rocmbuild.swap.landing.Places` (only the lib dir and its
  ``../share``, never the state dir, never through a symlink out of the prefix) before any action;
* "already there" is decided by identity (the cache's inode, or the identity the active
  transaction recorded after its swap), hashing only a same-size regular file otherwise;
* everything is observed through an :class:`~rocmbuild.swap.pathstate.Observer`: pure, testable.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, cast

from rocmbuild import schema as s
from rocmbuild.errors import InputError, TargetError
from rocmbuild.home import target_state_dir
from rocmbuild.swap import strays
from rocmbuild.swap.dbfiles import stale_actions
from rocmbuild.swap.mapping import (After, NameMap, check_chains, find_beside, layout_of, lib_dir_names,
                                     placed_unchanged, soname_notes)
from rocmbuild.swap.pathstate import PATH_STATE_SPEC, FsObserver, Observer, PathState, resolve
from rocmbuild.swap.landing import Places, clean_relative, missing_dirs, plain_name

if TYPE_CHECKING:
    from rocmbuild.store.artifact import Artifact, LibraryEntry, Manifest
    from rocmbuild.environment.target import Target

ACTION_KINDS = ("replace_file", "add_file", "replace_link", "remove")


@dataclass(frozen=True)
class Action:
    kind: str  # replace_file | add_file | replace_link | remove
    path: str  # absolute destination
    role: str  # library | link | data | restore
    before: PathState
    source: str | None = None  # file placed at path (artifact file or, for rollback, a backup)
    link: str | None = None  # link text placed at path
    size: int = 0
    sha256: str | None = None
    create_dirs: tuple[str, ...] = ()  # missing parents, outermost first
    done: bool = False  # already what the plan wants: nothing to do

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["before"] = self.before.to_json()
        d["create_dirs"] = list(self.create_dirs)
        return d

    @classmethod
    def from_json(cls, d: Any, file: object = "a plan action") -> "Action":
        return cast(Action, s.load(ACTION_SPEC, d, file))  # SchemaError naming the field

    def describe(self) -> str:
        if self.kind == "remove":
            new = "removed"
        elif self.link is not None:
            new = f"link -> {self.link}"
        else:
            new = f"file from {self.source}"
        return f"{self.path}: {self.before.describe()} => {new}" + (" (already)" if self.done else "")


@dataclass(frozen=True)
class Plan:
    verb: str  # apply | rollback
    prefix: str
    python: str
    libdir: str
    layout: str  # conda | wheel | therock | system (swap.mapping.LAYOUTS)
    outside: bool
    state_dir: str
    actions: tuple[Action, ...]
    library: str  # where the real library is after this plan (what verification expects loaded)
    library_before: str  # the library the target loaded before
    version_before: str | None
    version_after: str | None  # the version verification expects (None: not checked)
    encoding: str = "miopen"
    library_name: str = "libMIOpen"  # the stem verification looks for
    recipe: str | None = None
    commit: str | None = None
    artifact: str | None = None  # artifact key
    artifact_path: str | None = None
    notes: tuple[str, ...] = ()
    undoes: tuple[str, ...] = ()  # rollback: the applies this plan takes out of effect (swap/ineffect.py)
    restores_to: str | None = None  # rollback/redo: the state after this txn id ("stock": before all) comes back
    redoes: str | None = None  # redo: the rollback whose undoing it is (what that rollback undid comes back)
    remove_dirs: tuple[str, ...] = ()  # rollback: dirs created by undone transactions (removed if empty)
    names: tuple[NameMap, ...] = ()  # apply: which artifact name maps onto which target name, and why

    @property
    def pending(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if not a.done)

    @property
    def already_applied(self) -> bool:
        return not self.pending

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["actions"] = [a.to_json() for a in self.actions]
        d.update({k: list(d[k]) for k in ("notes", "undoes", "remove_dirs", "names")})
        return d

    @classmethod
    def from_json(cls, d: Any, file: object = "a plan") -> "Plan":
        return cast(Plan, s.load(PLAN_SPEC, d, file))  # SchemaError naming the field

    def render(self) -> str:
        lines = [f"{self.verb} on {self.prefix} ({self.layout} layout, lib dir {self.libdir})"]
        lines += [f"  {a.describe()}" for a in self.actions]
        lines += [f"  name: {n.describe()}" for n in self.names] + [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


ACTION_SPEC = s.record(Action, kind=s.one_of(*ACTION_KINDS), before=PATH_STATE_SPEC)  # journaled (state-files.md)
PLAN_SPEC = s.record(Plan, verb=s.one_of("apply", "rollback"), actions=s.list_of(ACTION_SPEC),
                     encoding=s.one_of("miopen", "cudnn"), recipe=s.optional(s.name("recipe")),
                     commit=s.optional(s.name("commit")), version_before=s.optional(s.name("version")),
                     version_after=s.optional(s.name("version")))


@dataclass(frozen=True)
class LoadedFact:
    """One library the target loads: its real path, the layout around it, inside the prefix?"""

    path: str
    layout: str  # swap.mapping.layout_of (informational: the plan names the layout itself)
    inside: bool


@dataclass(frozen=True)
class TargetFacts:
    """What the plan needs to know about a target (built from a Target by :func:`facts_from`)."""

    prefix: str
    python: str
    loaded: tuple[tuple[str, tuple[LoadedFact, ...]], ...]  # stem -> every loaded copy
    version: str | None  # the decoded runtime version the target reports now
    state_dir: str = ""
    # files the active transactions placed: (path, identity after the swap, sha256); such a file
    # still of that identity is "already applied" without being hashed
    placed: tuple[tuple[str, PathState, str], ...] = ()

    def copies(self, stem: str) -> tuple[LoadedFact, ...]:
        return dict(self.loaded).get(stem, ())


def facts_from(target: "Target", stems: Iterable[str], version: str | None = None,
               placed: tuple[tuple[str, PathState, str], ...] = ()) -> TargetFacts:
    """Target facts from a discovered :class:`rocmbuild.environment.target.Target`."""
    loaded = []
    prefixes = (str(target.prefix), os.path.realpath(target.prefix))
    for stem in stems:
        copies = []
        for lib in target.report.libraries:
            name = Path(lib.path).name
            if (name == stem + ".so" or name.startswith(stem + ".so.")) and not lib.deleted:
                copies.append(LoadedFact(str(lib.path), layout_of(lib.path, prefixes),
                                         bool(target.inside_prefix(Path(lib.path)))))
        loaded.append((stem, tuple(copies)))
    return TargetFacts(str(target.prefix), str(target.python), tuple(loaded), version,
                       str(target.state_dir or ""), placed)


def state_dir_of(facts: TargetFacts, stems: Iterable[str]) -> Path | None:
    """The state dir a plan for these libraries would use (None: no member is loaded)."""
    mapped = [c for s in stems for c in facts.copies(s)]
    if not mapped:
        return None
    outside = any(not c.inside for c in mapped)
    return target_state_dir(Path(facts.prefix), Path(mapped[0].path).parent, outside=outside)


def _file_action(dest: Path, src: Path, entry_size: int, entry_sha: str | None, role: str,
                 obs: Observer, placed: dict[str, tuple[PathState, str]] | None = None) -> Action:
    before = obs.state(dest)
    if before.kind == "other":
        raise TargetError(f"{dest} is a directory (or special file); rocmbuild would replace it with a file",
                          "move it out of the way and run again")
    src_state = obs.state(src)
    if src_state.kind != "file":
        raise InputError(
            f"the artifact is missing a file its manifest lists: {src}",
            "the artifact cache was changed; rebuild it (remove the artifact directory and run "
            "`rocmbuild build` again)",
            details={"missing": str(src)},
        )
    done = False
    if before.kind == "file":
        if (before.dev, before.inode) == (src_state.dev, src_state.inode):
            done = True
        elif placed_unchanged(before, (placed or {}).get(str(dest)), entry_sha):
            done = True
        elif before.size == entry_size and entry_sha and obs.sha256(dest) == entry_sha:
            done = True
    return Action(
        kind="replace_file" if before.kind != "absent" else "add_file",
        path=str(dest), role=role, before=before, source=str(src), size=entry_size, sha256=entry_sha,
        create_dirs=missing_dirs(dest, obs) if before.kind == "absent" else (), done=done,
    )


def _link_action(dest: Path, text: str, role: str, obs: Observer) -> Action:
    before = obs.state(dest)
    if before.kind == "other":
        raise TargetError(f"{dest} is a directory (or special file); rocmbuild would replace it with a link",
                          "move it out of the way and run again")
    return Action(
        kind="replace_link", path=str(dest), role=role, before=before, link=text,
        create_dirs=missing_dirs(dest, obs) if before.kind == "absent" else (),
        done=before.kind == "link" and before.target == text,
    )


def _loaded_copy(name: str, facts: TargetFacts, allow_outside_prefix: bool) -> LoadedFact | None:
    """The one copy of library ``name`` the target loads (None: not loaded); refuses several, or
    one outside the prefix (unless allowed)."""
    copies = facts.copies(name)
    if not copies:
        return None
    if len(copies) > 1:
        raise TargetError(
            f"the target loads {len(copies)} copies of {name}: " + ", ".join(c.path for c in copies),
            "remove the stray copy so exactly one is loaded, then run again",
        )
    loaded = copies[0]
    if not loaded.inside and not allow_outside_prefix:
        raise TargetError(
            f"{name} is loaded from outside the prefix {facts.prefix}: {Path(loaded.path)}",
            "rocmbuild only changes files inside the environment by default; pass "
            "--allow-outside-prefix to change that system library anyway (its lock and backups "
            "then live in rocmbuild's state home, e.g. ~/.local/state/rocmbuild/targets/)",
            details={"library": str(Path(loaded.path)), "prefix": facts.prefix},
        )
    return loaded


def _not_loaded(name: str, facts: TargetFacts) -> TargetError:
    return TargetError(f"the target's torch does not load {name} (python: {facts.python})",
                       "check that this environment's torch is a ROCm build: `rocmbuild status` shows what it loads")


@dataclass
class _Member:
    """One library of the set while it is planned: where its bytes go, and what it maps."""

    lib: "LibraryEntry"
    dest: Path
    why: str
    new: bool = False  # the target has it under no name: placed under the artifact's names


def _locate(lib: "LibraryEntry", loaded: LoadedFact | None, dirs: list[Path], libdir: Path,
            obs: Observer) -> _Member:
    """Where a member's bytes go: the file its loaded copy resolves to; else the file one of its
    names (SONAME first) resolves to beside a mapped member; else (new) the artifact's own name."""
    names, _other = lib_dir_names(lib.file, (*lib.links, *lib.other_links))
    if loaded is not None and strays.therock_package(loaded.path):  # the preload's dir: the package's own file
        return _Member(lib, strays.package_file(loaded.path, lib.soname, obs), "the file of TheRock's libraries "
                       "package (named by its SONAME) that the preload loads: new bytes, same name")
    if loaded is not None:
        return _Member(lib, Path(resolve(loaded.path, obs)),
                       "the file the target loads (its own chain resolves to it): new bytes, same name")
    lookup = tuple(dict.fromkeys([n for n in (lib.soname, *reversed(names)) if n]))
    found_at = find_beside(lookup, dirs, obs)
    if found_at is not None:
        return _Member(lib, found_at, "not mapped by torch yet; found beside the mapped members by its "
                       "file name or SONAME: new bytes, same name")
    return _Member(lib, libdir / names[-1], "new to the target: added under the artifact's names", new=True)


def _member_actions(m: "Manifest", mem: _Member, tree: Path, places: Places,
                    placed: dict[str, tuple[PathState, str]]) -> tuple[list[Action], list[NameMap], tuple[str, ...]]:
    """The actions placing one member, its name map, and the names of its chain (to check)."""
    obs, lib = places.obs, mem.lib
    ldir = mem.dest.parent
    entry = m.file(lib.file)
    size = entry.size if entry else lib.size
    sha = (entry.sha256 if entry else None) or lib.sha256 or None
    src = places.source(tree, lib.file, "library file")
    dest = places.dest(ldir / plain_name(mem.dest.name, "library name"), (ldir,), "library")
    actions = [_file_action(dest, src, size, sha, "library", obs, placed)]
    names, other = lib_dir_names(lib.file, (*lib.links, *lib.other_links))
    nmap = [NameMap(lib.file, str(dest), mem.why)]
    for name in names[:-1]:
        rel = posixpath.join(posixpath.dirname(lib.file), name)
        link = places.dest(ldir / plain_name(name, "library link"), (ldir,), "library link")
        now = obs.state(link)
        if mem.new:
            le = m.file(rel)
            text = places.link_text(link, le.target if le and le.target else names[-1], (ldir,), "library link")
            actions.append(_link_action(link, text, "link", obs))
            nmap.append(NameMap(rel, str(link), f"a link of the new member (-> {text})"))
        elif link == dest:
            nmap.append(NameMap(rel, str(link), "the target's file has this name itself"))
        elif now.kind == "link":
            actions.append(_link_action(link, now.target or "", "link", obs))  # kept: nothing to do
            nmap.append(NameMap(rel, str(link), f"a link of the target's chain (-> {now.target}): kept as it is"))
        else:
            nmap.append(NameMap(rel, None, "the target has no such name: not added (the target's names stay)"))
    nmap += [NameMap(o, None, "not a lib-dir name (a link elsewhere in the install tree): never mapped")
             for o in other]
    return actions, nmap, tuple(n for n in (*names, lib.soname) if n)


def _data_actions(m: "Manifest", libdir: Path, tree: Path, seen: set[str], places: Places,
                  placed: dict[str, tuple[PathState, str]]) -> list[Action]:
    """The actions placing the ``[install] data`` dirs' files and links under ``<libdir>/..``
    (only in the lib dir or ``share``: :class:`~rocmbuild.swap.landing.Places`)."""
    actions = []
    roots = (libdir, libdir.parent / "share")
    for d in m.data:
        d = clean_relative(d, "data path")
        for f in m.files:
            if not (f.path == d or f.path.startswith(d + "/")):
                continue
            dest = places.dest(libdir.parent / clean_relative(f.path, "data file"), roots, f"data file {f.path!r}")
            if str(dest) in seen:
                continue
            seen.add(str(dest))
            if f.type == "link":
                text = places.link_text(dest, f.target or "", roots, "data link")
                actions.append(_link_action(dest, text, "data", places.obs))
            else:
                src = places.source(tree, f.path, "data file")
                actions.append(_file_action(dest, src, f.size, f.sha256, "data", places.obs, placed))
    return actions


def make(artifact: "Artifact", facts: TargetFacts, *, allow_outside_prefix: bool = False,
         expect: str | None = None, observer: Observer | None = None, state_dir: str | None = None,
         move_strays: bool = False) -> Plan:
    """The plan placing ``artifact`` (a set: one plan) into ``facts``' target; strays refused or moved."""
    obs = observer or FsObserver()
    m = artifact.manifest
    tree = Path(artifact.tree)
    if not m.libraries:
        raise InputError(f"artifact {m.key[:16]} declares no library to install",
                         "add [install] libraries to the recipe and rebuild")
    loaded = [_loaded_copy(lib.name, facts, allow_outside_prefix) for lib in m.libraries]
    mapped = [c for c in loaded if c is not None]
    if not mapped:
        raise _not_loaded(m.libraries[0].name, facts)
    outside = any(not c.inside for c in mapped)
    libdir = Path(mapped[0].path).parent
    dirs = list(dict.fromkeys(Path(c.path).parent for c in mapped))
    if state_dir is None:
        state_dir = str(target_state_dir(Path(facts.prefix), libdir, outside=outside))
    places = Places(facts.prefix, state_dir, allow_outside_prefix, obs)
    placed = {p: (st, sha) for p, st, sha in facts.placed}
    actions: list[Action] = []
    names: list[NameMap] = []
    chains = []
    members = [_locate(lib, c, dirs, libdir, obs) for lib, c in zip(m.libraries, loaded, strict=True)]
    for mem in members:
        acts, nmap, chain = _member_actions(m, mem, tree, places, placed)
        actions += acts
        names += nmap
        chains.append((Path(acts[0].path), chain))
    dest = Path(actions[0].path)
    moves, stray_notes = _strays(members, dest, places, move_strays)  # refused here unless moved
    links, gone = {a.path: a.link or "" for a in actions if a.kind == "replace_link"}, [a.path for a in moves]
    check_chains(chains, After(obs, [a.path for a in actions if a.role == "library"], links, gone))
    layout = layout_of(dest, (facts.prefix, resolve(facts.prefix, obs)))
    notes = soname_notes(members, After(obs, [str(c[0]) for c in chains], links, gone)) + stray_notes
    actions = moves + actions + _data_actions(m, libdir, tree, {a.path for a in actions}, places, placed)
    actions += stale_actions(m, libdir, str(libdir.parent) if outside else facts.prefix, {a.path for a in actions}, obs,
                             allow_outside_prefix)
    first = mapped[0] if loaded[0] is None else loaded[0]
    return Plan(
        verb="apply", prefix=facts.prefix, python=facts.python, libdir=str(libdir), layout=layout,
        outside=outside, state_dir=state_dir, actions=tuple(actions), library=str(dest),
        library_before=str(first.path), version_before=facts.version,
        version_after=expect if expect is not None else m.expect_version, encoding=m.encoding,
        library_name=m.libraries[0].name, recipe=m.recipe, commit=m.commit, artifact=m.key,
        artifact_path=str(artifact.path), notes=tuple(notes), names=tuple(names),
    )


def _strays(members: list[_Member], dest: Path, places: Places, move: bool) -> tuple[list[Action], list[str]]:
    """Strays (:mod:`rocmbuild.swap.strays`): refused in a TheRock lib dir; ``move``: removed, backed up."""
    found = tuple(s for mem in members for s in strays.find(mem.dest.parent, mem.lib.name, mem.dest, places.obs))
    preload = strays.therock_package(dest) is not None
    strays.check(found, dest, preload, move)  # a TheRock dir's strays unless moved; what cannot be moved
    moves = [Action("remove", str(places.dest(Path(s.path), (Path(s.path).parent,), "stray")), "stray",
                    places.obs.state(Path(s.path))) for s in found if move]
    return moves, strays.notes(found, preload, move)
