package inventory

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
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
	if out, err := certhub(t, "cluster", "validate", file); err != nil || !strings.Contains(out, `cluster "added" at`) {
		t.Fatalf("validate rejects what add wrote: %v\n%s", err, out)
	}
	s := &corev1.Secret{}
	if err := yaml.Unmarshal(raw, s); err != nil {
		t.Fatal(err)
	}
	registerAndIssue(t, s, "added")
}

// `certhub cluster add --format external-secret` keeps the token out of Git:
// it writes an ExternalSecret that `validate` accepts and prints the store
// values. Rendered with those values the way External Secrets Operator
// renders templates (Go text/template over the fetched keys) and applied as
// the resulting Secret, it registers a cluster that serves Certificates.
func TestClusterAddExternalSecretConnects(t *testing.T) {
	cp := env.Bed.Downstreams[2]
	dir := t.TempDir()
	kubeconfig, err := cp.WriteKubeconfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "external-secret.yaml")
	out, err := certhub(t, "cluster", "add", "--kubeconfig", kubeconfig, "--name", "es-added", "--format", "external-secret",
		"--secret-store", "vault", "--store-kind", "ClusterSecretStore", "--argocd-namespace", env.Bed.ArgoNamespace(),
		"--labels", optIn+"=true", "-o", file)
	if err != nil {
		t.Fatalf("cluster add: %v\n%s", err, out)
	}
	values := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && (k == "token" || k == "caData") {
			values[k] = v
		}
	}
	if values["token"] == "" || values["caData"] == "" {
		t.Fatalf("cluster add printed no store values:\n%s", out)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), values["token"]) {
		t.Fatalf("the ExternalSecret manifest holds the token")
	}
	if out, err := certhub(t, "cluster", "validate", file); err != nil || !strings.Contains(out, `ok: ExternalSecret `+env.Bed.ArgoNamespace()+`/cluster-es-added`) {
		t.Fatalf("validate rejects what add wrote: %v\n%s", err, out)
	}

	var es struct {
		Metadata struct{ Namespace string } `json:"metadata"`
		Spec     struct {
			Target struct {
				Name     string `json:"name"`
				Template struct {
					Metadata struct {
						Labels map[string]string `json:"labels"`
					} `json:"metadata"`
					Data map[string]string `json:"data"`
				} `json:"template"`
			} `json:"target"`
			Data []struct {
				SecretKey string `json:"secretKey"`
			} `json:"data"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &es); err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: es.Spec.Target.Name, Namespace: es.Metadata.Namespace,
		Labels: es.Spec.Target.Template.Metadata.Labels}, Data: map[string][]byte{}}
	fetched := map[string]string{}
	for _, d := range es.Spec.Data {
		fetched[d.SecretKey] = values[d.SecretKey]
	}
	for k, tmpl := range es.Spec.Target.Template.Data {
		tp, err := template.New(k).Option("missingkey=error").Parse(tmpl)
		if err != nil {
			t.Fatalf("template %s: %v", k, err)
		}
		var b strings.Builder
		if err := tp.Execute(&b, fetched); err != nil {
			t.Fatalf("render %s: %v", k, err)
		}
		s.Data[k] = []byte(b.String())
	}
	registerAndIssue(t, s, "es-added")
}

// registerAndIssue applies the registration s to the hub and waits for a
// Certificate created in namespace ns of the registered cluster (the third
// downstream) to be Ready; the registration is removed after the test.
func registerAndIssue(t *testing.T, s *corev1.Secret, ns string) {
	t.Helper()
	ctx := context.Background()
	cp := env.Bed.Downstreams[2]
	if err := env.Bed.Hub.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Bed.Hub.Client.Delete(context.Background(), s) })
	fixture.EnsureNamespace(t, cp.Client, ns)
	crt := fixture.Certificate(ns, "web", issuerName)
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
}

// The in-cluster registration as Argo CD's docs write it — name and server,
// no config — is engaged: Argo CD's in-cluster server is the cluster the
// hub reads its Secrets from (here the hub's API server), and a Certificate
// there is issued.
func TestConfigLessInClusterRegistrationIssues(t *testing.T) {
	ctx := context.Background()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: env.Bed.ArgoNamespace(), Name: "in-cluster",
			Labels: map[string]string{inventory.SecretTypeLabel: inventory.SecretTypeCluster, optIn: "true"}},
		StringData: map[string]string{"name": "in-cluster", "server": inventory.InClusterServer},
	}
	if err := env.Bed.Hub.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Bed.Hub.Client.Delete(context.Background(), s) })
	hub := env.Bed.Hub.Client
	const ns = "in-cluster-app"
	fixture.EnsureNamespace(t, hub, ns)
	crt := fixture.Certificate(ns, "web", issuerName)
	if err := hub.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, hub, client.ObjectKeyFromObject(crt))
	waitSecretEvent(t, "in-cluster", inventory.ReasonClusterConnected, "in-cluster")
}
