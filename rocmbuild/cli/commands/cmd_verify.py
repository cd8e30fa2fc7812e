"""``rocmbuild verify``: its arguments (:func:`add`) and the call they make (:func:`run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmbuild.cli import args as a
if TYPE_CHECKING:  # imported by run, the verb that makes one (a cheap --version/--help/Tab)
    from rocmbuild.results import VerbResult


def add(sub) -> None:
    p = sub.add_parser("verify", help="check what the target loads: one library, expected version, compatible, "
                                      "what rocmbuild placed (no DRIFT)")
    a.common(p)
    a.target(p)
    p.add_argument("--expect", type=a.version, metavar="VERSION", help="the library version that must be loaded, e.g. 3.5.1")
    p.add_argument("--expect-file", metavar="PATH", action="append",
                   help="the loaded library must be this very file (same device and inode); repeat it for "
                        "every file of a library set")
    p.add_argument("--smoke", action="store_true",
                   help="run the smoke suite on the GPU (skipped without one; ROCMBUILD_SMOKE_DEVICE=cpu: on the CPU)")
    p.add_argument("--hash", action="store_true", help="also sha256 each loaded library")
    p.add_argument("--encoding", choices=["miopen", "cudnn"], default=None,
                   help="how to decode the version integer (default: the library's, else the torch's backend)")
    p.add_argument("--library", default=None, metavar="NAME",
                   help="library file stem, or a set as a glob (default: libMIOpen for a ROCm torch, libcudnn* for CUDA)")


def run(args) -> VerbResult:
    from rocmbuild.flows import manage

    return manage.verify(env=args.env, python=args.python, probe_timeout=args.probe_timeout, want_hash=args.hash,
                         smoke=args.smoke, library=args.library, encoding=args.encoding, expect=args.expect,
                         expect_file=args.expect_file)
