#!/usr/bin/env bash
# provision.sh -- apply a MIOpen build to one PyTorch environment, unattended.
#
# Made for cloud-init (runcmd / per-boot scripts), systemd oneshot units and image builds.
# It is idempotent: rocmbuild's apply is a fast no-op (exit 0) when the environment already has
# exactly this build, so run it on every boot.
#
# Configuration (environment variables):
#   ROCMBUILD_ENV       required  the target prefix: a conda env or venv (e.g. /opt/conda/envs/yolo)
#   ROCMBUILD_ARTIFACT  optional  an artifact bundle (FILE or https URL) from `rocmbuild export`;
#                                 when set, it is applied as is: no compiler or source needed
#   ROCMBUILD_RECIPE    optional  recipe name or .toml path, used when ROCMBUILD_ARTIFACT is unset
#                                 (default: miopen-3.5.1); builds on this machine (cached)
#   ROCMBUILD_BIN       optional  the rocmbuild executable (default: rocmbuild on PATH)
#   ROCMBUILD_LOG       optional  append this script's log lines and rocmbuild's stderr to this
#                                 file (default: stderr only)
#   PYTHON              optional  the python3 used to read rocmbuild's JSON (default: python3)
#
# Output: progress and rocmbuild's human text on stderr (and in ROCMBUILD_LOG); exactly one
# summary line on stdout, read from rocmbuild's JSON: "changed" (a transaction swapped the library:
# its id and the versions before -> after) or "unchanged" (already applied: no transaction, the
# version in effect):
#   rocmbuild: ok apply changed env=/opt/conda/envs/yolo source=artifact:/srv/miopen.tar.gz txn=0001-20261129T235716Z version=3.5.0->3.5.1 exit=0
#   rocmbuild: ok apply unchanged env=/opt/conda/envs/yolo source=artifact:/srv/miopen.tar.gz txn=none version=3.5.1 exit=0
#   rocmbuild: failed apply env=/opt/conda/envs/yolo source=artifact:/srv/miopen.tar.gz exit=4 error=...
# Exit status: rocmbuild's own exit code -- 0 ok (also "already applied"), 1 internal error,
# 2 bad input (nothing changed), 3 fetch/build failed (target untouched), 4 verification failed
# (rolled back), 5 target locked by another run. A missing setting is exit 2.
#
# rocmbuild's JSON is parsed with python3's json module; nothing it prints is ever evaluated.

set -euo pipefail

ROCMBUILD_BIN="${ROCMBUILD_BIN:-rocmbuild}"
ROCMBUILD_RECIPE="${ROCMBUILD_RECIPE:-miopen-3.5.1}"
ROCMBUILD_ARTIFACT="${ROCMBUILD_ARTIFACT:-}"
ROCMBUILD_ENV="${ROCMBUILD_ENV:-}"
ROCMBUILD_LOG="${ROCMBUILD_LOG:-}"
PYTHON="${PYTHON:-python3}"

log() {
    local line
    line="$(date -u +%Y-%m-%dT%H:%M:%SZ) provision: $*"
    printf '%s\n' "$line" >&2
    if [ -n "$ROCMBUILD_LOG" ]; then
        printf '%s\n' "$line" >>"$ROCMBUILD_LOG"
    fi
}

die() {  # die CODE MESSAGE: a summary line on stdout, the reason in the log
    local code="$1"
    shift
    log "error: $*"
    printf 'rocmbuild: failed setup exit=%s error=%s\n' "$code" "$*"
    exit "$code"
}

if [ -z "$ROCMBUILD_ENV" ]; then
    die 2 "ROCMBUILD_ENV is not set (the conda env or venv prefix to change)"
fi
if ! command -v "$ROCMBUILD_BIN" >/dev/null 2>&1; then
    die 2 "rocmbuild executable not found: $ROCMBUILD_BIN (set ROCMBUILD_BIN)"
fi
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    die 2 "python3 not found: $PYTHON (set PYTHON)"
fi

