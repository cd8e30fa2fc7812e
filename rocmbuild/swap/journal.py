"""The journals of a target: ``journal/<txn>.json`` in its state dir, ids, failpoints, and the
replay that says which committed transactions are in effect (:func:`active`).

Decisions:
* an id is ``NNNN-YYYYmmddTHHMMSSZ``: a sequence number (ordered, short to type for ``--to``;
  the caller holds the lock, so it is unique) and the UTC time;
* a journal is a frozen value (:class:`Journal`, its steps :class:`Step`, its plan a
  :class:`~rocmbuild.swap.plan.Plan`) parsed once by one schema (:data:`JOURNAL_SPEC`, the plan by
  :data:`~rocmbuild.swap.plan.PLAN_SPEC`: docs/state-files.md), changed by ``replace`` and written
  whole by :meth:`Journal.save`, the one place a journal is written: atomic (temp, fsync, rename,
  fsync dir); the transaction that changes it as it runs is swap/transaction.py;
  one it refuses (not JSON, not an object, a field missing or of another type, an id other than
  its file name's) is left out of :func:`journals`, never guessed at, and listed by :func:`unreadable` with what it still tells (the id from its name,
  a verb, state and paths found in its text, where its backups are) for every verb to report;
* on disk (schema 2) every path inside the prefix is relative to it and the journal records the
  prefix's identity (:meth:`~rocmbuild.swap.landing.PrefixIdentity.of`); loading makes them absolute
  under the prefix the state dir is in *now* (``<prefix>/.rocmbuild``), so a copied or moved env
  acts on itself only. A schema-1 journal (absolute paths) is rebased the same way from the prefix
  it names. A loaded journal of an own state dir whose file paths leave that prefix is unreadable;
* a failpoint (``ROCMBUILD_FAILPOINTS=name[,name]``) ends the process with ``os._exit(137)``, the
  way a SIGKILL would: no cleanup, no ``finally`` (the names: docs/testing.md); a pausepoint
  (``ROCMBUILD_PAUSEPOINTS``, the same names) says so on stderr and sleeps there, for a test to
  send a signal mid-step.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from rocmbuild.fs import disk
from rocmbuild import schema as s
from rocmbuild.home import STATE_DIRNAME
from rocmbuild.swap.landing import PrefixIdentity, origin, rebased, relative_to, under
from rocmbuild.swap.pathstate import PATH_STATE_SPEC, PathState
from rocmbuild.swap.plan import PLAN_SPEC, Action, Plan
from rocmbuild.results.swaprecords import Unreadable
from rocmbuild.swap.roots import Roots, write_state_file

FAILPOINTS = ("after-journal", "after-stage", "after-backup", "mid-swap", "after-swap", "after-verify",
              "mid-rollback", "after-commit")
FINISHED = ("committed", "rolled_back")
JOURNAL_SCHEMA = 2  # 2: paths relative to the prefix + its identity; 1 (absolute paths) is still read
PLAN_PATHS = ("prefix", "python", "libdir", "state_dir", "library", "library_before", "artifact_path")


def failpoint(name: str) -> None:
    """Exit abruptly (status 137, like SIGKILL) when ``name`` is in ``$ROCMBUILD_FAILPOINTS``; first
    sleep ``$ROCMBUILD_PAUSE_SECONDS`` (60) when it is in ``$ROCMBUILD_PAUSEPOINTS``."""
    assert name in FAILPOINTS, name
    if name in [n.strip() for n in os.environ.get("ROCMBUILD_PAUSEPOINTS", "").split(",")]:
        sys.stderr.write(f"rocmbuild: pausepoint {name}\n")  # a test signals us here
        sys.stderr.flush()
        time.sleep(float(os.environ.get("ROCMBUILD_PAUSE_SECONDS", "60")))
    wanted = [n.strip() for n in os.environ.get("ROCMBUILD_FAILPOINTS", "").split(",")]
    if name in wanted:
        try:
            sys.stderr.write(f"rocmbuild: failpoint {name}: exiting with 137\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        os._exit(137)


def seq(txn_id: str) -> int:
    """The sequence number of a transaction id (0 for an id without one)."""
    head = txn_id.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def journal_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "journal"


def backup_dir(state_dir: Path, txn: str) -> Path:
    return Path(state_dir) / "backups" / txn


def new_id(state_dir: Path) -> str:
    """The next transaction id in ``state_dir`` (the caller holds the lock)."""
    d = journal_dir(state_dir)
    last = max((seq(p.stem) for p in d.glob("*.json")), default=0) if d.is_dir() else 0
    return f"{last + 1:04d}-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


@dataclass(frozen=True)
class Step:
    """One plan action a transaction changes (``index`` into the plan's actions) and how far it
    got: the identity of what it placed (``after``), whether it is swapped in, whether its backup
    is a copy (a restore from a copy is a new inode: see FileAction.is_before; None: not recorded)."""

    index: int
    after: PathState | None = None
    swapped: bool = False
    backup_copied: bool | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "after": self.after.to_json() if self.after else None,
                             "swapped": self.swapped}
        if self.backup_copied is not None:
            d["backup_copied"] = self.backup_copied
        return d


@dataclass(frozen=True)
class Journal:
    """One transaction's journal as a value: where it lives, its plan and steps, and what the
    protocol recorded of its run (None: not recorded). Fields this version does not name are kept
    in ``extra`` and written back (docs/state-files.md)."""

    path: Path
    id: str
    verb: str
    state: str
    plan: Plan
    steps: tuple[Step, ...]
    meta: Mapping[str, str | None] = field(default_factory=dict)
    prefix_identity: PrefixIdentity | None = None
    pid: int | None = None
    created: str | None = None
    updated: str | None = None
    committed: str | None = None
    rolled_back: str | None = None
    backups_pruned: str | None = None  # when ``--keep`` removed its backups (None: they are there)
    history_outcome: str | None = None
    history_written: bool | None = None
    state_before_rollback: str | None = None
    reason: str | None = None
    backup_copies: int | None = None
    revert_messages: tuple[str, ...] | None = None
    verdict: Any = None
    restored: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> "Journal":
        """Read and check a journal: SchemaError (a ValueError) naming the file, the field and what
        was expected when it cannot be used; OSError or ValueError when it cannot be read."""
        path = Path(path)
        try:
            data = disk.read_json(path)
        except RecursionError:
            raise s.SchemaError("", "a journal", "JSON nested too deeply", str(path)) from None
        parse(data, path)  # the on-disk form, before its paths are read
        j = cls.from_json(path, _from_disk(data, path.parent.parent))
        j.check()
        return j

    @classmethod
    def from_json(cls, path: Path, data: Any) -> "Journal":
        """The journal of ``data`` (its in-memory form: absolute paths), by :data:`JOURNAL_SPEC`."""
        typed: dict[str, Any] = s.load(JOURNAL_SPEC, data, path)
        known = {f.name for f in fields(cls)} - {"path", "extra"}
        return cls(path=Path(path), **{k: v for k, v in typed.items() if k in known},
                   extra={k: v for k, v in typed.items() if k not in known and k != "schema"})

    def to_json(self) -> dict[str, Any]:
        """The journal as JSON, its paths absolute (:meth:`save` writes them relative)."""
        d: dict[str, Any] = dict(self.extra)
        d.update({"schema": JOURNAL_SCHEMA, "id": self.id, "verb": self.verb, "state": self.state,
                  "plan": self.plan.to_json(), "steps": [st.to_json() for st in self.steps], "meta": dict(self.meta)})
        if self.prefix_identity is not None:
            d["prefix_identity"] = self.prefix_identity.to_json()
        if self.revert_messages is not None:
            d["revert_messages"] = list(self.revert_messages)
        for k in _OPTIONAL:
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d

    def check(self) -> None:
        """Every step indexes an action; every path it names is one a plan may change
        (:func:`check_places`; SchemaError or ValueError naming it)."""
        for i, step in enumerate(self.steps):
            if not 0 <= step.index < len(self.plan.actions):
                raise s.SchemaError(f"steps[{i}].index", f"the index of one of the plan's {len(self.plan.actions)} actions",
                                    s.describe(step.index), str(self.path))
        check_places(self.plan, self.path.parent.parent, self.path)

    @property
    def changes(self) -> list[tuple[Action, Step]]:
        """Each step with the plan action it changes, in plan order."""
        return [(self.plan.actions[st.index], st) for st in self.steps]

    @property
    def files(self) -> list[str]:
        return [a.path for a, _ in self.changes]  # the paths it changes (its steps), in plan order

    def save(self) -> "Journal":
        """Write the journal whole and atomically through its state dir's root (never through a
        symlink): the one write of a journal. Returns the value written (``updated`` now; the
        prefix's identity recorded the first time)."""
        j = replace(self, updated=now(),
                    prefix_identity=self.prefix_identity or PrefixIdentity.of(self.plan.prefix))
        text = json.dumps(_to_disk(j.to_json()), indent=2, sort_keys=True, default=str) + "\n"
        write_state_file(j.path.parent.parent, f"journal/{j.path.name}", text.encode())
        return j

    def saved(self, **changes: Any) -> "Journal":
        return replace(self, **changes).save()  # this journal with ``changes``, saved

    def roots(self) -> Roots:
        """The roots this transaction acts through (the caller closes them)."""
        plan = self.plan
        return Roots.of(plan.prefix, plan.libdir, plan.outside, plan.state_dir)


_OPTIONAL = ("pid", "created", "updated", "committed", "rolled_back", "backups_pruned", "history_outcome",
             "history_written", "state_before_rollback", "reason", "backup_copies", "verdict", "restored")


def check_places(plan: Plan, sdir: Path, file: object = None) -> None:
    """The replay rules: every path a journal names is one a plan may change -- strictly under the
    library's lib dir or the ``share`` dir beside it, no ``..``, never rocmbuild's state -- and
    its lib dir belongs to this state dir (inside its prefix; or, for an outside-prefix target,
    the lib dir whose hash names the state dir). SchemaError (a ValueError): the journal is
    refused as unreadable."""
    libdir = os.path.normpath(plan.libdir)
    if sdir.name == STATE_DIRNAME:
        if not under(libdir, os.path.normpath(str(sdir.parent)), strictly=True) and not under(
                libdir, os.path.realpath(sdir.parent), strictly=True):
            raise s.SchemaError("plan.libdir", f"a lib dir inside the prefix {sdir.parent} it lives in", s.describe(libdir), str(file))
    elif hashlib.sha256(str(Path(plan.libdir)).encode()).hexdigest()[:16] != sdir.name:
        raise s.SchemaError("plan.libdir", f"the lib dir this state dir ({sdir.name}) belongs to", s.describe(libdir), str(file))
    share = os.path.join(os.path.dirname(libdir), "share")

    def allowed(p: str, is_dir: bool) -> bool:
        return (os.path.normpath(p) == p and STATE_DIRNAME not in p.split("/")
                and (under(p, libdir, strictly=True) or under(p, share, strictly=not is_dir)))

    where = f"a path under the lib dir {libdir} or {share}"
    for i, a in enumerate(plan.actions):
        for p, is_dir in ((a.path, False), *((d, True) for d in a.create_dirs)):
            if not allowed(p, is_dir):
                raise s.SchemaError(f"plan.actions[{i}].path", where, s.describe(p), str(file))
    for d in plan.remove_dirs:
        if not allowed(d, True):
            raise s.SchemaError("plan.remove_dirs", where, s.describe(d), str(file))


def _map_plan(plan: dict[str, Any], f: Callable[[str], str | None]) -> dict[str, Any]:
    out = dict(plan)
    for k in PLAN_PATHS:
        if isinstance(out.get(k), str):
            out[k] = f(out[k])
    out["remove_dirs"] = [f(x) for x in out.get("remove_dirs") or ()]
    acts = []
    for a in out.get("actions") or ():
        a = dict(a)
        for k in ("path", "source"):
            if isinstance(a.get(k), str):
                a[k] = f(a[k])
        a["create_dirs"] = [f(x) for x in a.get("create_dirs") or ()]
        acts.append(a)
    out["actions"] = acts
    return out


def _to_disk(data: dict[str, Any]) -> dict[str, Any]:
    """The journal as written: paths relative to the prefix, plus the prefix's identity."""
    prefix = data["plan"]["prefix"]
    return {**data, "schema": JOURNAL_SCHEMA, "plan": _map_plan(data["plan"], lambda p: relative_to(p, prefix))}


def _from_disk(data: dict[str, Any], state_dir: Path) -> dict[str, Any]:
    """The journal in memory (its schema checked): absolute paths under the prefix this state dir
    belongs to now."""
    plan = data["plan"]
    if data.get("schema", 1) == 1:  # absolute: make them relative
        old = plan["prefix"]
        plan = _map_plan(plan, lambda p: relative_to(p, old))
        data = {**data, "prefix_identity": data.get("prefix_identity") or {"path": old}}
    recorded = (data.get("prefix_identity") or {}).get("path")
    base = state_dir.parent if state_dir.name == STATE_DIRNAME else Path(recorded or plan.get("prefix") or "/")
    plan = _map_plan(plan, lambda p: rebased(p, base))
    if state_dir.name != STATE_DIRNAME:  # an outside-prefix state dir is where it is read from (moved
        plan["state_dir"] = str(state_dir)  # out of the cache home by swap/migrate.py, say), not where it was
    return {**data, "plan": plan}


# --------------------------------------------------------------------------------------------
# the schema of a journal (docs/state-files.md): every field checked and made its value (the plan
# by its own schema, each step a Step); the fields it does not name are kept as they are

TXN_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,99}$")
_OPT = s.OMIT
_STR, _INT, _BOOL = s.optional(s.string), s.optional(s.integer), s.optional(s.boolean)
_META = s.obj({"recipe": (s.optional(s.name("recipe")), _OPT), "commit": (s.optional(s.name("commit")), _OPT),
               "version": (s.optional(s.name("version")), _OPT)})


