// Package gitops checks that the shipped GitOps assets are real: every
// kustomization renders (kustomize/api) and every object it renders, plus
// argo/ and examples/, passes server-side dry-run against a real hub API
// server with the cert-manager and Argo CD CRDs; and the hub runs end to end
// with exactly the RBAC of kustomize/base.
package gitops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	certhub "github.com/certhub/certhub/internal/hub"
	"github.com/certhub/certhub/internal/inventory"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/suite"
	"github.com/certhub/certhub/test/fixture/testbed"
)

const (
	issuerName  = "gitops-ca"
	argoVersion = "github.com/argoproj/argo-cd/v3@v3.5.7"
	// esoVersion is External Secrets Operator's module, for its CRDs only.
	esoVersion = "github.com/external-secrets/external-secrets@v0.16.2"
)

var env *suite.Env

func TestMain(m *testing.M) {
	os.Exit(suite.Run(m, suite.Options{Downstreams: 1, Unregistered: 1, Issuer: issuerName, Logs: io.Discard,
		Setup: func(_ context.Context, e *suite.Env) error { return installCRDs(e.Bed) }}, &env))
}

// installCRDs installs, in the hub, Argo CD's CRDs from the argo-cd module
// and External Secrets Operator's (examples/externalsecret.yaml) from its.
func installCRDs(bed *testbed.Bed) error {
	opts := envtest.CRDInstallOptions{}
	for _, m := range []struct{ module, glob string }{
		{argoVersion, "manifests/crds/*-crd.yaml"},
		{esoVersion, "config/crds/bases/external-secrets.io_*.yaml"},
	} {
		out, err := exec.Command("go", "mod", "download", "-json", m.module).Output()
		if err != nil {
			return fmt.Errorf("go mod download %s: %w", m.module, err)
		}
		var mod struct{ Dir string }
		if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
			return errors.New("go mod download gave no directory for " + m.module)
		}
		files, err := filepath.Glob(filepath.Join(mod.Dir, m.glob))
		if err != nil || len(files) == 0 {
			return fmt.Errorf("no CRDs %s in %s", m.glob, mod.Dir)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			crds, err := testbed.DecodeCRDs(raw)
			if err != nil {
				return err
			}
			opts.CRDs = append(opts.CRDs, crds...)
		}
	}
	_, err := envtest.InstallCRDs(bed.Hub.Config, opts)
	return err
}

func repo(p string) string { return filepath.Join("..", "..", "..", p) }

// render returns the objects of a kustomization, or of a plain YAML file.
func render(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	var raw []byte
	if strings.HasSuffix(path, ".yaml") {
		b, err := os.ReadFile(repo(path))
		if err != nil {
			t.Fatal(err)
		}
		raw = b
	} else {
		m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), repo(path))
		if err != nil {
			t.Fatalf("kustomize build %s: %v", path, err)
		}
		if raw, err = m.AsYaml(); err != nil {
			t.Fatal(err)
		}
	}
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

// Every shipped manifest is accepted by a real API server (server-side
// dry-run, so schemas and CRD validation apply), except PrometheusRule whose
// CRD belongs to the Prometheus Operator.
func TestManifestsPassServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	c := env.Bed.Hub.Client
	for _, ns := range []string{"certhub", "argocd", "shop", "storefront", "certhub-system", "apps", "payments"} {
		fixture.EnsureNamespace(t, c, ns)
	}
	// The dry-run does check schemas: a misspelt field is refused.
	bad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": "typo", "namespace": "argocd"},
		"spec":     map[string]any{"project": "default", "sourc": map[string]any{"repoURL": "x"}, "destination": map[string]any{}},
	}}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(bad), client.DryRunAll, client.FieldOwner("gitops-test"), client.ForceOwnership); err == nil {
		t.Fatal("a misspelt Application field passed server-side dry-run; the check would prove nothing")
	}
	for _, path := range []string{"kustomize/base", "kustomize/overlays/dev", "kustomize/overlays/ha", "kustomize/downstream", "kustomize/downstream-namespaced",
		"argo/appproject.yaml", "argo/hub-application.yaml", "argo/certificates-appset.yaml", "argo/certificates-appset-rollingsync.yaml", "argo/ingresses-appset.yaml", "argo/cert-manager-appset.yaml", "argo/external-certificates-appset.yaml", "examples/external",
		"examples/clusters/east", "examples/clusters/east/ingress", "examples/cluster-secret.yaml", "examples/clusterissuer-ca.yaml", "examples/clusterissuer-acme.yaml", "examples/externalsecret.yaml", "examples/certificate.yaml"} {
		t.Run(path, func(t *testing.T) {
			objs := render(t, path)
			if len(objs) == 0 {
				t.Fatal("renders nothing")
			}
			for _, o := range objs {
				err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.DryRunAll, client.FieldOwner("gitops-test"), client.ForceOwnership)
				if err != nil {
					t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
		})
	}
}

