package inventory

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/testbed"
)

func certhub(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := app.NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// `certhub cluster add` against a downstream cluster writes a registration
// that `validate` accepts and that, applied to the hub, serves Certificates.
func TestClusterAddRegistersACluster(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[2]
	dir := t.TempDir()
	kubeconfig, err := cp.WriteKubeconfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "added.yaml")
	if out, err := certhub(t, "cluster", "add", "--kubeconfig", kubeconfig, "--name", "added",
		"--argocd-namespace", env.Bed.ArgoNamespace(), "--labels", optIn+"=true", "-o", file); err != nil {
		t.Fatalf("cluster add: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "SOPS") {
		t.Errorf("the manifest does not warn that it holds a credential")
	}
	if out, err := certhub(t, "cluster", "validate", file); err != nil || !strings.Contains(out, `ok (cluster "added"`) {
		t.Fatalf("validate rejects what add wrote: %v\n%s", err, out)
	}
	s := &corev1.Secret{}
	if err := yaml.Unmarshal(raw, s); err != nil {
		t.Fatal(err)
	}
	if err := env.Bed.Hub.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Bed.Hub.Client.Delete(context.Background(), s) })
	testbed.EnsureNamespace(t, cp.Client, "added")
	crt := testbed.ValidCertificate("added", "web", issuerName)
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	testbed.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
}
