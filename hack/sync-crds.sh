#!/usr/bin/env bash
# sync-crds.sh - copy the cert-manager CRDs from the cert-manager Go module
# (the version go.mod pins) into test/fixture/testbed/crds/, where the test bed
# and `certhub demo` embed them. Run after bumping cert-manager; the unit test
# TestEmbeddedCRDsMatchModule fails until you do.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$(go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)"
[[ -d "$dir/deploy/crds" ]] || { echo "sync-crds: ERROR: $dir/deploy/crds not found (run 'go mod download')" >&2; exit 1; }
dst=test/fixture/testbed/crds/cert-manager
rm -f "$dst"/*.yaml
mkdir -p "$dst"
cp "$dir"/deploy/crds/*.yaml "$dst"/
chmod 0644 "$dst"/*.yaml
echo "sync-crds: copied $(ls "$dst" | wc -l) CRDs from $dir" >&2

# Gateway API's Gateway CRD (the standard channel), which the test bed
# installs in the downstream clusters that should serve Gateways.
gw="$(go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)"
dst=test/fixture/testbed/crds/gateway-api
rm -f "$dst"/*.yaml
mkdir -p "$dst"
cp "$gw"/config/crd/standard/gateway.networking.k8s.io_gateways.yaml "$dst"/
chmod 0644 "$dst"/*.yaml
echo "sync-crds: copied the Gateway CRD from $gw" >&2
