"""``rocmbuild cache``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("cache", help="the artifact cache: `cache dir` says where, `cache list` shows it, `cache rm` "
                       "removes one artifact, `cache gc` cleans it, `cache verify` re-hashes it")
    p.add_argument("action", choices=["dir", "verify", "list", "rm", "gc"],
                   help="dir: print the cache dir (--json: also the state dir); verify: re-hash every cached "
                   "artifact against its manifest; list: every artifact with its size, last use and the targets "
                   "using it; rm KEY|RECIPE: remove that artifact (or each of the recipe's); gc: remove what "
                   "nothing needs (artifacts, failed build trees, sources, old logs)")
    p.add_argument("what", nargs="?", metavar="KEY|RECIPE", help="rm: an artifact key (or its first 8+ digits) or a recipe")
    p.add_argument("--force", action="store_true", help="rm: also an artifact a target has applied now")
    p.add_argument("--keep-days", type=float, default=None, metavar="N",
                   help="gc: keep whatever was used in the last N days (default 30)")
    p.add_argument("--dry-run", action="store_true", help="gc: say what would be removed, remove nothing")
    p.add_argument("--remote", metavar="URL", help="list: what a binary cache holds (oci://, file://, https://)")
    a.common(p)


def run(args) -> VerbResult:
    from rocmbuild.errors import InputError
    from rocmbuild.flows import cacheverify

    if args.action != "gc" and (args.keep_days is not None or args.dry_run):
        raise InputError(f"--keep-days and --dry-run belong to `cache gc`, not `cache {args.action}`",
                         "run `rocmbuild cache gc --keep-days N --dry-run`")
    if args.remote is not None and args.action != "list":
        raise InputError(f"--remote belongs to `cache list`, not `cache {args.action}`",
                         "run `rocmbuild cache list --remote URL`")
    if (args.what is not None or args.force) != (args.action == "rm"):
        raise InputError("`cache rm` takes KEY|RECIPE (and --force); no other `cache` action does",
                         "run e.g. `rocmbuild cache rm miopen-develop` (`rocmbuild cache list` shows keys)")
    if args.action == "dir":
        return cacheverify.where()
    if args.action == "rm":
        return cacheverify.rm(args.what, force=args.force)
    if args.action == "list":
        return remote_list(args.remote) if args.remote else cacheverify.listing()
    if args.action == "gc":
        days = cacheverify.housekeeping.DEFAULT_KEEP_DAYS if args.keep_days is None else args.keep_days
        return cacheverify.gc(days, dry_run=args.dry_run)
    return cacheverify.verify()


def remote_list(url: str) -> VerbResult:
    from rocmbuild.flows import fleet

    return fleet.remote_list(url)
