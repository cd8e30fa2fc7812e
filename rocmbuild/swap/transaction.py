"""One transaction as the protocol runs it: its journal (the value last written), the roots it acts
through and each step's file action (the protocol: swap/protocol.py; the journal on disk:
swap/journal.py).

Decisions:
* the transaction owns its steps: the protocol changes a step with :meth:`Transaction.mark` (in
  memory) and the journal with :meth:`Transaction.set` (saved whole by
  :meth:`~rocmbuild.swap.journal.Journal.save`), never a dict the journal also holds;
* a change is the transaction's at once, even when its write fails (ENOSPC, EIO: a rollback goes on
  and reports the journal error; the next recovery finishes what the disk kept);
* the file actions are made once, from the plan's action and the step (a step whose backup was
  copied restores a new inode: FileAction.is_before); a rollback after a failure makes its own from
  the journal as it stands, the way recovery does after a crash.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterator

from rocmbuild.swap.actions import FileAction, make
from rocmbuild.swap.journal import Journal, Step
from rocmbuild.swap.plan import Plan
from rocmbuild.swap.roots import Roots


class Transaction:
    """A journal being run: its steps and their file actions, changed only through its methods."""

    def __init__(self, journal: Journal, roots: Roots) -> None:
        self.journal = journal
        self.roots = roots
        self.actions: tuple[FileAction, ...] = tuple(
            make(action, journal.id, roots, step.index, backup_copied=bool(step.backup_copied))
            for action, step in journal.changes)

    @classmethod
    @contextmanager
    def open(cls, journal: Journal) -> Iterator["Transaction"]:
        """``journal``'s transaction, through roots opened for it and closed at the end."""
        with journal.roots() as roots:
            yield cls(journal, roots)

    @property
    def id(self) -> str:
        return self.journal.id

    @property
    def plan(self) -> Plan:
        return self.journal.plan

    @property
    def state(self) -> str:
        return self.journal.state

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.journal.steps

    def pairs(self) -> list[tuple[FileAction, Step]]:
        """Each file action with its step, in plan order."""
        return list(zip(self.actions, self.journal.steps, strict=True))

    def mark(self, n: int, **changes: Any) -> None:
        """Change step ``n`` (written by the next :meth:`set` or :meth:`save`)."""
        steps = list(self.journal.steps)
        steps[n] = replace(steps[n], **changes)
        self.journal = replace(self.journal, steps=tuple(steps))

    def set(self, **changes: Any) -> None:
        """Change the journal and write it (an OSError of the write is raised; the change stays)."""
        self.journal = replace(self.journal, **changes)
        self.save()

    def save(self) -> None:
        self.journal = self.journal.save()
