"""All human text: each verb's result (rocmbuild.results) as the text a person reads.

``text(result)`` picks the renderer by the result's type. Kept apart from parsing and exit codes
(app.py, commands/) and from the flows that do the work, so wording changes touch only this file.
Renderers read the result's values (a ``Target`` and its ``ProbeReport``, a ``HistoryRow``, a ``Lock``),
not its ``to_json()`` form.

Every value a renderer shows passes ``names.safe_text`` (rocmbuild.names): a renderer builds its
text as a list of lines and joins them with ``textlayout.lines``, which escapes each (so a newline in a
description, a ref or a stored history line cannot start a line of its own); a block that is
several lines already (a tree, a table, a nested renderer's text, a recipe file shown by ``show``)
is escaped where it is made. ``--json`` keeps every string exact.
"""

from __future__ import annotations

from functools import singledispatch
from typing import TYPE_CHECKING

from rocmbuild.proc import runner
from rocmbuild import ui
from rocmbuild.store import differs
from rocmbuild.names import recipe_version, safe_lines, safe_text
from rocmbuild.cli import textlayout
from rocmbuild.cli.statetext import (HISTORY_HEADERS, activation_lines, databases_text, drift_text, history_row,
                                     origin_text, plan_tree, rel)
from rocmbuild.results import (
    ApplyResult,
    BuildPlan,
    BuildResult,
    CacheGcResult,
    CacheVerifyResult,
    CompletionResult,
    DoctorResult,
    DryRunResult,
    ExportResult,
    HistoryResult,
    LockResult,
    RecipesResult,
    RecoverResult,
    RollbackResult,
    ShowResult,
    StatusChanges,
    StatusResult,
    VerifyResult,
    short_txn,
)
from rocmbuild.results.stateresult import dotted

if TYPE_CHECKING:
    from rocmbuild.sources.debarchive import Package


@singledispatch
def text(result: object) -> str:  # a VerbResult
    raise TypeError(f"no renderer for {type(result).__name__}")


@text.register
def _recipes(r: RecipesResult) -> str:
    lines = [line for e in r.recipes
             for line in (f"{e.name:24} {e.description or ('INVALID: ' + e.error if e.error else '')}",
                          f"{'':24} {e.path}")]
    return textlayout.lines(lines) or "no recipes found"


def found_text(f) -> str:
    """``gfx115x fix (in lib/libMIOpen.so.1.0)``: a fix and where it was found (manifest.FoundFix)."""
    return safe_text(f"{f.name} ({f.where()})")


@text.register
def _show(r: ShowResult) -> str:
    fixes = [f"fixes: {'; '.join(r.fixes)}"] + [f"  {safe_text(w)}" for w in r.fixes_where] if r.fixes else []
    fixes += [f"from {package_words(r.package)}"] if r.package else []
    text = textlayout.lines([f"{r.name}: {r.description}", f"file: {r.path}", *fixes]) + "\n" + safe_lines(r.toml)
    if not r.overridden:
        return text
    return (text.rstrip("\n") + "\n\n" + textlayout.lines(["# the command line overrides the file (these are in effect):"]
                                                       + [f"#   {x}" for x in r.overridden]))


def package_words(p: Package) -> str:
    """``Debian package libmiopen1 7.2.4+dfsg-1 (amd64)`` (the architecture is known once fetched)."""
    return f"Debian package {p.name} {p.version} ({p.architecture or 'architecture known once fetched'})"


def ref_words(ref: str | None) -> str:
    """A recipe's ref as a person reads it: none set means the remote's default branch."""
    return ref or "HEAD (the remote's default branch)"


