"""One model of "in effect": which transactions of a target are in effect, which were undone and
by which rollback, and what a ``redo`` would re-apply. ``status``, ``history``, ``rollback``,
``redo``, pruning and ``cache list`` all read it (docs/transactions.md, "What is in effect").

Decisions:
* **The stack.** What is in effect is a stack of *applies*, oldest first. An apply pushes itself.
  A rollback is never in effect itself: it marks what it undid (``undone_by``) and sets the stack
  to what it was at an earlier point. A redo (the undoing of a rollback) puts back what that
  rollback undid (``redone_by``); it is a rollback in the journal (verb ``rollback``, its plan's
  ``redoes`` names the rollback), shown as ``redo``.
* **Points.** Every committed transaction is a point in time, and :data:`STOCK` is the point
  before the first one. ``stacks[point]`` is the stack right after it. "The state after N"
  (``rollback --to N``, conda's ``--revision N``) is ``stacks[N]``; a rollback or redo records
  the point whose state it brought back (``Plan.restores_to``) and the replay sets the stack to
  that point's. The files of two points with the same stack are the same (every change of the
  stack is a push or a return to an earlier point), so a restore goes back to the *latest* point
  with the wanted stack: the fewest transactions to undo, the newest backups.
* **Redo** is an undo stack as in an editor: each rollback that took applies out of effect can be
  redone, newest first; a new apply ends every redo (what it would re-apply is no longer "the
  last thing undone"), and so does a rollback that took nothing out of effect.
* Journals written before ``restores_to`` existed are replayed by the rules they were written
  under (:func:`_legacy`): a rollback that undid a suffix of the layers returns to the layers
  before it, else it removes what it undid.
* Only committed journals count: a transaction rolled back by verification or recovery changed
  nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rocmbuild.swap.journal import Journal, journals

STOCK = "stock"  # the point before rocmbuild's first transaction on a target


@dataclass(frozen=True)
class Redo:
    """What ``rocmbuild redo`` would do: undo ``rollback``, bringing back the state after ``point``,
    in which ``reapplies`` (apply ids, oldest first) are in effect again."""

    rollback: str
    reapplies: tuple[str, ...]
    point: str

    def to_json(self) -> dict[str, Any]:
        return {"rollback": self.rollback, "reapplies": list(self.reapplies), "restores_to": self.point}


@dataclass(frozen=True)
class Effect:
    """The replay of a state dir's committed journals (see the module notes)."""

    committed: tuple[Journal, ...] = ()  # oldest first
    in_effect: tuple[Journal, ...] = ()  # the applies in effect, oldest first
    layers: tuple[Journal, ...] = ()  # the legacy replay (what :func:`active` returns)
    stacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # point -> applies in effect after it
    undone_by: Mapping[str, str] = field(default_factory=dict)  # apply id -> the rollback that undid it last
    redone_by: Mapping[str, str] = field(default_factory=dict)  # apply id -> the redo that brought it back last
    kinds: Mapping[str, str] = field(default_factory=dict)  # id -> "apply" | "rollback" | "redo"
    redos: tuple[Redo, ...] = ()  # what can be redone, oldest first (the last one is `redo`'s)

    @property
    def stack(self) -> tuple[str, ...]:
        return tuple(j.id for j in self.in_effect)

    @property
    def redo(self) -> Redo | None:
        return self.redos[-1] if self.redos else None

    def ids(self) -> list[str]:
        return [j.id for j in self.committed]

    def point_for(self, stack: tuple[str, ...]) -> str:
        """The latest point whose stack is ``stack`` (STOCK when only the start has it)."""
        for j in reversed(self.committed):
            if self.stacks[j.id] == stack:
                return j.id
        if not stack:
            return STOCK
        raise ValueError(f"no point of this target had {', '.join(stack)} in effect")

    def after(self, point: str) -> tuple[Journal, ...]:
        """The committed transactions after ``point``, oldest first."""
        if point == STOCK:
            return self.committed
        ids = self.ids()
        return self.committed[ids.index(point) + 1:]

    def kind(self, txn: str) -> str | None:
        return self.kinds.get(txn)


