#!/usr/bin/env bash
# ensure-acme-bed.sh - provide the ACME test bed's binaries without a
# container runtime: Pebble (Let's Encrypt's test CA, built from the Go
# module proxy) and BIND 9 (named, nsupdate, tsig-keygen: extracted from
# Debian's packages, never installed as a service).
#
# Usage:
#   export CERTHUB_ACME_BED="$(./ensure-acme-bed.sh [CACHE_DIR])"
#
#   CACHE_DIR  default: $ACME_BED_CACHE_DIR, else
#              ${XDG_CACHE_HOME:-$HOME/.cache}/certhub-acme-bed.
#
# stdout: exactly one line, the bed directory. It holds
#   bin/pebble                      the CA (go install of PEBBLE_VERSION)
#   bin/named, bin/nsupdate, bin/tsig-keygen, bin/dig
#                                   wrappers that run BIND from root/ with its
#                                   libraries on LD_LIBRARY_PATH
#   pebble/                         the module's test certificates (the HTTPS
#                                   listener's localhost cert and its minica root)
# Progress and errors: stderr. Exit status: 0 on success, non-zero with an
# "ERROR:" line on any failure.
#
# Environment:
#   PEBBLE_VERSION   default v2.10.3 (the version reference/acme.md proved)
#   BIND_PACKAGES    Debian packages extracted (default: bind9 and what named
#                    loads that a minimal Debian 12 lacks)
#
# Idempotent: a second run only checks a stamp (milliseconds). Concurrent runs
# serialise on CACHE_DIR/.lock. Nothing is started and nothing is installed
# system-wide; `apt-get update` runs only when the package lists are missing.

set -euo pipefail

readonly RECIPE_REVISION=1

log() { printf 'ensure-acme-bed: %s\n' "$*" >&2; }
die() { printf 'ensure-acme-bed: ERROR: %s\n' "$*" >&2; exit 1; }

case "${1:-}" in
  -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
esac

PEBBLE_VERSION="${PEBBLE_VERSION:-v2.10.3}"
BIND_PACKAGES="${BIND_PACKAGES:-bind9 bind9-libs bind9-utils bind9-dnsutils bind9-host libuv1 liburcu8 libjemalloc2 libfstrm0 libprotobuf-c1 liblmdb0 libmaxminddb0 libxdp1 libbpf1 libnghttp2-14 libjson-c5 libxml2 libcap2 libicu72 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libssl3 libedit2 libidn2-0 libbsd0 libmd0}"
CACHE_DIR="${1:-${ACME_BED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/certhub-acme-bed}}"
[[ "$CACHE_DIR" == /* ]] || CACHE_DIR="$PWD/$CACHE_DIR"
BED="$CACHE_DIR/bed"
STAMP="$BED/.stamp"

command -v go >/dev/null 2>&1 || die "'go' not found in PATH"
command -v flock >/dev/null 2>&1 || die "'flock' not found (Debian: apt-get install util-linux)"
command -v apt-get >/dev/null 2>&1 || die "'apt-get' not found: BIND comes from Debian packages"
command -v dpkg-deb >/dev/null 2>&1 || die "'dpkg-deb' not found"

stamp_content() { echo "recipe=$RECIPE_REVISION pebble=$PEBBLE_VERSION packages=$BIND_PACKAGES"; }

bed_ok() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(stamp_content)" ]] || return 1
  local b
  for b in pebble named nsupdate tsig-keygen dig; do [[ -x "$BED/bin/$b" ]] || return 1; done
}

if bed_ok; then log "up to date: $BED"; echo "$BED"; exit 0; fi

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.lock"
flock -w 1800 9 || die "timed out waiting for $CACHE_DIR/.lock"
if bed_ok; then log "up to date: $BED"; echo "$BED"; exit 0; fi

WORK="$(mktemp -d "$CACHE_DIR/.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/bin" "$WORK/root" "$WORK/debs" "$WORK/pebble"

log "pebble $PEBBLE_VERSION: go install"
start=$SECONDS
GOBIN="$WORK/bin" GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
  go install "github.com/letsencrypt/pebble/v2/cmd/pebble@$PEBBLE_VERSION" >&2 \
  || die "go install github.com/letsencrypt/pebble/v2/cmd/pebble@$PEBBLE_VERSION failed"
log "pebble: ok ($((SECONDS - start))s)"
moddir="$(cd "$WORK" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "github.com/letsencrypt/pebble/v2@$PEBBLE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
[[ -d "$moddir/test/certs" ]] || die "pebble's test certificates not found in the module cache ($moddir)"
cp "$moddir/test/certs/pebble.minica.pem" "$WORK/pebble/"
cp "$moddir/test/certs/localhost/cert.pem" "$WORK/pebble/localhost-cert.pem"
cp "$moddir/test/certs/localhost/key.pem" "$WORK/pebble/localhost-key.pem"

log "BIND: apt-get download $BIND_PACKAGES"
if ! apt-cache show bind9 >/dev/null 2>&1; then
  log "no Debian package lists: apt-get update"
  apt-get update >&2 || die "apt-get update failed (root needed, or run it once by hand)"
fi
(cd "$WORK/debs" && apt-get download $BIND_PACKAGES >&2) || die "apt-get download failed"
for deb in "$WORK"/debs/*.deb; do dpkg-deb -x "$deb" "$WORK/root"; done
named="$(find "$WORK/root" -name named -type f -path '*sbin*' | head -n1)"
[[ -n "$named" ]] || die "named not found in the extracted packages"

libpath="$(find "$WORK/root" -name '*.so*' -printf '%h\n' | sort -u | sed "s#^$WORK#$BED#" | paste -sd:)"
wrap() {   # wrap NAME PATH-IN-ROOT
  cat >"$WORK/bin/$1" <<EOF
#!/bin/sh
# $1 from Debian's packages, extracted by hack/ensure-acme-bed.sh
LD_LIBRARY_PATH="$libpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$BED/root/$2" "\$@"
EOF
  chmod +x "$WORK/bin/$1"
}
wrap named "${named#"$WORK/root/"}"
for tool in nsupdate tsig-keygen dig; do
  p="$(find "$WORK/root" -name "$tool" \( -type f -o -type l \) | head -n1)"
  [[ -n "$p" ]] || die "$tool not found in the extracted packages"
  wrap "$tool" "${p#"$WORK/root/"}"
done
stamp_content >"$WORK/.stamp"
rm -rf "$WORK/debs" "$BED"
mv "$WORK" "$BED"
trap - EXIT
"$BED/bin/named" -v >&2 || die "named does not run: $BED/bin/named -v"
"$BED/bin/pebble" -version >&2 2>/dev/null || true
log "ready: $BED"
echo "$BED"