def META_SPEC(v: Any, field: str) -> dict[str, Any]:
    """What the caller recorded (``python``, ``artifact_path``): strings or null, spread into the
    history line, so a recipe, commit or version among them has its grammar too."""
    meta: dict[str, Any] = _META(s.dict_of(_STR)(v, field), field)
    return meta


_STEP = s.record(Step, after=s.optional(PATH_STATE_SPEC))
JOURNAL_SPEC = s.obj({
    "schema": (s.check(s.integer, lambda v: v in (1, JOURNAL_SCHEMA), f"1 or {JOURNAL_SCHEMA}"), _OPT),
    "id": (s.check(s.string, lambda v: bool(TXN_RE.match(v)) and ".." not in v, "a transaction id"), s.REQUIRED),
    "verb": (s.one_of("apply", "rollback"), s.REQUIRED), "state": (s.string, s.REQUIRED),
    "plan": (PLAN_SPEC, s.REQUIRED), "steps": (s.list_of(_STEP), s.REQUIRED),
    "meta": (META_SPEC, {}), "prefix_identity": (s.optional(s.record(PrefixIdentity)), _OPT), "pid": (_INT, _OPT),
    **{k: (_STR, _OPT) for k in ("created", "updated", "committed", "rolled_back", "backups_pruned", "history_outcome",
                                 "state_before_rollback", "reason")},
    "history_written": (_BOOL, _OPT), "backup_copies": (_INT, _OPT),
    "revert_messages": (s.list_of(s.string), _OPT), "verdict": (s.json_value, _OPT),
    "restored": (s.json_value, _OPT),
})