@text.register
def build_plan(plan: BuildPlan) -> str:
    s = plan.source
    lines = [f"plan for {plan.recipe} ({plan.path})"]
    if s.commit or not s.resolved:  # git (a tarball is resolved with no commit)
        lines.append(f"  source   {s.url} @ {ref_words(s.ref)} -> {s.commit or 'UNRESOLVED'}")
    else:
        lines.append(f"  source   {s.url} (archive)")
    if s.subdir:
        lines.append(f"  sparse   {', '.join([s.subdir, *s.sparse])}")
    lines += [f"  cherry-pick {c}" for c in s.cherry_pick]
    lines += [f"  patch    {p}" for p in s.patches]
    if plan.gpu_targets is not None:
        lines.append(f"  GPU_TARGETS {plan.gpu_targets}")
    env = " ".join(f"{k}={v}" for k, v in plan.env.items())
    for step in (s_ for s_ in ("configure", "build", "install") if s_ in plan.commands):
        prefix = ("DESTDIR=" + plan.destdir + " ") if step == "install" else ""
        lines.append(f"  {step:10}{(env + ' ') if env else ''}{prefix}{runner.display(list(plan.commands[step]))}")
    lines.append(f"  cache    {plan.cache_key or '-'}: {fleettext.would(plan)}")
    tools = plan.inputs.tools
    lines.append(f"  tools    {tools.cmake}; {tools.cc}; {tools.cxx}")
    lines += [f"  MISSING  {c.name}: {c.detail}" + (f" ({c.fix})" if c.fix else "") for c in plan.missing]
    lines += [f"  install  {plan.install}"] if plan.install else []
    lines += [f"  skipped  {c.name}: {c.detail}" for c in plan.requirements
              if c.status == "ok" and c.detail.startswith("not needed: ")]
    lines += [f"  note     {n}" for n in plan.notes]
    return textlayout.short_keys(textlayout.lines(lines))  # the key and the paths named after it: 16 digits


@text.register
def _build(r: BuildResult) -> str:
    art, m = r.artifact, r.artifact.manifest
    verb = "cached (no configure, no compile)" if art.cached else "built"
    out = [f"{m.recipe} {m.version or ''} @ {(m.commit or '')[:12]}: {verb}", f"artifact: {art.path}"]
    if r.substituted:
        out.append(origin_text(r.substituted))
    out += [f"  {lib.name}: {' -> '.join(lib.chain)} (SONAME {lib.soname})" for lib in m.libraries]
    if m.package:
        out.append(f"from {package_words(m.package)}")
    if m.fixes:
        out.append(f"fixes: {'; '.join(found_text(f) for f in m.found())}")
    if r.log:
        out.append(f"log: {r.log}")
    return textlayout.lines(out)


# --------------------------------------------------------------------------------------------
# status, verify, doctor


def _loaded(r: StatusResult) -> str:
    t, tv = r.target, r.target.report
    build = f"ROCm {tv.hip}" if tv.hip else (f"CUDA {tv.cuda}" if tv.cuda else "CPU-only (no MIOpen/cuDNN)")
    came = f"from {t.origin}; " if t.origin != "--env" else ""
    lines = [f"target: {t.prefix} ({came}python {t.python}, {tv.python_version})", *activation_lines(t),
             f"torch {tv.torch_version}: {build}; compiled against {dotted(tv.compile_version) or '-'}, "
             f"runtime {dotted(tv.runtime_version) or '-'}, cudnn.version() = "
             + (f"raises {tv.version_error} (then {tv.version_int_retry})" if tv.version_error else str(tv.version_int))]
    for s in r.libraries:
        lib = s.library
        where = "inside the prefix" if s.inside_prefix else "OUTSIDE the prefix"
        links = f" via {', '.join(s.links)}" if s.links else ""
        lines.append(f"  {lib.kind:6} {lib.path}{' (deleted)' if lib.deleted else ''}"
                     f"{' ' + s.version if s.version else ''}: {s.layout}, {where}{links}; "
                     f"device {lib.device} inode {lib.inode}" + (f" sha256 {lib.sha256}" if lib.sha256 else ""))
        lines += [f"    stray {x.path}: {x.why(s.preload)}" for x in s.strays]
    if not r.libraries:
        lines.append("  no libMIOpen/libamdhip64/libcudnn loaded")
    return textlayout.lines(lines)


