#!/usr/bin/env bash
# provision.sh -- put a MIOpen build into one PyTorch environment, unattended (cloud-init runcmd,
# a systemd oneshot unit, an image build). Idempotent: an environment that already has exactly this
# build is a fast no-op (exit 0), so run it on every boot.
#
# Fleet use: one builder builds and pushes, signed (`rocmbuild build R; rocmbuild push R --to URL
# --sign-key FILE`); every other machine runs this script with the cache URL and the builder's
# public key, gets the signed artifact from the cache and compiles nothing (docs/caches.md).
#
#   ROCMBUILD_ENV           required  the target prefix: a conda env or venv (e.g. /opt/conda/envs/yolo)
#   ROCMBUILD_RECIPE        optional  recipe name or .toml path (default: miopen-3.5.1)
#   ROCMBUILD_CACHE_URL     optional  the binary cache: oci://HOST[:PORT]/REPO, file:///DIR or https://HOST/PATH
#   ROCMBUILD_PUBLIC_KEY    optional  the builder's public key, NAME:BASE64 (required with ROCMBUILD_CACHE_URL)
#   ROCMBUILD_CONFIG        optional  the config file the two are written to, replaced whole when it
#                                     differs (default: /etc/rocmbuild/config.toml); rocmbuild reads it
#   ROCMBUILD_REQUIRE_CACHE optional  1: never compile here; an artifact the cache lacks is exit 3
#   ROCMBUILD_ARTIFACT      optional  a bundle (FILE or URL) from `rocmbuild export`, applied instead of the recipe
#   ROCMBUILD_BIN           optional  the rocmbuild executable (default: rocmbuild on PATH)
#   ROCMBUILD_LOG           optional  also append the log lines and rocmbuild's stderr to this file
#   PYTHON                  optional  the python3 that reads rocmbuild's JSON (default: python3)
#
# stdout: one summary line, from rocmbuild's JSON ("changed": did this run change the environment):
#   rocmbuild: ok apply changed env=/opt/conda/envs/yolo source=recipe:miopen-3.5.1 txn=0001-20261129T235716Z version=3.5.0->3.5.1 exit=0
#   rocmbuild: ok apply unchanged env=/opt/conda/envs/yolo source=recipe:miopen-3.5.1 txn=none version=3.5.1 exit=0
#   rocmbuild: failed apply env=/opt/conda/envs/yolo source=recipe:miopen-3.5.1 exit=4 error=...
# Exit status: rocmbuild's own (0 ok, also already applied; 2 bad input, nothing changed; 3 fetch
# or build failed, target untouched; 4 verification failed, rolled back; 5 target locked); a
# missing or malformed setting is 2. Nothing rocmbuild prints is ever evaluated.
set -euo pipefail

BIN="${ROCMBUILD_BIN:-rocmbuild}"
RECIPE="${ROCMBUILD_RECIPE:-miopen-3.5.1}"
TARGET="${ROCMBUILD_ENV:-}"
LOG="${ROCMBUILD_LOG:-/dev/null}"

log() { printf '%s provision: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" | tee -a "$LOG" >&2; }
die() { log "error: $2"; printf 'rocmbuild: failed setup exit=%s error=%s\n' "$1" "$2"; exit "$1"; }

[ -n "$TARGET" ] || die 2 "ROCMBUILD_ENV is not set (the conda env or venv prefix to change)"
command -v "$BIN" >/dev/null 2>&1 || die 2 "rocmbuild executable not found: $BIN (set ROCMBUILD_BIN)"

# The cache and the key it must be signed with, as rocmbuild's config (docs/caches.md): written
# (temp file, then rename) only when it differs, so an unchanged boot touches nothing.
if [ -n "${ROCMBUILD_CACHE_URL:-}" ]; then
    url="$ROCMBUILD_CACHE_URL" key="${ROCMBUILD_PUBLIC_KEY:-}"
    [[ "$url" =~ ^(oci|file|https?)://[^[:space:]\"\\]+$ ]] || die 2 "ROCMBUILD_CACHE_URL is not a cache URL: $url"
    [[ "$key" =~ ^[A-Za-z0-9._-]+:[A-Za-z0-9+/]+=*$ ]] || die 2 "ROCMBUILD_PUBLIC_KEY must be NAME:BASE64 (from \`rocmbuild key generate\`)"
    export ROCMBUILD_CONFIG="${ROCMBUILD_CONFIG:-/etc/rocmbuild/config.toml}"
    want="$(printf '# written by provision.sh: the fleet cache and the key its artifacts must be signed with\n[[caches]]\nurl = "%s"\n\n[trust]\npublic_keys = ["%s"]\n' "$url" "$key")"
    if [ "$(cat "$ROCMBUILD_CONFIG" 2>/dev/null)" != "$want" ]; then
        mkdir -p "$(dirname "$ROCMBUILD_CONFIG")"
        tmp="$(mktemp "$ROCMBUILD_CONFIG.XXXXXX")"
        printf '%s\n' "$want" >"$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$ROCMBUILD_CONFIG"
        log "wrote $ROCMBUILD_CONFIG (cache $url, trusting ${key%%:*})"
    fi
fi

# The command, as an argv array: no string is ever re-parsed by the shell.
if [ -n "${ROCMBUILD_ARTIFACT:-}" ]; then
    source_desc="artifact:$ROCMBUILD_ARTIFACT" cmd=("$BIN" apply --artifact "$ROCMBUILD_ARTIFACT")
else
    source_desc="recipe:$RECIPE" cmd=("$BIN" apply "$RECIPE")
fi
cmd+=(--env "$TARGET" --json)
if [ "${ROCMBUILD_REQUIRE_CACHE:-0}" = 1 ]; then cmd+=(--require-cache); fi

log "running: ${cmd[*]}"
rc=0
out="$("${cmd[@]}" 2> >(tee -a "$LOG" >&2))" || rc=$?

# The fields of the one JSON object, one per line (empty stdout: the process was killed).
fields="$(printf '%s' "$out" | "${PYTHON:-python3}" -c '
import json, sys
d = json.load(sys.stdin); p = d.get("plan") or {}; e = d.get("error") or {}
for v in (d.get("changed"), d.get("txn") or "none", p.get("version_before") or "?", p.get("version_after") or "?", e.get("message", "")):
    print(" ".join(str(v).split()))
' 2>/dev/null)" || fields=""
{ read -r changed; read -r txn; read -r before; read -r after; read -r message; } <<<"$fields" || true

if [ "$rc" -eq 0 ] && [ "${changed:-}" = True ]; then
    log "done: changed (txn $txn, $before -> $after)"
    echo "rocmbuild: ok apply changed env=$TARGET source=$source_desc txn=$txn version=$before->$after exit=0"
elif [ "$rc" -eq 0 ] && [ "${changed:-}" = False ]; then
    log "done: unchanged ($after already in place)"
    echo "rocmbuild: ok apply unchanged env=$TARGET source=$source_desc txn=none version=$after exit=0"
else
    [ "$rc" -ne 0 ] || rc=1  # exit 0 without a result we can read is not a success we can vouch for
    log "failed (exit $rc): ${message:-no readable JSON result}"
    echo "rocmbuild: failed apply env=$TARGET source=$source_desc exit=$rc error=${message:-unreadable JSON output}"
fi
exit "$rc"
