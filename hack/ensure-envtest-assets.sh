#!/usr/bin/env bash
# ensure-envtest-assets.sh - build the controller-runtime envtest binaries
# (kube-apiserver, etcd, kubectl) from Go modules, for machines that can reach
# the Go module proxy but not setup-envtest's download sites.
#
# Usage:
#   export KUBEBUILDER_ASSETS="$(./ensure-envtest-assets.sh [CACHE_DIR])"
#
#   CACHE_DIR  where built assets are kept (default: $ENVTEST_CACHE_DIR, else
#              ${XDG_CACHE_HOME:-$HOME/.cache}/envtest-assets).
#              Binaries land in CACHE_DIR/k8s/<X.Y.Z>-<goos>-<goarch>/ (the same
#              layout setup-envtest uses).
#
# stdout: exactly one line, the assets directory. Progress and errors: stderr.
# Exit status: 0 on success, non-zero with an "ERROR:" line on any failure.
#
# Environment:
#   ENVTEST_K8S_VERSION   Kubernetes version to build (default: the pin in
#                         test/fixture/testbed/envtest.version, which the test bed
#                         reads too). The pinned go.mod/go.sum in
#                         hack/envtest-assets/ is used when it matches; any other
#                         version gets a generated go.mod (+ `go mod tidy`, needs
#                         the module proxy and sumdb via it).
#   ENVTEST_WITH_KUBECTL  1 (default) to also build kubectl, 0 to skip it.
#   ENVTEST_LOCK_TIMEOUT  seconds to wait for a concurrent run's lock (default 3600).
#   GOCACHE, GOMODCACHE, GOPROXY, GOTOOLCHAIN are honoured as usual.
#
# Idempotent: a second run with the same inputs only checks a stamp file
# (milliseconds). Concurrent runs serialise on CACHE_DIR/.lock (flock).
# The build happens in a temp dir and is moved into place only after each
# binary has passed a --version check, so a failed/killed run never leaves a
# half-populated assets dir behind.

set -euo pipefail

readonly RECIPE_REVISION=1   # bump to force rebuilds when this script's build logic changes

log() { printf 'ensure-envtest-assets: %s\n' "$*" >&2; }
die() { printf 'ensure-envtest-assets: ERROR: %s\n' "$*" >&2; exit 1; }

case "${1:-}" in
  -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
esac

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PINNED_DIR="$SCRIPT_DIR/envtest-assets"
VERSION_FILE="$SCRIPT_DIR/../test/fixture/testbed/envtest.version"
[[ -f "$VERSION_FILE" ]] || die "version pin $VERSION_FILE not found"
DEFAULT_K8S_VERSION="$(tr -d '[:space:]' <"$VERSION_FILE")"

