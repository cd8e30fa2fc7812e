"""``rocmbuild key``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("key", help="signing keys: `key generate NAME --out FILE` makes an Ed25519 key pair")
    p.add_argument("action", choices=["generate"], help="generate: write a secret key, print its public key")
    p.add_argument("name", metavar="NAME", help="the key's name, e.g. lab-builder-1 (signatures carry it)")
    p.add_argument("--out", required=True, metavar="FILE", help="the secret key file to write (mode 0600; never overwritten)")
    a.common(p)


def run(args) -> VerbResult:
    from rocmbuild.flows import fleet

    return fleet.key_generate(args.name, args.out)
