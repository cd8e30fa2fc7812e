"""The targets rocmbuild has changed, and which artifacts each still uses: what ``cache list``
shows and what ``cache gc`` never removes. The functions take the *state* home
(``home.state_home()``), where these records live since they left the cache home.

Decisions:
* A target's state lives with it (``<prefix>/.rocmbuild``), where the home cannot see it, so every
  apply registers its state dir in ``<state>/known-targets/<sha256(state_dir)[:16]>.json``
  (``{"state_dir", "prefix", "registered"}``): one small file per target, written atomically, no
  shared file to race on. Outside-prefix state dirs (``<state>/targets/<hash>/``) are known by being
  there. A target applied by an older rocmbuild is known from its next apply on.
* A record is read by one schema (:data:`RECORD_SPEC`); one that cannot be read hides a target:
  ``cache gc`` then removes no artifact (:func:`unreadable_records`), like for a bad journal.
* A registered state dir that no longer exists (the env was deleted) is *gone*: it uses nothing.
* What a target uses, from its journals (:func:`uses`), each with the transaction and a role:
  ``in-effect`` (the latest apply in effect: what it loads now), ``rollback`` (an earlier apply
  in effect: a plain ``rollback`` brings its state back), ``redo`` (an apply that a rollback
  undid and ``rocmbuild redo`` can re-apply: swap/ineffect.py's redo stack, until the next apply)
  and ``recovery`` (an unfinished transaction: recovery finishes or reverts it).
* A journal that cannot be read hides what it used: it is reported, and ``cache gc`` then
  removes no artifact at all (it cannot know which one that journal needs).
"""

from __future__ import annotations

import json

import datetime as _dt
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmbuild import schema as s
from rocmbuild.fs.disk import read_json
from rocmbuild.errors import StateError
from rocmbuild.fs.root import Root
from rocmbuild.home import STATE_DIRNAME, known_targets_dir, targets_dir
from rocmbuild.swap.ineffect import replay
from rocmbuild.swap.journal import FINISHED, Journal, journals, unreadable
from rocmbuild.swap.statedir import read_target_record

ROLES = ("in-effect", "rollback", "redo", "recovery")


@dataclass(frozen=True)
class KnownTarget:
    state_dir: str
    prefix: str | None
    exists: bool


@dataclass(frozen=True)
class Use:
    """An artifact (its key) that a target's transaction ``txn`` needs, and why (``role``)."""

    key: str
    role: str
    txn: str
    state_dir: str
    prefix: str | None

    def to_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "state_dir": self.state_dir, "txn": self.txn, "role": self.role}


def _record(home: Path, state_dir: Path) -> Path:
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]
    return known_targets_dir(home) / f"{digest}.json"


@dataclass(frozen=True)
class KnownRecord:
    """A known-targets record: the state dir, its prefix and when it was registered."""

    state_dir: str
    prefix: str | None = None
    registered: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"state_dir": self.state_dir, "prefix": self.prefix, "registered": self.registered}


RECORD_SPEC = s.record(KnownRecord, state_dir=s.check(s.string, lambda v: v.startswith("/"), "an absolute path"))


def read_record(path: Path) -> KnownRecord:
    """A known-targets record; OSError when it cannot be opened, SchemaError (a ValueError)
    naming the file, the field and what was expected when it is not one."""
    try:
        data = read_json(path)
    except RecursionError:
        raise s.SchemaError("", "a known-target record", "JSON nested too deeply", str(path)) from None
    record: KnownRecord = s.load(RECORD_SPEC, data, path)
    return record


def record_json(state_dir: Path, prefix: str | None, registered: str | None = None) -> bytes:
    """A known-targets record's bytes."""
    rec = KnownRecord(str(state_dir), prefix,
                      registered or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    return (json.dumps(rec.to_json(), indent=2, sort_keys=True) + "\n").encode()


def record_name(state_dir: Path) -> str:
    """The file name of ``state_dir``'s record in ``known-targets/``."""
    return _record(Path("/"), Path(state_dir)).name


def register(home: Path, state_dir: Path, prefix: Path) -> None:
    """Remember that ``state_dir`` (of ``prefix``) holds transactions made with this home (a
    record that cannot be read is written anew)."""
    path = _record(home, Path(state_dir))
    try:
        if Path(read_record(path).state_dir) == Path(state_dir):
            return
    except (OSError, ValueError):
        pass
    with Root.open(home, "rocmbuild's state home", create=True) as root:  # never through a symlinked known-targets/
        root.makedirs(path.parent.name)
        root.write_atomic(f"{path.parent.name}/{path.name}", record_json(Path(state_dir), str(prefix)))


def unreadable_records(home: Path) -> list[str]:
    """The known-targets records that cannot be read ("path: why"): the target each names is
    unknown, so ``cache gc`` removes no artifact while there is one."""
    reg = known_targets_dir(home)
    out = []
    for p in sorted(reg.glob("*.json")) if reg.is_dir() else ():
        try:
            read_record(p)
        except (OSError, ValueError) as exc:
            out.append(str(exc) if isinstance(exc, s.SchemaError) else f"{p}: {type(exc).__name__}: {exc}")
    return out


def known(home: Path) -> list[KnownTarget]:
    """Every target this home knows: the registered ones (:func:`unreadable_records` lists those
    that cannot be read), then the outside-prefix state dirs."""
    found: dict[str, KnownTarget] = {}
    reg = known_targets_dir(home)
    for p in sorted(reg.glob("*.json")) if reg.is_dir() else ():
        try:
            data = read_record(p)
        except (OSError, ValueError):
            continue
        sdir = Path(data.state_dir)
        found[str(sdir)] = KnownTarget(str(sdir), data.prefix, sdir.is_dir())
    outside = targets_dir(home)
    for d in sorted(outside.iterdir()) if outside.is_dir() else ():
        if d.is_dir() and not d.is_symlink() and str(d) not in found:
            try:
                rec = read_target_record(d)
            except StateError:
                rec = None
            found[str(d)] = KnownTarget(str(d), rec.prefix if rec else None, True)
    return list(found.values())


def _prefix(state_dir: Path, fallback: str | None) -> str | None:
    return str(state_dir.parent) if state_dir.name == STATE_DIRNAME else fallback


def uses(target: KnownTarget) -> tuple[list[Use], list[str]]:
    """The artifacts ``target``'s transactions need (see the module notes), and the paths of its
    journals that cannot be read."""
    sdir = Path(target.state_dir)
    if not target.exists:
        return [], []
    prefix = _prefix(sdir, target.prefix)
    bad = [u.path for u in unreadable(sdir) if u.kind == "journal"]
    out: list[Use] = []

    def use(j: Journal, role: str) -> None:
        if j.plan.artifact:
            out.append(Use(j.plan.artifact, role, j.id, str(sdir), prefix))

    everything = journals(sdir)
    for j in everything:
        if j.state not in FINISHED:
            use(j, "recovery")
    m = replay(everything)
    applies = list(m.in_effect)
    for j in applies:
        use(j, "in-effect" if j is applies[-1] else "rollback")
    by_id = {j.id: j for j in m.committed}
    for r in m.redos:
        for u in r.reapplies:
            use(by_id[u], "redo")
    return out, bad
