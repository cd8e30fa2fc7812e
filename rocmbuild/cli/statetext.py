"""The text of a target's state for a person: drift with versions, a history row, a dry run's
plan as a before -> after tree. Wording only (render.py registers the renderers; textlayout.py lays
the text out).

Decisions:
* A file's version is said only where something vouches for it: the plan's ``version_before`` for
  the file the target's torch loads now, the artifact's version for a library it places, the
  process's version for a drifted file it loads; else "version unknown".
* Each value is shown through ``names.safe_text`` (a history line is read from a file anyone with
  write access to the prefix may have written): a history row's cells are one line each (its
  state a tuple of one-line facts) and escaped by ``textlayout.table``; other lines pass
  ``textlayout.lines``.
* Keys and sha256 digests read as their first 16 hex digits; paths inside the prefix as relative.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from rocmbuild.cli import textlayout
from rocmbuild.names import safe_text
from rocmbuild.results import HistoryRow, short_txn

if TYPE_CHECKING:
    from rocmbuild.environment.target import Target
    from rocmbuild.store.provenance import Origin


def rel(path: str, prefix: str | None) -> str:
    return path[len(prefix) + 1:] if prefix and path.startswith(prefix.rstrip("/") + "/") else path


def drift_text(d, prefix: str | None = None) -> str:
    """What rocmbuild placed at a drifted path and what is there now, with versions where known."""
    placed_kind = d.expected.split(" ", 1)[0]
    if placed_kind == "file":
        what = d.placed_version or "a file"
        placed = f"placed {what}" + (f" (sha {textlayout.short(d.placed_sha256)})" if d.placed_sha256 else "")
    else:
        placed = "placed " + ("nothing (it was removed)" if placed_kind == "absent" else d.expected)
    kind = d.found_kind or d.found.split(" ", 1)[0]
    if kind == "file":
        now = "now overwritten in place (the same file, other contents)" if d.written_in_place else "now a different file"
        if d.role in ("library", "restore"):
            now += (f" (version {d.found_version}, as the target's torch reports it)" if d.found_version
                    else " (version unknown: the target's torch does not load it)")
    elif kind == "absent":
        now = "now missing"
    elif kind == "link":
        now = f"now {d.found}"
    else:
        now = "now a directory or special file"
    return f"DRIFT {rel(d.path, prefix)}: {placed} by txn {short_txn(d.txn)}, {now}"


HISTORY_HEADERS = ("txn", "when", "what", "version", "state")


def history_state(r: HistoryRow) -> tuple[str, ...]:
    """One line per fact: an apply in effect or undone (by which rollback), a rollback or redo done
    (never "in effect": it marks what it undid), a failed one rolled back; then whether ``redo``
    would undo it, pruned backups and foreign origin."""
    out = r.line.outcome or "?"
    if out != "committed":
        facts = [out.replace("_", " ")]
    elif (r.kind or r.line.verb) == "apply":
        facts = ["in effect" if r.in_effect else (f"undone by {short_txn(r.undone_by)}" if r.undone_by else "undone")]
        if r.in_effect and r.redone_by:
            facts.append(f"redone by {short_txn(r.redone_by)}")
    else:
        facts = ["done"]
    if r.redo_next:
        facts.append("`redo` undoes it")
    if r.backups_pruned:
        facts.append("backups pruned")
    if r.origin in ("copied", "moved"):
        facts.append(f"{r.origin} from {r.line.prefix_identity.path if r.line.prefix_identity else '?'}")
    return tuple(facts)


def history_row(r: HistoryRow, built: str = "") -> tuple[textlayout.Cell, ...]:
    """The cells of a history line (the table escapes each); ``built``: what tells its build apart
    from the other builds of its recipe listed (store/differs.py)."""
    line = r.line
    what = line.recipe or "-"
    if line.commit:
        what += f" @ {line.commit[:12]}"
    if built:
        what += f" ({built})"
    if r.redoes:
        what = f"undoes rollback {short_txn(r.redoes)}"
    elif line.undoes:
        what += f" (undoes {', '.join(short_txn(u) for u in line.undoes)})"
    to = r.restores_to
    if to and (r.kind or line.verb) != "apply":
        what += "; back to stock" if to == "stock" else f"; back to the state after {short_txn(to)}"
    when = (line.time or "?").replace("T", " ").rstrip("Z")
    return (f"{short_txn(line.id)} {r.kind or line.verb}", when, what,
            f"{line.version_before or '?'} -> {line.version_after or '?'}", history_state(r))


def _before(a, plan) -> str:
    b = a.before
    if b.kind == "link":
        return f"link -> {b.target}"
    if b.kind != "file":
        return b.kind
    loaded = a.role == "library" and a.path in (plan.library_before, os.path.realpath(plan.library_before))
    return f"file {plan.version_before or '(version unknown)'} (loaded now)" if loaded else "file"


def _after(a, plan, version: str | None) -> str:
    if a.kind == "remove":
        return "removed"
    if a.link is not None:
        return f"link -> {a.link}"
    what = f"{plan.recipe or 'the artifact'} {version}" if a.role == "library" and version else \
        f"file from {plan.recipe or 'the artifact'}"
    return what + (f" (sha {textlayout.short(a.sha256)})" if a.sha256 else "")


def _compat(tp) -> str:
    c = tp.compatibility
    if c is None:
        return "compatibility: not judged before the swap (the artifact records no version)"
    return (f"compatibility: {'ok' if c.ok else 'REFUSED'}: {c.found} (torch needs {c.expected})"
            + (f"; {c.message}" if c.message else ""))


def plan_tree(tp) -> str:
    """A dry run's file actions as a tree: directory -> file: before -> after, with versions."""
    plan = tp.plan
    dirs: dict[str, list[str]] = {}
    for a in plan.actions:
        d, name = os.path.split(a.path)
        change = ", kept as it is" if a.done and a.link is not None else (
            ", already the artifact's file" if a.done else f" -> {_after(a, plan, tp.artifact_version)}")
        dirs.setdefault(rel(d, plan.prefix) if d != plan.prefix else ".", []).append(
            f"{name}: {_before(a, plan)}{change}")
    version = tp.artifact_version or "(no version)"
    head = (f"{plan.verb} {plan.recipe or '-'} {version} (artifact {textlayout.short(plan.artifact) or '-'}) on "
            f"{plan.prefix} ({plan.layout} layout)")
    pending = len(plan.pending)
    lines = [_compat(tp), f"verification after the swap expects {plan.version_after or 'no particular version'}",
             ("already applied: nothing would change" if not pending else
              f"{pending} path(s) would change, {len(plan.actions) - pending} already as wanted")]
    lines += [f"name: {n.describe()}" for n in plan.names]  # which artifact name lands where, and why
    lines += [f"note: {n}" for n in plan.notes]
    return textlayout.tree(head, dirs.items()) + "\n" + textlayout.lines(lines)


