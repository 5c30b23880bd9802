#!/usr/bin/env bash
# ensure-step-ca.sh - provide step-ca, smallstep's online CA, built from the
# Go module proxy (github.com/smallstep/certificates/cmd/step-ca) with
# CGO_ENABLED=0 (no YubiKey/PKCS#11 support, which the test bed does not
# need), for the delegated-issuance tiers (issue 59): an intermediate whose
# key only step-ca holds.
#
# Usage:
#   export CERTHUB_STEP_CA="$(./ensure-step-ca.sh [CACHE_DIR])"
#
#   CACHE_DIR  default: $STEP_CA_CACHE_DIR, else
#              ${XDG_CACHE_HOME:-$HOME/.cache}/certhub-step-ca.
#
# stdout: exactly one line, the step-ca binary. Progress and errors: stderr.
#
# Environment:
#   STEP_CA_VERSION  default v0.30.2 (../shared/reference/fleet-realities.md)
#
# Idempotent: a second run only checks a stamp. Concurrent runs serialise on
# CACHE_DIR/.lock. Nothing is started and nothing is installed system-wide.

set -euo pipefail

readonly RECIPE_REVISION=1

log() { printf 'ensure-step-ca: %s\n' "$*" >&2; }
die() { printf 'ensure-step-ca: ERROR: %s\n' "$*" >&2; exit 1; }

case "${1:-}" in
  -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
esac

STEP_CA_VERSION="${STEP_CA_VERSION:-v0.30.2}"
CACHE_DIR="${1:-${STEP_CA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/certhub-step-ca}}"
[[ "$CACHE_DIR" == /* ]] || CACHE_DIR="$PWD/$CACHE_DIR"
BIN="$CACHE_DIR/bin/step-ca"
STAMP="$CACHE_DIR/bin/.stamp"

command -v go >/dev/null 2>&1 || die "'go' not found in PATH"
command -v flock >/dev/null 2>&1 || die "'flock' not found (Debian: apt-get install util-linux)"

stamp_content() { echo "recipe=$RECIPE_REVISION step-ca=$STEP_CA_VERSION"; }
ok() { [[ -x "$BIN" && -f "$STAMP" && "$(cat "$STAMP")" == "$(stamp_content)" ]]; }

if ok; then log "up to date: $BIN"; echo "$BIN"; exit 0; fi

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.lock"
flock -w 1800 9 || die "timed out waiting for $CACHE_DIR/.lock"
if ok; then log "up to date: $BIN"; echo "$BIN"; exit 0; fi

WORK="$(mktemp -d "$CACHE_DIR/.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
log "step-ca $STEP_CA_VERSION: go install (about 2-3 minutes on 2 cores with a warm module cache)"
start=$SECONDS
GOBIN="$WORK" GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
  go install "github.com/smallstep/certificates/cmd/step-ca@$STEP_CA_VERSION" >&2 \
  || die "go install github.com/smallstep/certificates/cmd/step-ca@$STEP_CA_VERSION failed"
"$WORK/step-ca" version >&2 || die "the built step-ca does not run"
mkdir -p "$CACHE_DIR/bin"
mv "$WORK/step-ca" "$BIN"
stamp_content > "$STAMP"
log "step-ca: ok ($((SECONDS - start))s): $BIN"
echo "$BIN"
