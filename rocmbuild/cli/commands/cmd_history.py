"""``rocmbuild history``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("history", help="list the transactions on the target and the space backups hold")
    a.common(p)
    a.target(p)
    p.add_argument("--limit", type=a.positive, default=None, metavar="N",
                   help="only the newest N transactions (default: all; the table lists the newest first)")


def run(args) -> VerbResult:
    from rocmbuild.flows import manage

    return manage.history(env=args.env, python=args.python, limit=args.limit)
