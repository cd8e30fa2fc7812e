"""The journals of a target: ``journal/<txn>.json`` in its state dir, ids, failpoints, and the
replay that says which committed transactions are in effect (:func:`active`).

Decisions:
* an id is ``NNNN-YYYYmmddTHHMMSSZ``: a sequence number (ordered, short to type for ``--to``;
  the caller holds the lock, so it is unique) and the UTC time;
* every journal write is atomic (temp, fsync, rename, fsync dir); a journal is read by one schema
  (:data:`JOURNAL_SPEC`, the plan by :data:`~rocmbuild.swap.plan.PLAN_SPEC`: docs/state-files.md);
  one it refuses (not JSON, not an object, a field missing or of another type, an id other than
  its file name's) is left out of :func:`journals`, never guessed at, and listed by :func:`unreadable` with what it still tells (the id from its name,
  a verb, state and paths found in its text, where its backups are) for every verb to report;
* on disk (schema 2) every path inside the prefix is relative to it and the journal records the
  prefix's identity (:func:`~rocmbuild.swap.landing.prefix_identity`); loading makes them absolute
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
import sys
import time
from pathlib import Path
from typing import Any, Callable

import re

from rocmbuild.fs import disk
from rocmbuild import schema as s
from rocmbuild.home import STATE_DIRNAME
from rocmbuild.swap import actions as _actions
from rocmbuild.swap.landing import origin, prefix_identity, rebased, relative_to, under
from rocmbuild.swap.pathstate import PATH_STATE_SPEC
from rocmbuild.swap.plan import PLAN_SPEC, Plan
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


class Journal:
    """One transaction's journal: its JSON ``data`` and where it lives."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def load(cls, path: Path) -> "Journal":
        """Read and check a journal: SchemaError (a ValueError) naming the file, the field and what
        was expected when it cannot be used; OSError or ValueError when it cannot be read."""
        path = Path(path)
        try:
            data = disk.read_json(path)
        except RecursionError:
            raise s.SchemaError("", "a journal", "JSON nested too deeply", str(path)) from None
        j = cls(path, _from_disk(parse(data, path), path.parent.parent))
        j.check()
        return j

    def check(self) -> None:
        """Its schema (:data:`JOURNAL_SPEC`); every step indexes an action; every path it names is
        one a plan may change (:func:`check_places`; SchemaError or ValueError naming it)."""
        s.load(JOURNAL_SPEC, self.data, self.path)
        plan = self.plan
        for i, step in enumerate(self.data["steps"]):
            if not 0 <= step["index"] < len(plan.actions):
                raise s.SchemaError(f"steps[{i}].index", f"the index of one of the plan's {len(plan.actions)} actions",
                                    s.describe(step["index"]), str(self.path))
        check_places(plan, self.path.parent.parent, self.path)

    @property
    def id(self) -> str:
        id: str = self.data["id"]
        return id

    @property
    def state(self) -> str:
        state: str = self.data["state"]
        return state

    @property
    def verb(self) -> str:
        verb: str = self.data["verb"]
        return verb

    @property
    def plan(self) -> Plan:
        return Plan.from_json(self.data["plan"])

    @property
    def files(self) -> list[str]:
        """The paths this transaction changes (its steps), in plan order."""
        plan = self.plan
        return [plan.actions[s["index"]].path for s in self.data["steps"]]

    @property
    def backups_pruned(self) -> str | None:
        """When ``--keep`` removed this transaction's backups (None: they are there)."""
        return self.data.get("backups_pruned")

    def set(self, **kw: Any) -> None:
        self.data.update(kw)
        self.save()

    def save(self) -> None:
        """Write the journal atomically through its state dir's root (never through a symlink)."""
        self.data["updated"] = now()
        text = json.dumps(_to_disk(self.data), indent=2, sort_keys=True, default=str) + "\n"
        write_state_file(self.path.parent.parent, f"journal/{self.path.name}", text.encode())

    def roots(self) -> Roots:
        """The roots this transaction acts through (the caller closes them)."""
        plan = self.plan
        return Roots.of(plan.prefix, plan.libdir, plan.outside, plan.state_dir)

    def file_actions(self, roots: Roots) -> list[tuple[_actions.FileAction, dict[str, Any]]]:
        """Each step's file action, with the step's journal entry (updated in place)."""
        plan = self.plan
        out = []
        for step in self.data["steps"]:
            a = plan.actions[step["index"]]
            out.append((_actions.make(a, self.id, roots, step["index"], backup_copied=bool(step.get("backup_copied"))),
                        step))
        return out


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
    data.setdefault("prefix_identity", prefix_identity(prefix))
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
# the schema of a journal (docs/state-files.md): kept as JSON (the protocol updates it in place),
# every field the protocol reads checked, the plan read by its own schema

TXN_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,99}$")
_OPT = s.OMIT
_STR, _INT, _BOOL = s.optional(s.string), s.optional(s.integer), s.optional(s.boolean)
_PREFIX_ID = s.obj({"path": (s.string, s.REQUIRED), "realpath": (_STR, _OPT), "dev": (_INT, _OPT), "ino": (_INT, _OPT)})
_META = s.obj({"recipe": (s.optional(s.name("recipe")), _OPT), "commit": (s.optional(s.name("commit")), _OPT),
               "version": (s.optional(s.name("version")), _OPT)})


def META_SPEC(v: Any, field: str) -> dict[str, Any]:
    """What the caller recorded (``python``, ``artifact_path``): strings or null, spread into the
    history line, so a recipe, commit or version among them has its grammar too."""
    meta: dict[str, Any] = _META(s.dict_of(_STR)(v, field), field)
    return meta


_STEP = s.obj({"index": (s.integer, s.REQUIRED), "after": (s.valid(s.optional(PATH_STATE_SPEC)), None),
               "swapped": (s.boolean, False), "backup_copied": (_BOOL, _OPT)})
JOURNAL_SPEC = s.obj({
    "schema": (s.check(s.integer, lambda v: v in (1, JOURNAL_SCHEMA), f"1 or {JOURNAL_SCHEMA}"), _OPT),
    "id": (s.check(s.string, lambda v: bool(TXN_RE.match(v)) and ".." not in v, "a transaction id"), s.REQUIRED),
    "verb": (s.one_of("apply", "rollback"), s.REQUIRED), "state": (s.string, s.REQUIRED),
    "plan": (s.valid(PLAN_SPEC), s.REQUIRED), "steps": (lambda v, f: list(s.list_of(_STEP)(v, f)), s.REQUIRED),
    "meta": (META_SPEC, {}), "prefix_identity": (s.optional(_PREFIX_ID), _OPT), "pid": (_INT, _OPT),
    **{k: (_STR, _OPT) for k in ("created", "updated", "committed", "rolled_back", "backups_pruned", "history_outcome",
                                 "state_before_rollback", "reason")},
    "history_written": (_BOOL, _OPT), "backup_copies": (_INT, _OPT),
    "revert_messages": (s.valid(s.list_of(s.string)), _OPT), "verdict": (s.json_value, _OPT),
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
        ident = j.data.get("prefix_identity")
        rel = origin(ident, prefix) if ident is not None and prefix is not None else None
        if ident is not None and rel in ("copied", "moved") and (rel, ident["path"]) not in out:
            out.append((rel, ident["path"]))
    return out


def pending(state_dir: Path) -> list[Journal]:
    """Journals not committed and not rolled back (crashed or running right now)."""
    return [j for j in journals(state_dir) if j.state not in FINISHED]
