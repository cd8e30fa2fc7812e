"""The AMD GPU architectures ROCm's compiler knows, and whether a build's targets cover a GPU.

Where the table comes from: the processor names are clang's AMDGPU offload architectures
(``clang/lib/Basic/OffloadArch.cpp``, ``ArchNames``: gfx600 ... gfx1201, gfx1250), the same
names as the "AMDGPU Processors" table of LLVM's AMDGPU backend guide
(https://llvm.org/docs/AMDGPUUsage.html#processors), plus ``gfx940`` and ``gfx941``, which ROCm
5.x/6.x compilers accepted before LLVM folded them into ``gfx942``. The generic targets and their
members are LLVM's "AMDGPU Generic Processors" table (same page; code object V6): a code object
built for ``gfx11-generic`` runs on every processor listed under it.

Decisions:
* A value is a *target ID* (LLVM's ``<processor>(:<feature>(+|-))*``): ``gfx90a:xnack-``,
  ``gfx908:sramecc+:xnack-``. Its features are checked (``sramecc`` or ``xnack``, each at most
  once, with ``+`` or ``-``) but play no part in matching a host: the KFD topology does not say
  whether XNACK is on, so the processor is what is compared.
* An unknown name is an :class:`InputError` (exit 2) with a "did you mean": a name that the typed
  text begins (``gfx110`` -> ``gfx1100``) ranks first, then names of the same family (major
  version: ``gfx11`` for ``gfx1115``), then the characters shared in any order (``gfx1151``
  before ``gfx1150``), then :mod:`difflib`'s ratio. The hint lists the nearest name's family,
  so it never suggests a name that its list leaves out.
* A build's targets come from its ``GPU_TARGETS`` define, else ``AMDGPU_TARGETS`` (the older
  name MIOpen and rocBLAS still read); neither set: ``None``, "the project's default list",
  which rocmbuild does not know and therefore never refuses.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Iterable

from rocmbuild.errors import InputError

TARGET_DEFINES = ("GPU_TARGETS", "AMDGPU_TARGETS")

# clang's ArchNames order (family by family), gfx940/gfx941 kept for older ROCm
PROCESSORS: tuple[str, ...] = (
    "gfx600", "gfx601", "gfx602", "gfx700", "gfx701", "gfx702", "gfx703", "gfx704", "gfx705",
    "gfx801", "gfx802", "gfx803", "gfx805", "gfx810",
    "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c",
    "gfx940", "gfx941", "gfx942", "gfx950",
    "gfx1010", "gfx1011", "gfx1012", "gfx1013",
    "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
    "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
    "gfx1200", "gfx1201", "gfx1250",
)

GENERIC: dict[str, tuple[str, ...]] = {
    "gfx9-generic": ("gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"),
    "gfx9-4-generic": ("gfx940", "gfx941", "gfx942", "gfx950"),
    "gfx10-1-generic": ("gfx1010", "gfx1011", "gfx1012", "gfx1013"),
    "gfx10-3-generic": ("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"),
    "gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    "gfx12-generic": ("gfx1200", "gfx1201"),
}

KNOWN: tuple[str, ...] = PROCESSORS + tuple(GENERIC)
FEATURES = ("sramecc", "xnack")
_FEATURE_RE = re.compile(r"^([a-z]+)([+-])$")


# --------------------------------------------------------------------------------------------
# checking names


def family(name: str) -> str | None:
    """The major version a name belongs to: ``gfx1151`` and ``gfx11-generic`` -> ``"11"``,
    ``gfx90a`` -> ``"9"`` (LLVM's gfx<major><minor><stepping>); None for what is not gfx-shaped."""
    m = re.match(r"^gfx(\d+)-", name) or re.match(r"^gfx(\d+)[0-9a-z][0-9a-z]$", name)
    return m.group(1) if m else None


def _common(a: str, b: str) -> int:
    """How many characters after ``gfx`` the two names share, in any order (``gfx1115`` and
    ``gfx1151`` share all four: swapped digits are the likeliest typo)."""
    rest = list(b[3:])
    n = 0
    for c in a[3:]:
        if c in rest:
            rest.remove(c)
            n += 1
    return n


def _suggest(name: str) -> list[str]:
    """Up to three known names near ``name``: those it begins first, then those of its family
    (``gfx11...`` for ``gfx1115``), then by the characters they share and difflib's ratio."""
    low = name.lower()
    fam = family(low)
    scored = [(n.startswith(low) and low != "gfx", fam is not None and family(n) == fam, _common(low, n),
               difflib.SequenceMatcher(None, low, n).ratio(), -i, n) for i, n in enumerate(KNOWN)]
    return [n for prefix, _f, _c, ratio, _i, n in sorted(scored, reverse=True) if prefix or ratio >= 0.6][:3]


#: the names the hint lists when nothing is near what was typed
COMMON = ("gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1151", "gfx1201")


def shown_known(near: list[str]) -> str:
    """The known names a hint lists: the whole family of the nearest name and any other
    suggestion (so every suggestion is among them), or a few common ones when nothing is near."""
    if not near:
        return "known: " + ", ".join(COMMON) + ", the generic targets (gfx11-generic, ...)"
    fam = family(near[0])
    listed = [n for n in KNOWN if fam is not None and family(n) == fam]
    others = [n for n in near if n not in listed]
    text = f"the gfx{fam} family: {', '.join(listed)}" if listed else ""
    return "; ".join(x for x in (text, "also " + ", ".join(others) if others else "") if x)


def unknown(name: str, what: str) -> InputError:
    near = _suggest(name.split(":", 1)[0])
    hint = (f"did you mean {near[0]}?" + (f" (or {', '.join(near[1:])})" if near[1:] else "")) if near else ""
    return InputError(
        f"{what}: unknown GPU architecture '{name}'",
        "; ".join(x for x in (hint, shown_known(near), "`rocmbuild doctor` shows this machine's GPU") if x),
        details={"value": name, "suggestions": near},
    )


def check_target(value: str, what: str) -> str:
    """``value`` as a checked target ID (stripped), e.g. ``gfx90a:xnack-``; InputError if unknown."""
    text = value.strip()
    proc, *features = text.split(":")
    if proc not in KNOWN:
        raise unknown(text, what)
    seen = set()
    for f in features:
        m = _FEATURE_RE.match(f)
        if not m or m.group(1) not in FEATURES or m.group(1) in seen:
            raise InputError(f"{what}: bad feature '{f}' in '{text}'",
                             "features are sramecc+/sramecc- and xnack+/xnack-, each at most once "
                             "(e.g. gfx90a:xnack- or gfx908:sramecc+:xnack-)", details={"value": text})
        seen.add(m.group(1))
    return text


def split(value: Any) -> list[str]:
    """A define's value (``"gfx1100;gfx1151"``, ``"gfx1100,gfx1151"`` or a list) as names."""
    parts = value if isinstance(value, (list, tuple)) else [str(value)]
    return [t.strip() for p in parts for t in re.split(r"[;,]", str(p)) if t.strip()]


def check_targets(value: Any, what: str) -> tuple[str, ...]:
    """Every name of ``value`` checked (see :func:`check_target`); none at all is refused too."""
    names = split(value)
    if not names:
        raise InputError(f"{what}: no GPU architecture given", "for example: gfx1151 or gfx1151,gfx1100")
    return tuple(check_target(n, what) for n in names)


def check_defines(defines: Iterable[tuple[str, Any]], what: str) -> None:
    """Refuse an unknown architecture in ``GPU_TARGETS``/``AMDGPU_TARGETS`` (``"auto"`` is resolved later)."""
    for name, value in defines:
        if name in TARGET_DEFINES and value != "auto":
            check_targets(value, f"{what} {name}")


def build_targets(defines: Iterable[tuple[str, Any]], *, auto: Iterable[str] | None = None) -> tuple[str, ...] | None:
    """The targets a build is for: ``GPU_TARGETS``, else ``AMDGPU_TARGETS``; None: neither given.
    An unresolved ``"auto"`` stands for ``auto`` (this machine's GPUs) when given, else None."""
    d = dict(defines)
    for name in TARGET_DEFINES:
        if d.get(name) == "auto":
            return tuple(auto) if auto else None
        if name in d and split(d[name]):
            return tuple(split(d[name]))
    return None


# --------------------------------------------------------------------------------------------
# matching a host


def processor(target: str) -> str:
    return target.split(":", 1)[0]


def covers(target: str, arch: str) -> bool:
    """True when code built for ``target`` runs on a GPU of architecture ``arch``."""
    proc, host = processor(target), processor(arch)
    return proc == host or host in GENERIC.get(proc, ())


MATCH, MISMATCH, NO_GPU, UNCHECKED = "match", "mismatch", "no_gpu", "unchecked"


@dataclass(frozen=True)
class ArchMatch:
    """Whether an artifact's GPU targets cover this machine's GPUs (``gpu_arch`` in the JSON)."""

    status: str  # match | mismatch | no_gpu | unchecked
    host: tuple[str, ...]
    targets: tuple[str, ...] | None
    detail: str
    allowed: bool = False  # a mismatch applied anyway (--allow-other-arch)

    @property
    def refused(self) -> bool:
        return self.status == MISMATCH and not self.allowed

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "host": list(self.host),
                "targets": None if self.targets is None else list(self.targets),
                "detail": self.detail, "allowed_other_arch": self.allowed}


def match(targets: tuple[str, ...] | None, host: Iterable[str], *, amd: bool = True,
          what: str = "the artifact") -> ArchMatch:
    """The verdict for ``what`` (built for ``targets``) on a machine whose GPUs are ``host``.

    Every GPU found must be covered (HIP uses them all). Not an AMD library (``amd=False``),
    no targets recorded, or no AMD GPU found: never a refusal, the detail says why."""
    host = tuple(host)
    shown = ", ".join(targets or ())
    if not amd:
        return ArchMatch(UNCHECKED, host, targets, f"{what} is not an AMD GPU library: no architecture to check")
    if targets is None:
        return ArchMatch(UNCHECKED, host, None, f"{what} names no GPU targets (the project's "
                         "default list)")
    if not host:
        return ArchMatch(NO_GPU, host, targets, f"no AMD GPU found on this machine ({what} targets "
                         f"{shown})")
    missing = [a for a in host if not any(covers(t, a) for t in targets)]
    if missing:
        return ArchMatch(MISMATCH, host, targets, f"this machine's GPU is {', '.join(missing)}, but {what} "
                         f"targets {shown}")
    return ArchMatch(MATCH, host, targets, f"this machine's {', '.join(host)} is among the GPUs {what} targets "
                     f"({shown})")