// The hub runs with exactly the RBAC kustomize/base grants its ServiceAccount,
// and the downstream with what `cluster add` grants; issuance works end to
// end, and the hub's identity is refused what it was not granted.
func TestHubRunsWithItsOwnRBAC(t *testing.T) {
	ctx := context.Background()
	hub := env.Bed.Hub
	for _, o := range render(t, "kustomize/base") {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := hub.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("gitops-test"), client.ForceOwnership); err != nil {
				t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	cs, err := kubernetes.NewForConfig(hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("certhub").CreateToken(ctx, "certhub", tokenRequest(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hubAsSA := &rest.Config{Host: hub.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: hub.Config.CAData}}

	// Refused: reading Secrets outside the namespaces the hub was given.
	saCS, err := kubernetes.NewForConfig(hubAsSA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := saCS.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the hub's ServiceAccount may read Secrets in kube-system (err %v)", err)
	}

	// The downstream registration made by `cluster add`'s code path.
	cp := env.Bed.Downstreams[0]
	if err := inventory.GrantAccess(ctx, cp.Client, nil); err != nil {
		t.Fatal(err)
	}
	dcs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	token, err := inventory.MintToken(ctx, dcs, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Named "east" and opted in, as examples/ and argo/ expect.
	s, err := inventory.NewSecret(env.Bed.ArgoNamespace(), "east", "east", cp.Server(),
		inventory.ClusterConfig{BearerToken: token, TLSClientConfig: inventory.TLSClientConfig{CAData: cp.Config.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	s.Labels["certhub.io/enabled"] = "true"
	if err := hub.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}

	o := certhub.NewOptions()
	o.Namespace, o.ClusterSecretNamespace = "certhub", env.Bed.ArgoNamespace()
	o.MetricsAddr, o.HealthProbeAddr, o.Identity = "0", "0", "rbac-0"
	// The CA key pair lives in the hub namespace the base RBAC covers.
	if _, err := env.Bed.CreateCAIssuer(ctx, "rbac-ca"); err != nil { // the bed's hub namespace is certhub too
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- certhub.Run(runCtx, hubAsSA, o) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("hub running as its ServiceAccount: %v", err)
		}
	}()
	fixture.EnsureNamespace(t, cp.Client, "rbac")
	crt := fixture.Certificate("rbac", "web", "rbac-ca")
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))

	t.Run("ApplicationSet-delivered Certificates", func(t *testing.T) { appSetFlow(t, s) })
	t.Run("ApplicationSet-delivered annotated Ingress", func(t *testing.T) { ingressAppSetFlow(t, s) })
	t.Run("cert-manager follows the cluster's mode", func(t *testing.T) { certManagerFollowsTheMode(t, s) })
}

// appSetFlow renders argo/certificates-appset.yaml with Argo CD's own cluster
// generator (test/argocd/cmd/render-appset) against the registration, builds
// the generated Application's source path with kustomize, applies it to the
// downstream cluster as Argo CD's sync would, and sees the hub issue it.
func appSetFlow(t *testing.T, registration *corev1.Secret) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[0]
	if _, err := env.Bed.CreateCAIssuer(ctx, "platform-ca"); err != nil { // examples/certificate.yaml's issuer
		t.Fatal(err)
	}
	syncAppSet(t, registration, "argo/certificates-appset.yaml", "certificates-east", "examples/clusters/east")
	fixture.WaitReady(t, cp.Client, client.ObjectKey{Namespace: "shop", Name: "web"})
	fixture.GetSecret(t, cp.Client, fixture.Certificate("shop", "web", "platform-ca"))
}

// ingressAppSetFlow is appSetFlow for argo/ingresses-appset.yaml: the
// delivered Ingress ends with a Ready Certificate made by the hub's shim.
func ingressAppSetFlow(t *testing.T, registration *corev1.Secret) {
	cp := env.Bed.Downstreams[0]
	syncAppSet(t, registration, "argo/ingresses-appset.yaml", "ingresses-east", "examples/clusters/east/ingress")
	crt := fixture.WaitReady(t, cp.Client, client.ObjectKey{Namespace: "storefront", Name: "storefront-tls"})
	if ref := metav1.GetControllerOf(crt); ref == nil || ref.Kind != "Ingress" || ref.Name != "storefront" {
		t.Errorf("Certificate storefront-tls controlled by %+v, want Ingress storefront", ref)
	}
	fixture.GetSecret(t, cp.Client, crt)
}

// syncAppSet renders appset with Argo CD's generator against the
// registration, expects one Application name for path, and applies the
// path's kustomization to the downstream cluster as Argo CD's sync would.
func syncAppSet(t *testing.T, registration *corev1.Secret, appset, name, path string) {
	t.Helper()
	ctx := context.Background()
	cp := env.Bed.Downstreams[0]
	apps := renderAppSet(t, registration, appset)
	if len(apps) != 1 {
		t.Fatalf("Argo CD's generator made %d Applications from one enabled cluster: %+v", len(apps), apps)
	}
	a := apps[0]
	if a.Name != name || a.Project != "certhub" || a.Server != cp.Server() || a.Path != path {
		t.Fatalf("generated Application %+v, want %s / certhub / %s / %s", a, name, cp.Server(), path)
	}
	for _, o := range render(t, a.Path) {
		if err := cp.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("argocd-controller"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// generatedApp is one Application Argo CD's generator made.
type generatedApp struct{ Name, Project, Server, Namespace, RepoURL, Path string }

// renderAppSet runs Argo CD's own cluster generator
// (test/argocd/cmd/render-appset) on appset against the registration.
func renderAppSet(t *testing.T, registration *corev1.Secret, appset string) []generatedApp {
	t.Helper()
	raw, err := yaml.Marshal(registration)
	if err != nil {
		t.Fatal(err)
	}
	secrets := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(secrets, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(repo(appset))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./cmd/render-appset", abs, secrets)
	cmd.Dir = repo("test/argocd")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render-appset: %v\n%s", err, out)
	}
	var apps []generatedApp
	if err := json.Unmarshal(out, &apps); err != nil {
		t.Fatalf("render-appset output %s: %v", out, err)
	}
	return apps
}

// certManagerFollowsTheMode renders argo/cert-manager-appset.yaml with Argo
// CD's generator: cert-manager is delivered to a cluster in mode observe
// or off, and leaves it (its Application is no longer generated) when the
// cluster's registration says issue, or says nothing.
func certManagerFollowsTheMode(t *testing.T, registration *corev1.Secret) {
	for mode, want := range map[string]int{hubapi.ModeObserve: 1, hubapi.ModeOff: 1, hubapi.ModeIssue: 0, hubapi.ModeForceIssue: 0, "": 0} {
		s := registration.DeepCopy()
		delete(s.Labels, hubapi.ModeLabel)
		if mode != "" {
			s.Labels[hubapi.ModeLabel] = mode
		}
		apps := renderAppSet(t, s, "argo/cert-manager-appset.yaml")
		if len(apps) != want {
			t.Errorf("mode %q: %d cert-manager Applications %+v; want %d", mode, len(apps), apps, want)
		}
		if len(apps) == 1 && (apps[0].Name != "cert-manager-east" || apps[0].Namespace != "cert-manager") {
			t.Errorf("mode %q: generated %+v; want cert-manager-east into namespace cert-manager", mode, apps[0])
		}
	}
}

func tokenRequest() *authenticationv1.TokenRequest {
	return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
}
