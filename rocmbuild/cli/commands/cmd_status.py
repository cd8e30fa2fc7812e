"""``rocmbuild status``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("status", help="what the target environment loads now")
    a.common(p)
    a.target(p)
    p.add_argument("--hash", action="store_true", help="also sha256 each loaded library (slow for 1 GiB files)")
    p.add_argument("--check", action="store_true",
                   help="a health check: exit 4 on DRIFT (what the target loads is not what rocmbuild's history "
                        "says is in place) or an unfinished transaction; without it status reports them and exits 0")


def run(args) -> VerbResult:
    from rocmbuild.flows import manage

    return manage.status(env=args.env, python=args.python, probe_timeout=args.probe_timeout, want_hash=args.hash,
                         check=args.check)
