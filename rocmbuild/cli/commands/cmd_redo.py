"""``rocmbuild redo``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("redo", help="re-apply what the last rollback undid (from that rollback's backups), verified")
    a.common(p)
    a.target(p)
    a.txn_opts(p)
    p.add_argument("--force", action="store_true", help="redo even over files changed since the rollback (drift)")
    p.add_argument("--keep", type=a.at_least_one, default=None, metavar="N",
                   help="keep the backups of the newest N transactions (default: the config's keep, else 5)")


def run(args) -> VerbResult:
    from rocmbuild.flows import manage

    return manage.redo(env=args.env, python=args.python, force=args.force, wait=a.lock_wait(args), keep=args.keep,
                       probe_timeout=args.probe_timeout)