# The command, as an argv array: no string is ever re-parsed by the shell.
if [ -n "$ROCMBUILD_ARTIFACT" ]; then
    source_desc="artifact:$ROCMBUILD_ARTIFACT"
    cmd=("$ROCMBUILD_BIN" apply --artifact "$ROCMBUILD_ARTIFACT" --env "$ROCMBUILD_ENV" --json)
else
    source_desc="recipe:$ROCMBUILD_RECIPE"
    cmd=("$ROCMBUILD_BIN" apply "$ROCMBUILD_RECIPE" --env "$ROCMBUILD_ENV" --json)
fi

out="$(mktemp "${TMPDIR:-/tmp}/rocmbuild-provision.XXXXXX")"
trap 'rm -f "$out"' EXIT

log "running: ${cmd[*]}"
rc=0
if [ -n "$ROCMBUILD_LOG" ]; then
    # stderr (human text, progress) goes to the terminal and the log; stdout is the JSON.
    "${cmd[@]}" >"$out" 2> >(tee -a "$ROCMBUILD_LOG" >&2) || rc=$?
else
    "${cmd[@]}" >"$out" || rc=$?
fi

# Read the one JSON object: ok, verb, exit_code, on failure error.message / error.hint, and on
# success already_applied, txn and plan.version_before / plan.version_after.
# Prints the fields separated by ASCII unit separators (0x1f: not whitespace, so empty fields
# survive `read`); output that is not one JSON object yields "parse-error".
US=$'\x1f'
summary="$("$PYTHON" -c '
import json, sys
def clean(v):
    return " ".join(str(v).replace("\x1f", " ").split())
try:
    with open(sys.argv[1], encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
except (OSError, ValueError) as exc:
    print("\x1f".join(["parse-error", "", "", clean(exc), "", "", "", "", ""]))
    sys.exit(0)
err = data.get("error") or {}
if not isinstance(err, dict):
    err = {"message": err}
plan = data.get("plan") if isinstance(data.get("plan"), dict) else {}
print("\x1f".join([
    "true" if data.get("ok") is True else "false",
    clean(data.get("verb", "")),
    clean(data.get("exit_code", "")),
    clean(err.get("message", "")),
    clean(err.get("hint", "")),
    "unchanged" if data.get("already_applied") is True else "changed",
    clean(data.get("txn") or "none"),
    clean(plan.get("version_before") or "?"),
    clean(plan.get("version_after") or "?"),
]))
' "$out")" || summary="parse-error${US}${US}${US}python3 failed${US}"

IFS="$US" read -r ok verb json_code message hint change txn v_before v_after <<<"$summary" || true

if [ "$ok" = "parse-error" ]; then
    log "could not read rocmbuild's JSON output: ${message}"
    if [ "$rc" -eq 0 ]; then
        rc=1  # exit 0 without a result we can read is not a success we can vouch for
    fi
    printf 'rocmbuild: failed apply env=%s source=%s exit=%s error=%s\n' \
        "$ROCMBUILD_ENV" "$source_desc" "$rc" "unreadable JSON output"
    exit "$rc"
fi

if [ -n "$json_code" ] && [ "$json_code" != "$rc" ]; then
    log "warning: JSON exit_code=$json_code but the process exited $rc; using $rc"
fi

if [ "$rc" -eq 0 ]; then
    if [ "$ok" != "true" ]; then
        log "warning: exit status 0 but \"ok\" is not true in the JSON"
    fi
    if [ "$change" = "unchanged" ]; then
        version="$v_after"
    else
        version="${v_before}->${v_after}"
    fi
    log "done: ${verb:-apply} succeeded ($change, txn $txn, version $version)"
    printf 'rocmbuild: ok %s %s env=%s source=%s txn=%s version=%s exit=0\n' \
        "${verb:-apply}" "$change" "$ROCMBUILD_ENV" "$source_desc" "$txn" "$version"
    exit 0
fi

log "failed (exit $rc): ${message:-no message}"
if [ -n "$hint" ]; then
    log "hint: $hint"
fi
printf 'rocmbuild: failed %s env=%s source=%s exit=%s error=%s\n' \
    "${verb:-apply}" "$ROCMBUILD_ENV" "$source_desc" "$rc" "${message:-unknown}"
exit "$rc"
