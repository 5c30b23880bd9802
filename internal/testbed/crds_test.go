package testbed

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The embedded CRDs must be the ones of the cert-manager version go.mod pins;
// after a bump, `make crds` (hack/sync-crds.sh) brings them in line.
func TestEmbeddedCRDsMatchModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		t.Fatalf("go list cert-manager module: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s (err %v)", dir, err)
	}
	for _, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := crdFiles.ReadFile("crds/cert-manager/" + filepath.Base(f))
		if err != nil {
			t.Errorf("%s is not embedded; run make crds", filepath.Base(f))
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the module's copy; run make crds", filepath.Base(f))
		}
	}
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != len(files)+2 { // + certhub's IssuancePolicy and ACMEOrder
		t.Errorf("decoded %d CRDs, want %d", len(crds), len(files)+2)
	}
	names := map[string]bool{}
	for _, c := range crds {
		names[c.Name] = true
	}
	for _, n := range []string{"certificates.cert-manager.io", "clusterissuers.cert-manager.io", "issuers.cert-manager.io", "issuancepolicies.certhub.io", "acmeorders.certhub.io"} {
		if !names[n] {
			t.Errorf("CRD %s missing", n)
		}
	}
}

// The embedded Gateway CRD is the gateway-api module's (make crds).
func TestEmbeddedGatewayCRDMatchesModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("go list gateway-api module: %v", err)
	}
	const name = "gateway.networking.k8s.io_gateways.yaml"
	want, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard", name))
	if err != nil {
		t.Fatal(err)
	}
	got, err := gatewayCRDFiles.ReadFile("crds/gateway-api/" + name)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s differs from the module's copy (%v); run make crds", name, err)
	}
	crds, err := DecodeCRDs(got)
	if err != nil || len(crds) != 1 || crds[0].Name != "gateways.gateway.networking.k8s.io" {
		t.Errorf("decoded %d CRDs (%v), want the Gateway CRD", len(crds), err)
	}
}

// The test bed installs the certhub CRDs the hub's kustomize base ships.
func TestEmbeddedCerthubCRDsAreTheShippedOnes(t *testing.T) {
	for _, name := range []string{"certhub.io_issuancepolicies.yaml", "certhub.io_acmeorders.yaml"} {
		embeddedIsShipped(t, name)
	}
}

func embeddedIsShipped(t *testing.T, name string) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join("..", "..", "kustomize", "base", "crds", name))
	if err != nil {
		t.Fatal(err)
	}
	got, err := crdFiles.ReadFile("crds/certhub/" + name)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("crds/certhub/%s differs from kustomize/base/crds/%s (err %v); copy it", name, name, err)
	}
}

func TestAssetsDirNamesTheFixWhenBinariesAreMissing(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, err := AssetsDir()
	if err == nil || !strings.Contains(err.Error(), "make envtest") {
		t.Fatalf("err = %v, want one that says to run make envtest", err)
	}
}
