"""``rocmbuild rollback``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("rollback", help="undo the newest apply in effect (or go back to the state after --to N), verified")
    a.common(p)
    a.target(p)
    a.txn_opts(p)
    p.add_argument("--to", metavar="TXN", help="bring back the state right after transaction TXN (like conda's "
                   "--revision N: TXN stays in effect, every apply after it is undone); TXN is its number (3), id or "
                   "a prefix of the id; 0 (or stock) is the state before rocmbuild's first transaction")
    p.add_argument("--undo", metavar="TXN", help="bring back the state right before the apply TXN (it and every "
                   "apply after it undone; what a rollout undoes its own apply with, TXN from its JSON)")
    p.add_argument("--force", action="store_true", help="roll back even over files changed since (drift)")
    p.add_argument("--if-applied", action="store_true",
                   help="when nothing is in effect to undo, succeed (exit 0, nothing_to_roll_back) instead of exit 2")
    p.add_argument("--keep", type=a.at_least_one, default=None, metavar="N",
                   help="keep the backups of the newest N transactions (default: the config's keep, else 5)")


def run(args) -> VerbResult:
    from rocmbuild.flows import manage

    if args.to is not None and args.undo is not None:
        from rocmbuild.errors import InputError
        raise InputError("give --to TXN (the state after it) or --undo TXN (the state before it), not both",
                         "`rocmbuild history` lists the transactions")
    return manage.rollback(env=args.env, python=args.python, to=args.to, force=args.force, wait=a.lock_wait(args),
                           keep=args.keep, probe_timeout=args.probe_timeout, if_applied=args.if_applied,
                           undo=args.undo)
