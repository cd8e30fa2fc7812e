"""``rocmbuild config``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("config", help="the config files: `config list` shows each effective setting and its file")
    p.add_argument("action", choices=["list"], help="list: every setting, its value and the file that set it")
    a.common(p)


def run(args) -> VerbResult:
    from rocmbuild.flows import fleet

    return fleet.config_list()