K8S_VERSION="${ENVTEST_K8S_VERSION:-$DEFAULT_K8S_VERSION}"
WITH_KUBECTL="${ENVTEST_WITH_KUBECTL:-1}"
LOCK_TIMEOUT="${ENVTEST_LOCK_TIMEOUT:-3600}"
CACHE_DIR="${1:-${ENVTEST_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/envtest-assets}}"
[[ -n "$CACHE_DIR" ]] || die "empty cache dir"
[[ "$CACHE_DIR" == /* ]] || CACHE_DIR="$PWD/$CACHE_DIR"   # the build cds elsewhere

[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] \
  || die "ENVTEST_K8S_VERSION must look like v1.36.3 (got '$K8S_VERSION')"
K8S_MINOR="${BASH_REMATCH[1]}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"     # k8s.io/api etc. use v0.Y.Z for k8s v1.Y.Z
[[ "$WITH_KUBECTL" == 0 || "$WITH_KUBECTL" == 1 ]] || die "ENVTEST_WITH_KUBECTL must be 0 or 1"

command -v go >/dev/null 2>&1 || die "'go' not found in PATH (need Go >= 1.26 for Kubernetes >= 1.36)"
command -v flock >/dev/null 2>&1 || die "'flock' not found (Debian: apt-get install util-linux)"
command -v sha256sum >/dev/null 2>&1 || die "'sha256sum' not found (Debian: apt-get install coreutils)"

GOOS_="$(go env GOOS)" || die "'go env' failed"
GOARCH_="$(go env GOARCH)"
ASSETS_DIR="$CACHE_DIR/k8s/${K8S_VERSION#v}-$GOOS_-$GOARCH_"
STAMP_NAME=".envtest-assets.stamp"

BINARIES=(kube-apiserver etcd)
[[ "$WITH_KUBECTL" == 1 ]] && BINARIES+=(kubectl)

pinned_matches() {
  [[ -f "$PINNED_DIR/go.mod" && -f "$PINNED_DIR/go.sum" ]] &&
    grep -Eq "^[[:space:]]*(require[[:space:]]+)?k8s\.io/kubernetes[[:space:]]+${K8S_VERSION//./\\.}([[:space:]]|$)" "$PINNED_DIR/go.mod"
}

# Everything that influences the output goes into the stamp.
stamp_content() {
  {
    echo "recipe=$RECIPE_REVISION k8s=$K8S_VERSION kubectl=$WITH_KUBECTL goos=$GOOS_ goarch=$GOARCH_"
    if pinned_matches; then sha256sum "$PINNED_DIR/go.mod" "$PINNED_DIR/go.sum" | cut -d' ' -f1; else echo generated; fi
  }
}

assets_ok() {
  [[ -f "$ASSETS_DIR/$STAMP_NAME" ]] || return 1
  [[ "$(cat "$ASSETS_DIR/$STAMP_NAME")" == "$(stamp_content)" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$ASSETS_DIR/$b" ]] || return 1; done
  return 0
}

# Fast path, no lock.
if assets_ok; then
  log "up to date: $ASSETS_DIR"
  echo "$ASSETS_DIR"
  exit 0
fi

mkdir -p "$CACHE_DIR" || die "cannot create cache dir $CACHE_DIR"
exec 9>"$CACHE_DIR/.lock" || die "cannot open lock file $CACHE_DIR/.lock"
log "waiting for lock $CACHE_DIR/.lock (timeout ${LOCK_TIMEOUT}s)"
flock -w "$LOCK_TIMEOUT" 9 || die "timed out after ${LOCK_TIMEOUT}s waiting for $CACHE_DIR/.lock (another build running?)"

if assets_ok; then   # someone else built it while we waited
  log "up to date: $ASSETS_DIR"
  echo "$ASSETS_DIR"
  exit 0
fi

WORK="$(mktemp -d "$CACHE_DIR/.build.XXXXXX")" || die "mktemp failed in $CACHE_DIR"
LOG_DIR="$CACHE_DIR/logs"
mkdir -p "$LOG_DIR"
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT

# Isolate the build from the caller's project: no workspace, no vendor mode,
# no VCS stamping (WORK may sit inside a git checkout), static binaries.
export GOWORK=off GO111MODULE=on CGO_ENABLED=0
export GOFLAGS="-buildvcs=false"

run_logged() {   # run_logged NAME cmd...   (full output kept in $LOG_DIR/NAME.log)
  local name="$1"; shift
  local lf="$LOG_DIR/$name.log"
  local start=$SECONDS
  log "$name: $*"
  if ! "$@" >"$lf" 2>&1; then
    echo "----- last 40 lines of $lf -----" >&2
    tail -n 40 "$lf" >&2
    echo "-----" >&2
    die "$name failed after $((SECONDS - start))s (full log: $lf)"
  fi
  log "$name: ok ($((SECONDS - start))s)"
}

mkdir -p "$WORK/mod" "$WORK/bin"
if pinned_matches; then
  log "using pinned module files from $PINNED_DIR (k8s $K8S_VERSION)"
  cp "$PINNED_DIR/go.mod" "$PINNED_DIR/go.sum" "$WORK/mod/"
  export GOFLAGS="$GOFLAGS -mod=readonly"
else
  log "no pinned go.mod for $K8S_VERSION; generating one (replace every k8s.io staging module with $STAGING_VERSION)"
  # stub go.mod so that a go.mod/go.work of an enclosing project is never consulted
  printf 'module envtest-assets\n' >"$WORK/mod/go.mod"
  json="$(cd "$WORK/mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>&1)" \
    || die "cannot download k8s.io/kubernetes@$K8S_VERSION from the module proxy: $json"
  kmod="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$kmod" ]] || die "could not locate go.mod of k8s.io/kubernetes@$K8S_VERSION (go mod download said: $json)"
  godirective="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kmod" | head -n1)"
  godebug="$(sed -n 's/^godebug \(.*\)$/\1/p' "$kmod" | head -n1)"
  mapfile -t staging < <(sed -n 's/^[[:space:]]*\(k8s\.io\/[A-Za-z0-9._-]*\) v0\.0\.0$/\1/p' "$kmod" | sort -u)
  ((${#staging[@]} > 0)) || die "found no k8s.io staging requirements (v0.0.0) in $kmod - unexpected go.mod layout"
  {
    echo "module envtest-assets"
    echo
    echo "go ${godirective:-1.26.0}"
    [[ -n "$godebug" ]] && { echo; echo "godebug $godebug"; }
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for m in "${staging[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION"; done
    echo ")"
    echo
    echo "tool ("
    printf '\t%s\n' go.etcd.io/etcd/server/v3 k8s.io/kubernetes/cmd/kube-apiserver
    [[ "$WITH_KUBECTL" == 1 ]] && printf '\t%s\n' k8s.io/kubernetes/cmd/kubectl
    echo ")"
  } >"$WORK/mod/go.mod"
  (cd "$WORK/mod" && run_logged "go-mod-tidy-$K8S_VERSION" go mod tidy)
  export GOFLAGS="$GOFLAGS -mod=readonly"
fi

# Fail early with a clear message if the local Go is too old and may not switch.
need_go="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$WORK/mod/go.mod" | head -n1)"
have_go="$(go env GOVERSION)"; have_go="${have_go#go}"
if [[ -n "$need_go" ]] && [[ "$(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -n1)" != "$need_go" ]]; then
  case "$(go env GOTOOLCHAIN)" in
    local*) die "Kubernetes $K8S_VERSION needs Go >= $need_go but this is Go $have_go and GOTOOLCHAIN=local" ;;
    *) log "note: Go $have_go < $need_go; the go command will try to fetch a newer toolchain (GOTOOLCHAIN=$(go env GOTOOLCHAIN))" ;;
  esac
fi

VPKG=k8s.io/component-base/version
CPKG=k8s.io/client-go/pkg/version
K8S_LDFLAGS="-s -w"
for p in $VPKG $CPKG; do
  K8S_LDFLAGS+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$K8S_MINOR -X $p.gitTreeState=clean"
done
K8S_LDFLAGS+=" -X $VPKG.buildDate=1970-01-01T00:00:00Z"

cd "$WORK/mod"
# kube-apiserver first: it is the long pole (~16 min cold on 2 cores); etcd and
# kubectl mostly reuse its compiled packages afterwards.
run_logged "build-kube-apiserver-$K8S_VERSION" go build -trimpath -ldflags "$K8S_LDFLAGS" -o "$WORK/bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
# etcd at exactly the version k8s.io/kubernetes pins (go.etcd.io/etcd/server/v3's module root is package main).
run_logged "build-etcd-for-$K8S_VERSION" go build -trimpath -ldflags "-s -w" -o "$WORK/bin/etcd" go.etcd.io/etcd/server/v3
if [[ "$WITH_KUBECTL" == 1 ]]; then
  run_logged "build-kubectl-$K8S_VERSION" go build -trimpath -ldflags "$K8S_LDFLAGS" -o "$WORK/bin/kubectl" k8s.io/kubernetes/cmd/kubectl
fi

# Verify every binary actually runs and reports the expected version.
out="$("$WORK/bin/kube-apiserver" --version 2>&1)" || die "built kube-apiserver does not run: $out"
[[ "$out" == "Kubernetes $K8S_VERSION" ]] || die "kube-apiserver --version printed '$out', expected 'Kubernetes $K8S_VERSION'"
out="$("$WORK/bin/etcd" --version 2>&1)" || die "built etcd does not run: $out"
[[ "$out" == *"etcd Version: 3."* ]] || die "unexpected 'etcd --version' output: $out"
etcd_version="$(printf '%s\n' "$out" | sed -n 's/^etcd Version: //p')"
if [[ "$WITH_KUBECTL" == 1 ]]; then
  out="$("$WORK/bin/kubectl" version --client 2>&1)" || die "built kubectl does not run: $out"
  [[ "$out" == *"Client Version: $K8S_VERSION"* ]] || die "unexpected 'kubectl version --client' output: $out"
fi
log "built kube-apiserver $K8S_VERSION, etcd $etcd_version$([[ "$WITH_KUBECTL" == 1 ]] && echo ", kubectl $K8S_VERSION")"

# Record what was used, then swap into place.
cp "$WORK/mod/go.mod" "$WORK/bin/build.go.mod.txt"
cp "$WORK/mod/go.sum" "$WORK/bin/build.go.sum.txt"
stamp_content >"$WORK/bin/$STAMP_NAME"
mkdir -p "$(dirname "$ASSETS_DIR")"
rm -rf "$ASSETS_DIR.old"
[[ -e "$ASSETS_DIR" ]] && mv "$ASSETS_DIR" "$ASSETS_DIR.old"
mv "$WORK/bin" "$ASSETS_DIR" || die "could not move built binaries to $ASSETS_DIR"
rm -rf "$ASSETS_DIR.old"

log "assets ready: $ASSETS_DIR"
echo "$ASSETS_DIR"