@text.register
def status_changes(c: StatusChanges, prefix: str | None = None) -> str:
    lines = []
    if c.in_effect:
        lines.append("applies in effect (oldest first; `rollback` undoes the newest):")
    for t in c.in_effect:
        commit = f" @ {t.commit[:12]}" if t.commit else ""
        lines.append(f"  txn {t.id}  {t.verb} {t.recipe or '-'}{commit}: {t.version_before or '?'} -> "
                     f"{t.version_after or '?'}")
        lines.append(f"    {len(t.files)} path(s): " + ", ".join(rel(f, prefix) for f in t.files))
        if t.substituted:
            lines.append(f"    artifact {origin_text(t.substituted)}")
        built = differs.short(t.build if ui.verbosity() > 0 else t.differs)
        if built:
            lines.append(f"    build: {built}")
        if t.package:
            lines.append(f"    from {package_words(t.package)}")
        if t.fixes:
            lines.append(f"    fixes: {'; '.join(found_text(f) for f in t.fixes_found) or '; '.join(t.fixes)}")
        if t.redone_by:
            lines.append(f"    undone once, back in effect by the redo txn {short_txn(t.redone_by)}")
    if c.redo is not None:
        lines.append(f"`rocmbuild redo` would re-apply {', '.join(short_txn(x) for x in c.redo.reapplies)} "
                     f"(undone by the rollback txn {short_txn(c.redo.rollback)})")
    lines += [f"in progress: {u.verb} {u.id} (pid {u.running_pid}, at '{u.state}')" if u.running_pid else
              f"UNFINISHED {u.verb} {u.id} (stopped at '{u.state}'): the next rocmbuild command "
              "that changes this target rolls it back; `rocmbuild recover` does only that" for u in c.unfinished]
    lines += [drift_text(d, prefix) + " (`rocmbuild rollback` refuses without --force)" for d in c.drift]
    lines += [f"UNREADABLE {u.describe()}" + (": rocmbuild changes nothing here until it is dealt with "
              "(`rocmbuild recover` says how)" if u.kind == "journal" else "") for u in c.unreadable]
    return textlayout.lines(lines or ["rocmbuild has changed nothing in this target" if not c.stock else
                                  "no apply by rocmbuild is in effect here"])


@text.register
def _status(r: StatusResult) -> str:
    """The summary line first, then what is loaded, then rocmbuild's changes grouped per transaction."""
    prefix = str(r.target.prefix)
    body = safe_text(r.summary) + "\n" + _loaded(r) + "\n" + status_changes(r.changes, prefix)
    gate = r.drift_check
    if gate is not None and not gate.ok and r.error is None:  # with --check the error says it, once
        body += "\n" + textlayout.lines([f"what to do: {gate.message} (`rocmbuild status --check` and `rocmbuild verify` "
                                     "exit 4 until then)"])
    return textlayout.short_keys(body + databases_text(r.databases))


@text.register
def _verify(r: VerifyResult) -> str:
    came = f" (from {r.target.origin})" if r.target.origin != "--env" else ""
    head = textlayout.lines([f"verified {r.target.prefix}{came}", *activation_lines(r.target)])
    return head + "\n" + r.verdict.render() + databases_text(r.databases)


@text.register
def _doctor(r: DoctorResult) -> str:
    out = "\n".join(c.render() for c in r.checks)
    failed = r.failed
    install = f"\ninstall what is missing: {r.install}" if r.install else ""
    return out + (f"\n{len(failed)} failed{install}" if failed else "\nall checks passed (warnings do not block)")


# --------------------------------------------------------------------------------------------
# export, lock, apply, rollback, history, recover


@text.register
def _cache_verify(r: CacheVerifyResult) -> str:
    lines = []
    for e in r.entries:
        lines.append(f"{e.status:11} {e.kind:8} {e.key[:16]} {e.recipe or '?'} {e.version or ''}".rstrip())
        lines += [f"  {p}" for p in e.problems]
        lines += [f"  quarantined to {e.quarantined_to}"] if e.quarantined_to else []
    bad = sum(e.status != "ok" for e in r.entries)
    lines.append(f"{len(r.entries)} artifact(s) in {r.cache} re-hashed: "
                 + (f"{bad} quarantined" if bad else "all match their manifests"))
    return textlayout.lines(lines)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@text.register
