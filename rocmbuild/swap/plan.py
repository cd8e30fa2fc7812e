"""The plan: which path becomes what. Artifact + target facts -> :class:`Plan`; changes nothing.

Decisions (the mapping rules in full: docs/transactions.md, "Planning"):
* the target's layout wins, never the artifact's: conda-style the artifact's real file and its
  SONAME links go into the lib dir the target loads from (a real file of another name is left in
  place, noted); wheel-style the one loaded file receives the new bytes under its own name;
* ``[install] data`` dirs land at ``<libdir>/../<data path>``; missing parents are recorded so a
  revert removes them again; a library loaded from outside the prefix is refused unless asked;
* every destination is checked by :class:`~rocmbuild.swap.paths.Places` (only the lib dir and its
  ``../share``, never the state dir, never through a symlink out of the prefix) before any action;
* "already there" is decided by identity, hashing only a same-size regular file;
* everything is observed through an :class:`~rocmbuild.swap.observe.Observer`: pure, testable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from rocmbuild.errors import InputError, TargetError
from rocmbuild.home import target_state_dir
from rocmbuild.swap.observe import FsObserver, Observer, PathState, found, unchanged
from rocmbuild.swap.paths import Places, clean_relative, missing_dirs, plain_name
from rocmbuild.swap.records import Drift

if TYPE_CHECKING:
    from rocmbuild.build.artifact import Artifact, LibraryEntry, Manifest
    from rocmbuild.target.target import Target

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
    def from_json(cls, d: dict[str, Any]) -> "Action":
        d = dict(d)
        d["before"] = PathState.from_json(d["before"])
        d["create_dirs"] = tuple(d.get("create_dirs", ()))
        return cls(**d)

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
    layout: str  # conda | wheel
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
    undoes: tuple[str, ...] = ()  # rollback: the transactions this plan undoes
    remove_dirs: tuple[str, ...] = ()  # rollback: dirs created by undone transactions (removed if empty)

    @property
    def pending(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if not a.done)

    @property
    def already_applied(self) -> bool:
        return not self.pending

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["actions"] = [a.to_json() for a in self.actions]
        for k in ("notes", "undoes", "remove_dirs"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Plan":
        d = dict(d)
        d["actions"] = tuple(Action.from_json(a) for a in d["actions"])
        for k in ("notes", "undoes", "remove_dirs"):
            d[k] = tuple(d.get(k, ()))
        return cls(**d)

    def render(self) -> str:
        lines = [f"{self.verb} on {self.prefix} ({self.layout} layout, lib dir {self.libdir})"]
        lines += [f"  {a.describe()}" for a in self.actions]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class LoadedFact:
    """One library the target loads: its real path, the layout around it, inside the prefix?"""

    path: str
    layout: str  # conda | wheel | outside | none (Target.layout)
    inside: bool


@dataclass(frozen=True)
class TargetFacts:
    """What the plan needs to know about a target (built from a Target by :func:`facts_from`)."""

    prefix: str
    python: str
    loaded: tuple[tuple[str, tuple[LoadedFact, ...]], ...]  # stem -> every loaded copy
    version: str | None  # the decoded runtime version the target reports now
    state_dir: str = ""

    def copies(self, stem: str) -> tuple[LoadedFact, ...]:
        return dict(self.loaded).get(stem, ())


def facts_from(target: "Target", stems: Iterable[str], version: str | None = None) -> TargetFacts:
    """Target facts from a discovered :class:`rocmbuild.target.target.Target`."""
    loaded = []
    for stem in stems:
        copies = []
        for lib in target.report.libraries:
            if Path(lib.path).name.startswith(stem + ".so") and not lib.deleted:
                try:
                    layout = target.layout(lib.kind)
                except Exception:  # noqa: BLE001 - a layout we cannot name: treat as a chain
                    layout = "conda"
                copies.append(LoadedFact(str(lib.path), layout, bool(target.inside_prefix(Path(lib.path)))))
        loaded.append((stem, tuple(copies)))
    return TargetFacts(str(target.prefix), str(target.python), tuple(loaded), version,
                       str(target.state_dir or ""))


def _file_action(dest: Path, src: Path, entry_size: int, entry_sha: str | None, role: str,
                 obs: Observer) -> Action:
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


def _loaded_copy(name: str, facts: TargetFacts, allow_outside_prefix: bool) -> LoadedFact:
    """The one copy of library ``name`` the target loads; refuses none, several, or one outside
    the prefix (unless allowed)."""
    copies = facts.copies(name)
    if not copies:
        raise TargetError(
            f"the target's torch does not load {name} (python: {facts.python})",
            "check that this environment's torch is a ROCm build: `rocmbuild status` shows what it loads",
        )
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
            "then live in $ROCMBUILD_HOME/targets/)",
            details={"library": str(Path(loaded.path)), "prefix": facts.prefix},
        )
    return loaded


def _library_actions(m: "Manifest", lib: "LibraryEntry", loaded: LoadedFact, tree: Path,
                     places: Places) -> tuple[list[Action], list[str], Path, str]:
    """The actions placing one library (wheel: its bytes under the loaded name; conda: the real
    file under the artifact's name plus its SONAME links), notes, the destination, the layout."""
    obs = places.obs
    lpath = Path(loaded.path)
    ldir = lpath.parent
    entry = m.file(lib.file)
    size = entry.size if entry else lib.size
    sha = (entry.sha256 if entry else None) or lib.sha256 or None
    src = places.source(tree, lib.file, "library file")
    if loaded.layout == "wheel":
        return [_file_action(lpath, src, size, sha, "library", obs)], [], lpath, "wheel"
    dest = places.dest(ldir / plain_name(Path(lib.file).name, "library name"), (ldir,), "library")
    actions = [_file_action(dest, src, size, sha, "library", obs)]
    for link_rel in lib.links:
        le = m.file(link_rel)
        text = le.target if le and le.target else Path(lib.file).name
        link = places.dest(ldir / plain_name(Path(link_rel).name, "library link"), (ldir,), "library link")
        actions.append(_link_action(link, places.link_text(link, text, (ldir,), "library link"), "link", obs))
    notes = []
    if lpath.name != dest.name and lpath.name not in {Path(p).name for p in lib.links}:
        notes.append(f"{lpath} (the file loaded until now) is kept as it is; the links now point "
                     f"to {dest.name}, and rollback restores them")
    return actions, notes, dest, "conda"


def _data_actions(m: "Manifest", libdir: Path, tree: Path, seen: set[str], places: Places) -> list[Action]:
    """The actions placing the ``[install] data`` dirs' files and links under ``<libdir>/..``
    (only in the lib dir or ``share``: :class:`~rocmbuild.swap.paths.Places`)."""
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
                actions.append(_file_action(dest, src, f.size, f.sha256, "data", places.obs))
    return actions


def make(artifact: "Artifact", facts: TargetFacts, *, allow_outside_prefix: bool = False,
         expect: str | None = None, observer: Observer | None = None, state_dir: str | None = None) -> Plan:
    """The plan to place ``artifact`` into the target described by ``facts``."""
    obs = observer or FsObserver()
    m = artifact.manifest
    tree = Path(artifact.tree)
    if not m.libraries:
        raise InputError(f"artifact {m.key[:16]} declares no library to install",
                         "add [install] libraries to the recipe and rebuild")
    actions: list[Action] = []
    notes: list[str] = []
    loaded_all = [_loaded_copy(lib.name, facts, allow_outside_prefix) for lib in m.libraries]
    outside = any(not c.inside for c in loaded_all)
    libdir = Path(loaded_all[0].path).parent
    if state_dir is None:
        state_dir = str(target_state_dir(Path(facts.prefix), libdir, outside=outside))
    places = Places(facts.prefix, state_dir, allow_outside_prefix, obs)
    primary: tuple[Path, Path, str] | None = None  # (destination, loaded until now, layout)
    for lib, loaded in zip(m.libraries, loaded_all):
        acts, more, dest, lay = _library_actions(m, lib, loaded, tree, places)
        actions += acts
        notes += more
        primary = primary or (dest, Path(loaded.path), lay)
    assert primary is not None
    dest, before, layout = primary
    actions += _data_actions(m, libdir, tree, {a.path for a in actions}, places)
    return Plan(
        verb="apply", prefix=facts.prefix, python=facts.python, libdir=str(libdir), layout=layout,
        outside=outside, state_dir=state_dir, actions=tuple(actions), library=str(dest),
        library_before=str(before), version_before=facts.version,
        version_after=expect if expect is not None else m.expect_version, encoding=m.encoding,
        library_name=m.libraries[0].name, recipe=m.recipe, commit=m.commit, artifact=m.key,
        artifact_path=str(artifact.path), notes=tuple(notes),
    )


@dataclass(frozen=True)
class Undo:
    """One path of a rollback: what it should be now, and what it must become."""

    path: str
    expected: PathState  # what the latest transaction left there
    desired: PathState  # what it was before the earliest undone transaction
    backup: str | None  # the file holding ``desired`` content (a hardlink in backups/<txn>/)
    txn: str  # the transaction whose "before" is restored
    copied: bool = False  # the backup is a copy (another filesystem): a restore makes a new inode
    expected_source: str | None = None  # the file whose bytes ``expected`` holds (artifact or backup)
    expected_digest: str | None = None  # their sha256 as journaled (the manifest's; None: never hashed)


def _restore_action(u: Undo, now: PathState, obs: Observer) -> Action:
    """The action that brings ``u.desired`` back at ``u.path`` (which is ``now``)."""
    create = missing_dirs(Path(u.path), obs) if now.kind == "absent" else ()
    if u.desired.kind == "file":
        if not u.backup or obs.state(Path(u.backup)).kind != "file":
            raise TargetError(
                f"cannot restore {u.path}: the backup of transaction {u.txn} is gone ({u.backup})",
                "its backups were pruned (--keep); pick a later transaction with --to",
            )
        done = now.kind == "file" and (now.dev, now.inode) == (u.desired.dev, u.desired.inode)
        if not done and u.copied and now.kind == "file" and (now.size, now.mode) == (
                u.desired.size, u.desired.mode):
            # restored from a copied backup: a new inode; the same bytes as the backup (hashed
            # only here: a copied path whose size and mode already match)
            done = obs.sha256(Path(u.path)) == obs.sha256(Path(u.backup))
        return Action("replace_file" if now.kind != "absent" else "add_file", u.path, "restore", now,
                      source=u.backup, size=u.desired.size, done=done, create_dirs=create)
    if u.desired.kind == "link":
        return Action("replace_link", u.path, "restore", now, link=u.desired.target,
                      done=now.kind == "link" and now.target == u.desired.target, create_dirs=create)
    return Action("remove", u.path, "restore", now, done=now.kind == "absent")


def make_rollback(undos: Iterable[Undo], *, prefix: str, python: str, libdir: str, layout: str,
                  outside: bool, state_dir: str, library: str, library_before: str,
                  version_before: str | None, version_after: str | None, encoding: str,
                  library_name: str, recipe: str | None, commit: str | None, undoes: tuple[str, ...],
                  remove_dirs: tuple[str, ...] = (), force: bool = False,
                  observer: Observer | None = None) -> tuple[Plan, list[Drift]]:
    """The plan that restores every ``Undo.desired`` state, and the drift found on the way
    (paths whose current state is not what rocmbuild left there). Drift refuses (TargetError)
    unless ``force``; with force the drifted file is backed up by the rollback like any other."""
    obs = observer or FsObserver()
    actions = []
    drift = []
    for u in undos:
        now = obs.state(Path(u.path))
        if not unchanged(now, u.expected, u.path, digest=u.expected_digest, source=u.expected_source, obs=obs):
            drift.append(Drift(u.path, u.txn, u.expected.describe(), found(now, u.expected)))
        actions.append(_restore_action(u, now, obs))
    if drift and not force:
        lines = "\n".join(f"  {d.path}: rocmbuild left {d.expected}, found {d.found}" for d in drift)
        raise TargetError(
            f"files rocmbuild installed were changed since (drift):\n{lines}",
            "something else (e.g. a conda or pip update) replaced them; rolling back would overwrite "
            "that change. Pass --force to roll back anyway (the current files are backed up first)",
            details={"drift": [d.to_json() for d in drift]},
        )
    plan = Plan(
        verb="rollback", prefix=prefix, python=python, libdir=libdir, layout=layout, outside=outside,
        state_dir=state_dir, actions=tuple(actions), library=library, library_before=library_before,
        version_before=version_before, version_after=version_after, encoding=encoding,
        library_name=library_name, recipe=recipe,
        commit=commit, undoes=undoes, remove_dirs=remove_dirs,
        notes=tuple(f"drift at {d.path} (forced)" for d in drift),
    )
    return plan, drift