def _kind(j: Journal, by_id: dict[str, Journal]) -> str:
    if j.verb == "apply":
        return "apply"
    if j.plan.redoes:
        return "redo"
    undone = [by_id[u] for u in j.plan.undoes if u in by_id]
    if j.plan.restores_to is None and undone and all(u.verb == "rollback" for u in undone):
        return "redo"  # a legacy `rollback --to <a rollback>`
    return "rollback"


def _legacy(j: Journal, layers: list[Journal], before: dict[str, list[Journal]]) -> list[Journal]:
    """The layers after ``j`` by the rules of journals without ``restores_to``."""
    undoes = set(j.plan.undoes)
    ids = [x.id for x in layers]
    idx = min((ids.index(u) for u in undoes if u in ids), default=None)
    if idx is not None and set(ids[idx:]) == undoes and ids[idx] in before:
        return list(before[ids[idx]]) + [j]
    return [x for x in layers if x.id not in undoes] + [j]


def replay(all_journals: list[Journal]) -> Effect:
    """The model of a state dir from its journals (oldest first)."""
    committed = [j for j in all_journals if j.state == "committed"]
    by_id = {j.id: j for j in committed}
    layers: list[Journal] = []
    stack: tuple[str, ...] = ()
    before: dict[str, list[Journal]] = {}
    snaps: dict[str, tuple[list[Journal], tuple[str, ...]]] = {STOCK: ([], ())}
    undone_by: dict[str, str] = {}
    redone_by: dict[str, str] = {}
    kinds: dict[str, str] = {}
    redos: list[Redo] = []
    point = STOCK
    for j in committed:
        before[j.id] = list(layers)
        kind = kinds[j.id] = _kind(j, by_id)
        prev = stack
        if kind == "apply":
            layers, stack = layers + [j], stack + (j.id,)
        elif j.plan.restores_to is not None and j.plan.restores_to in snaps:
            old_layers, stack = snaps[j.plan.restores_to]
            layers = list(old_layers) + [j]
        else:
            layers = _legacy(j, layers, before)
            stack = tuple(x.id for x in layers if x.verb == "apply")
        removed = tuple(x for x in prev if x not in stack)
        for x in removed:
            undone_by[x] = j.id
            redone_by.pop(x, None)
        for x in stack:
            if x not in prev and x != j.id:
                redone_by[x] = j.id
                undone_by.pop(x, None)
        _track_redos(redos, j, kind, removed, point)
        snaps[j.id] = (list(layers), stack)
        point = j.id
    in_effect = tuple(by_id[x] for x in stack)
    return Effect(tuple(committed), in_effect, tuple(layers), {k: v[1] for k, v in snaps.items()},
                  undone_by, redone_by, kinds, tuple(redos))


def _track_redos(redos: list[Redo], j: Journal, kind: str, removed: tuple[str, ...], point: str) -> None:
    """The editor's redo stack: an apply ends it, a rollback that took something out of effect
    pushes itself, a redo pops the rollback it undid."""
    if kind == "apply":
        redos.clear()
    elif kind == "redo":
        undone = {j.plan.redoes} if j.plan.redoes else set(j.plan.undoes)
        if redos and redos[-1].rollback in undone:
            redos.pop()
        else:
            redos.clear()
    elif removed:
        redos.append(Redo(j.id, removed, point))
    else:
        redos.clear()


def model(state_dir: Path) -> Effect:
    """The model of ``state_dir`` (its readable journals; unreadable ones are reported elsewhere)."""
    return replay(journals(Path(state_dir)))


def in_effect(state_dir: Path) -> list[Journal]:
    """The applies in effect in ``state_dir``, oldest first."""
    return list(model(state_dir).in_effect)


def active(state_dir: Path) -> list[Journal]:
    """The committed transactions whose changes the files still show, oldest first: the applies in
    effect and the rollbacks and redos layered over them (the replay's layers;
    ``in_effect`` is what a person calls "in effect": the applies only)."""
    return list(model(state_dir).layers)