def _cache_gc(r: CacheGcResult) -> str:
    verb = "would remove" if r.dry_run else "removed"
    lines = [f"{verb} {c.kind} {c.path} ({_size(c.bytes)}): {c.reason}" for c in r.removed]
    lines += [f"kept {k.kind} {k.path}: {k.reason}" for k in r.kept]
    lines += [f"note: {n}" for n in r.notes]
    lines.append(f"{len(r.removed)} item(s) {'would be removed' if r.dry_run else 'removed'}, {_size(r.freed_bytes)} "
                 + ("would be freed (dry run: nothing was removed)" if r.dry_run else "freed")
                 + f" (kept: whatever was used in the last {r.keep_days:g} day(s), and what targets use)")
    return textlayout.lines(lines)


@text.register
def _export(r: ExportResult) -> str:
    b = r.bundle
    return textlayout.lines([f"{b.file}", f"{b.sha256}  (also in {b.sha256_file})",
                         f"apply it elsewhere with: rocmbuild apply --artifact {b.file} --env PREFIX"])


@text.register
def _lock(r: LockResult) -> str:
    lk = r.lock
    return textlayout.lines([f"{r.lock_file}: {lk.recipe} @ {ref_words(lk.ref)} -> {lk.commit}",
                         f"rebuild exactly this with: rocmbuild apply --from-lock {r.lock_file}"])


def gpu_arch_line(m) -> str:
    """One line for an ``ArchMatch`` (``gpu_arch``): the verdict and why."""
    word = {"match": "matches", "mismatch": "MISMATCH", "no_gpu": "no AMD GPU", "unchecked": "not checked"}
    return (f"GPU arch: {word.get(m.status, m.status)}: {m.detail}"
            + (" (applied anyway: --allow-other-arch)" if m.allowed else ""))


@text.register
def _apply(r: ApplyResult) -> str:
    p = r.plan
    arch_line = [gpu_arch_line(r.gpu_arch)] if r.gpu_arch is not None else []
    if r.already_applied:
        return textlayout.lines([f"already applied: {p.recipe} ({p.version_after or '?'}) is in place in {p.prefix}; "
                             "nothing changed", *arch_line, *([origin_text(r.substituted)] if r.substituted else [])])
    lines = [f"applied {r.txn}: {p.recipe} {p.version_before or '?'} -> {p.version_after or '?'} "
             f"in {p.prefix} ({p.layout} layout)"]
    lines += [f"  {a.path}" for a in p.pending]
    lines += [f"  note: {n}" for n in p.notes]
    checks = r.verdict.checks if r.verdict else ()
    passed = [c.shown_name for c in checks if c.ok and not c.skipped]
    if passed:
        lines.append(f"verified: {', '.join(passed)}")
    lines += arch_line
    if r.substituted:
        lines.append(origin_text(r.substituted))
    lines.append("undo with: rocmbuild rollback" + (f" --env {p.prefix}" if p.prefix else ""))
    return textlayout.lines(lines)


@text.register
def _dry_run(d: DryRunResult) -> str:
    lines = ["dry run: nothing is fetched, built or changed"]  # each one line, or a block escaped where made
    if d.build is not None:
        lines.append(build_plan(d.build))
    if d.artifact is not None:
        a = d.artifact
        built_for = ", ".join(a.gpu_targets) if a.gpu_targets else "no GPU targets recorded"
        lines.append(safe_text(f"artifact {recipe_version(a.recipe, a.version)} ({a.key[:16]}), built for {built_for}, "
                               "bundle checked"))
    if d.gpu_arch is not None:
        lines.append(safe_text(gpu_arch_line(d.gpu_arch)))
    if d.target_plan is not None:
        lines.append(plan_tree(d.target_plan))
    elif d.target_error is not None:  # the error itself is printed once, on stderr
        lines.append(f"target: the apply would be refused ({type(d.target_error).__name__}); nothing would change")
    elif d.target_note:
        lines.append(safe_text(f"target: {d.target_note}"))
    return textlayout.short_keys("\n".join(lines))