def origin_text(o: Origin) -> str:
    """Where a substituted artifact came from, in one line."""
    signed = f"signed by {o.signer}" if o.signer else "unsigned (--allow-unsigned)"
    return f"substituted from {o.url} (bundle sha256 {o.bundle_sha256[:16]}, {signed})"


def databases_text(db) -> str:
    """The MIOpen databases the loaded library reads (swap/dbreport.py), as lines after a blank
    one; "" when no MIOpen is loaded."""
    if db is None:
        return ""
    lines = [f"MIOpen databases: {db.db_dir}"]
    if db.placed_build:
        lines.append(f"  {len(db.ours)} DB file(s) of the placed build"
                     + ("" if db.foreign else "; no other DB file"))
        lines += [f"  FOREIGN {p}: not placed by the build in effect (MIOpen reads it; `rocmbuild apply` "
                  "again moves it aside)" for p in db.foreign]
    lines += [f"  note: {n}" for n in db.notes]
    if db.custom_cache:
        if db.custom_foreign:
            lines.append(f"  MIOPEN_CUSTOM_CACHE_DIR={db.custom_cache} holds {len(db.custom_foreign)} user "
                         "database(s) of an unknown build, which an MIOpen up to 3.3 reads as its own; "
                         f"clear them: {db.clear_command}")
        else:
            lines.append(f"  MIOPEN_CUSTOM_CACHE_DIR={db.custom_cache}: no user database at its top")
    return "\n" + "\n".join(safe_text(x) for x in lines)


def activation_lines(t: "Target") -> list[str]:
    """A target's activation (``target.activation`` in the JSON) and, when the unactivated
    environment loads something else, both (``target.unactivated``)."""
    act, diff = t.activation, t.difference
    lines = []
    if act.kind != "none":
        sets = ", ".join(f"{c.var} ({c.source})" for c in act.relevant())
        files = ", ".join(act.files) or "no activation files"
        lines.append(f"activation: {act.kind}, {act.how}: {files}; "
                     + (f"sets {sets}" if sets else "nothing that changes what torch loads"))
    if diff is not None:
        lines.append(f"ACTIVATED AND UNACTIVATED DIFFER: {diff.text()}")
    return lines
