"""``rocmbuild recover``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("recover", help="only roll back an interrupted transaction (nothing else)")
    a.common(p)
    a.target(p)
    a.txn_opts(p)


def run(args) -> VerbResult:
    from rocmbuild.flows import manage

    return manage.recover(env=args.env, python=args.python, wait=a.lock_wait(args), probe_timeout=args.probe_timeout)


# --------------------------------------------------------------------------------------------
# demo (the whole workflow on a bundled miniature MIOpen, in a scratch dir)