@text.register
def _rollback(r: RollbackResult) -> str:
    p = r.plan
    if p is None:
        return f"nothing to roll back in {r.prefix}: no apply by rocmbuild is in effect"
    if p.redoes:
        head = f"redid {', '.join(r.reapplies) or '-'} (undid the rollback {p.redoes}) as {r.txn}"
    else:
        head = f"rolled back {', '.join(r.undoes)} as {r.txn}"
    out = [f"{head}: {p.version_before or '?'} -> {p.version_after or '?'} in {p.prefix}"]
    out += [f"  {a.path}" for a in p.pending]
    out += [f"  {n}" for n in r.forced_drift]
    warnings = r.warnings
    out.append(f"verified {p.library} ({p.version_after or '?'})" + (
        f" with {len(warnings)} warning(s): " + ", ".join(w.name for w in warnings) if warnings else ""))
    out.append("in effect now: " + (", ".join(short_txn(x) for x in r.in_effect) or "no apply (the stock state)")
               + ("" if p.redoes else "; `rocmbuild redo` re-applies what this undid"))
    return textlayout.lines(out)


@text.register
def _history(h: HistoryResult) -> str:
    """A table at the terminal's width, newest first (a narrow terminal: one block per transaction)."""
    cols = textlayout.width()
    apart = differs.told_apart([(r.line.recipe, r.build) for r in h.transactions],
                               verbose=ui.verbosity() > 0)  # what tells builds of one recipe apart
    rows = [history_row(r, built) for r, built in reversed(list(zip(h.transactions, apart, strict=True)))]
    out = [textlayout.wrap(safe_text(f"history of {h.prefix} (newest first)"), cols)]
    out += [textlayout.wrap(safe_text(f"this state was {o.relation} from {o.source} ({o.state_dir}): its "
                                  "transactions ran there; rollback and recover act on this prefix only"), cols)
            for o in h.origins]
    table = textlayout.table(HISTORY_HEADERS, rows, cols) if rows else None
    if table is not None:
        out.append(table)
    else:
        out += [textlayout.wrap("  ".join(textlayout.cell_text(c, ", ") for c in row), cols, "  ") for row in rows]
    if not h.transactions:
        out.append("  no transactions" + (" that can be read" if h.unreadable else ""))
    shown = len(h.transactions)
    total = shown if h.total is None else h.total
    if total > shown:
        out.append(textlayout.wrap(f"the newest {shown} of {total} transactions (--limit {h.limit}); "
                               "`rollback --to` takes a txn number", cols))
    out += [textlayout.wrap(safe_text(f"in progress: {u.id} {u.verb} (pid {u.running_pid})" if u.running_pid else
                                  f"UNFINISHED {u.id} {u.verb} (stopped at '{u.state}'): run `rocmbuild recover`"), cols)
            for u in h.unfinished]
    out += [textlayout.wrap(safe_text(f"UNREADABLE {u.describe()}"), cols) for u in h.unreadable]
    out.append(textlayout.wrap(f"backups hold {_size(h.backup_bytes)} on disk that nothing else keeps alive "
                           "(backups hardlinked to files still in use cost nothing)", cols))
    return textlayout.short_keys("\n".join(out))


@text.register
def _recover(r: RecoverResult) -> str:
    if not r.recovered:
        return f"nothing to recover in {r.prefix}"
    return textlayout.lines(f"recovered {e.verb} {e.id} (stopped at '{e.interrupted_at}'): rolled back"
                        + ("" if e.restored.ok else " -- WARNING: the old state did not verify")
                        for e in r.recovered)


@text.register
def _completion(r: CompletionResult) -> str:
    return r.script.rstrip("\n")


from rocmbuild.cli import cachetext, checktext, demotext, fleettext  # noqa: E402  more verbs' text lives beside this file

for _type, _fn in (*fleettext.RENDERERS, *cachetext.RENDERERS, *checktext.RENDERERS, *demotext.RENDERERS):
    text.register(_type, _fn)