def parse(data: Any, path: Path) -> dict[str, Any]:
    """A journal as read from ``path`` (on-disk form), checked by :data:`JOURNAL_SPEC`; its id must
    be the one its file name says (an id names the backups dir: it never leaves ``backups/``)."""
    out: dict[str, Any] = s.load(JOURNAL_SPEC, data, path)
    if out["id"] != Path(path).stem:
        raise s.SchemaError("id", f"the transaction id its file name says ({Path(path).stem!r})",
                            s.describe(out["id"]), str(path))
    return out


_HINTS = {"verb": re.compile(r'"verb":\s*"(\w+)"'), "state": re.compile(r'"state":\s*"(\w+)"')}


def _what_it_knew(path: Path, prefix: Path | None) -> dict[str, Any]:
    """What a journal that cannot be parsed still tells: a verb, a state, the paths it names
    (made absolute under ``prefix``, the env it is in now)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, Any] = {k: m.group(1) for k, r in _HINTS.items() if (m := r.search(text))}
    paths = re.findall(r'"path":\s*"([^"]+)"', text)
    if paths:
        out["paths"] = sorted({rebased(p, prefix) if prefix else p for p in paths})[:20]
    return out


def unreadable(state_dir: Path) -> list[Unreadable]:
    """Every journal of ``state_dir`` that cannot be read or used, with what it still tells."""
    d = journal_dir(state_dir)
    out = []
    for p in sorted(d.glob("*.json"), key=lambda p: (seq(p.stem), p.stem)) if d.is_dir() else ():
        try:
            Journal.load(p)
        except (OSError, ValueError) as exc:
            bdir = backup_dir(Path(state_dir), p.stem)
            out.append(Unreadable("journal", str(p), f"{type(exc).__name__}: {exc}", txn=p.stem,
                                  known=_what_it_knew(p, prefix_of(state_dir)), backups=str(bdir) if bdir.is_dir() else None))
    return out


def journals(state_dir: Path) -> list[Journal]:
    """Every readable journal of ``state_dir``, oldest first."""
    d = journal_dir(state_dir)
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob("*.json"), key=lambda p: (seq(p.stem), p.stem)):
        try:
            out.append(Journal.load(p))
        except (OSError, ValueError):
            continue
    return out


def prefix_of(state_dir: Path) -> Path | None:
    """The prefix an own state dir (``<prefix>/.rocmbuild``) belongs to; None for an outside one."""
    return Path(state_dir).parent if Path(state_dir).name == STATE_DIRNAME else None


def foreign(state_dir: Path) -> list[tuple[str, str]]:
    """(``copied`` | ``moved``, the prefix it ran in) for each distinct other prefix whose
    transactions this state dir holds: a copied (``cp -a``) or moved env."""
    prefix = prefix_of(state_dir)
    out: list[tuple[str, str]] = []
    for j in journals(state_dir) if prefix is not None else ():
        ident = j.prefix_identity
        rel = origin(ident, prefix) if ident is not None and prefix is not None else None
        if ident is not None and rel in ("copied", "moved") and (rel, ident.path) not in out:
            out.append((rel, ident.path))
    return out


def pending(state_dir: Path) -> list[Journal]:
    """Journals not committed and not rolled back (crashed or running right now)."""
    return [j for j in journals(state_dir) if j.state not in FINISHED]
