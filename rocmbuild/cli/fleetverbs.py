"""The fleet verbs (docs/caches.md): ``config``, ``key``, ``push``; one ``_add_``/``_cmd_`` pair
each, like verbs.py, whose :data:`~rocmbuild.cli.verbs.VERBS` lists them after its own.
``cache list --remote URL`` is the ``cache`` verb's (verbs.py), calling :func:`remote_list`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Callable

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by the verb that makes one (cli/verbs.py)
    from rocmbuild.results import VerbResult


def _add_config(sub) -> None:
    p = sub.add_parser("config", help="the config files: `config list` shows each effective setting and its file")
    p.add_argument("action", choices=["list"], help="list: every setting, its value and the file that set it")
    a.common(p)


def _cmd_config(args) -> VerbResult:
    from rocmbuild.flows import fleet

    return fleet.config_list()


def _add_key(sub) -> None:
    p = sub.add_parser("key", help="signing keys: `key generate NAME --out FILE` makes an Ed25519 key pair")
    p.add_argument("action", choices=["generate"], help="generate: write a secret key, print its public key")
    p.add_argument("name", metavar="NAME", help="the key's name, e.g. lab-builder-1 (signatures carry it)")
    p.add_argument("--out", required=True, metavar="FILE", help="the secret key file to write (mode 0600; never overwritten)")
    a.common(p)


def _cmd_key(args) -> VerbResult:
    from rocmbuild.flows import fleet

    return fleet.key_generate(args.name, args.out)


def _add_push(sub) -> None:
    p = sub.add_parser("push", help="upload a built artifact, signed, to a binary cache (oci://, file://)")
    p.add_argument("what", metavar="RECIPE|KEY", help="a recipe already built here, or an artifact key")
    p.add_argument("--to", metavar="URL", help="the cache (default: the [[caches]] entry with push = true)")
    p.add_argument("--sign-key", metavar="FILE", help="the secret key to sign with (default: [sign] key)")
    p.add_argument("--force", action="store_true",
                   help="replace the entry the cache holds for the key (one another key signed, or a stuck one)")
    a.recipe_options(p)


def _cmd_push(args) -> VerbResult:
    from rocmbuild.flows import fleet

    return fleet.push(args.what, args.to, args.sign_key, args.recipes_dir, a.overrides_from(args), force=args.force)


def remote_list(url: str) -> VerbResult:
    from rocmbuild.flows import fleet

    return fleet.remote_list(url)


VERBS: list[tuple[Callable[[Any], None], Callable[[argparse.Namespace], VerbResult]]] = [
    (_add_push, _cmd_push),
    (_add_key, _cmd_key),
    (_add_config, _cmd_config),
]
