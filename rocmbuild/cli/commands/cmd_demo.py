"""``rocmbuild demo``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("demo", help="build, apply, crash and recover, roll back: the whole job on a bundled tiny "
                                    "library in a scratch env (no ROCm, no GPU)")
    a.common(p)
    p.add_argument("--keep-dir", metavar="DIR", default=None, dest="keep_dir",
                   help="make everything in DIR (new or empty) and keep it, instead of a temp dir removed at the end; "
                   "the result says how to go on there")
    p.add_argument("--keep", metavar="DIR", default=None, dest="keep_dir", help=argparse.SUPPRESS)  # the old name


def run(args) -> VerbResult:
    from rocmbuild.flows import demo

    return demo.demo(keep=args.keep_dir)
