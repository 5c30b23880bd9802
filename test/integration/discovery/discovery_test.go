package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapi "sigs.k8s.io/gateway-api/apis/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/discovery"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/cmrunner"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// want is what a discovered certificate must be listed as.
type want struct {
	cluster, namespace, secret string
	managed                    discovery.Managed
	key                        string
	problems                   []discovery.Problem
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func ingress(ns, name string, secrets ...string) *networkingv1.Ingress {
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: networkingv1.IngressSpec{
		DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}
	for _, s := range secrets {
		ing.Spec.TLS = append(ing.Spec.TLS, networkingv1.IngressTLS{Hosts: []string{s + ".example.com"}, SecretName: s})
	}
	return ing
}

// status runs `certhub status --discovered -o json` with args.
func status(t *testing.T, args ...string) app.DiscoveredStatus {
	t.Helper()
	var out bytes.Buffer
	cmd := app.NewCommand()
	cmd.SetArgs(append([]string{"status", "--discovered", "-o", "json", "--kubeconfig", env.Kubeconfig, "--namespace", env.Bed.HubNamespace(),
		"--cluster-secret-namespace", env.Bed.ArgoNamespace()}, args...))
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("certhub status --discovered: %v\n%s", err, out.String())
	}
	var s app.DiscoveredStatus
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return s
}

// matches reports whether row is w.
func (w want) matches(row app.DiscoveredRow) bool {
	return row.Cluster == w.cluster && row.Namespace == w.namespace && row.Secret == w.secret
}

func (w want) check(row app.DiscoveredRow) bool {
	key := row.KeyAlgorithm
	if key != "" {
		key += "-" + itoa(row.KeySize)
	}
	return row.Managed == w.managed && key == w.key && slices.Equal(row.Problems, w.problems)
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestDiscoveryFindsEveryTLSCertificate(t *testing.T) {
	ctx := context.Background()
	ours, hand, cm := env.Bed.Downstreams[0], env.Bed.Downstreams[1], env.Bed.Downstreams[2]
	now := time.Now()

	// Cluster 0: a certificate certhub issues, and a hand-made RSA-1024 one.
	fixture.EnsureNamespace(t, ours.Client, "shop")
	crt := fixture.Certificate("shop", "web", issuerName, fixture.WithNames("", "web.shop.example.com"))
	create(t, ours.Client, crt, fixture.TLSSecret(t, "shop", "legacy", fixture.WithRSAKey(1024)))
	fixture.WaitReady(t, ours.Client, client.ObjectKeyFromObject(crt))

	// Cluster 1: hand-made only: an expired certificate an Ingress still
	// serves, one SHA-1 signed, and an Opaque Secret only an Ingress names.
	fixture.EnsureNamespace(t, hand.Client, "edge")
	create(t, hand.Client,
		fixture.TLSSecret(t, "edge", "expired", fixture.WithValidity(now.Add(-60*24*time.Hour), now.Add(-24*time.Hour))),
		fixture.TLSSecret(t, "edge", "sha1", fixture.WithRSAKey(2048), fixture.WithSHA1()),
		fixture.TLSSecret(t, "edge", "opaque", fixture.WithSecretType(corev1.SecretTypeOpaque)),
		fixture.TLSSecret(t, "edge", "not-served", fixture.WithSecretType(corev1.SecretTypeOpaque)),
		ingress("edge", "site", "expired", "opaque"))

	// Cluster 2: cert-manager's own controllers issue from their own CA;
	// the cluster is registered in mode observe (the hub writes nothing).
	caSecret := &corev1.Secret{}
	if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKey{Namespace: env.Bed.HubNamespace(), Name: issuerName + "-ca"}, caSecret); err != nil {
		t.Fatal(err)
	}
	fixture.EnsureNamespace(t, cm.Client, "cert-manager")
	fixture.EnsureNamespace(t, cm.Client, "billing")
	create(t, cm.Client,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "cm-ca"}, Type: corev1.SecretTypeTLS, Data: caSecret.Data},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "cm-ca"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: "cm-ca"}}}})
	kubeconfig, err := cm.WriteKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	runner, err := cmrunner.Start(ctx, cmrunner.Options{Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runner.Stop() })
	cmCrt := fixture.Certificate("billing", "api", "cm-ca", fixture.WithNames("", "api.billing.example.com"),
		fixture.WithIssuer(cmmeta.IssuerReference{Name: "cm-ca", Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}))
	create(t, cm.Client, cmCrt)
	fixture.WaitReady(t, cm.Client, client.ObjectKeyFromObject(cmCrt))
	// It serves Gateway API: a Gateway's listener names an Opaque Secret.
	if err := cm.InstallGatewayAPI(); err != nil {
		t.Fatal(err)
	}
	gw := &gwapi.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: "edge"}, Spec: gwapi.GatewaySpec{GatewayClassName: "example",
		Listeners: []gwapi.Listener{{Name: "https", Port: 443, Protocol: gwapi.HTTPSProtocolType, Hostname: ptr.To(gwapi.Hostname("gw.billing.example.com")),
			TLS: &gwapi.ListenerTLSConfig{CertificateRefs: []gwapi.SecretObjectReference{{Name: "gw-cert"}}}}}}}
	create(t, cm.Client, fixture.TLSSecret(t, "billing", "gw-cert", fixture.WithSecretType(corev1.SecretTypeOpaque)))
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		return cm.Client.Create(ctx, gw) == nil, nil // once the CRD is served
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Bed.RegisterLabelled(ctx, cm, map[string]string{hubapi.ModeLabel: hubapi.ModeObserve}); err != nil {
		t.Fatal(err)
	}

	wants := []want{
		{cluster: ours.Name, namespace: "shop", secret: crt.Spec.SecretName, managed: discovery.ManagedByCerthub, key: "ECDSA-256"},
		{cluster: ours.Name, namespace: "shop", secret: "legacy", managed: discovery.ManagedByNone, key: "RSA-1024", problems: []discovery.Problem{discovery.ProblemWeakKey}},
		{cluster: hand.Name, namespace: "edge", secret: "expired", managed: discovery.ManagedByNone, key: "ECDSA-256",
			problems: []discovery.Problem{discovery.ProblemExpired, discovery.ProblemExpiredServed}},
		{cluster: hand.Name, namespace: "edge", secret: "sha1", managed: discovery.ManagedByNone, key: "RSA-2048", problems: []discovery.Problem{discovery.ProblemSHA1Signature}},
		{cluster: hand.Name, namespace: "edge", secret: "opaque", managed: discovery.ManagedByNone, key: "ECDSA-256"},
		{cluster: cm.Name, namespace: "billing", secret: cmCrt.Spec.SecretName, managed: discovery.ManagedByCertManager, key: "ECDSA-256"},
		{cluster: cm.Name, namespace: "billing", secret: "gw-cert", managed: discovery.ManagedByNone, key: "ECDSA-256"},
	}
	// The fixture's CA Secrets are TLS Secrets too: listed, not checked here.
	var last app.DiscoveredStatus
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		last = status(t)
		for _, w := range wants {
			i := slices.IndexFunc(last.Certificates, w.matches)
			if i < 0 || !w.check(last.Certificates[i]) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for _, w := range wants {
			i := slices.IndexFunc(last.Certificates, w.matches)
			if i < 0 {
				t.Errorf("%s/%s/%s not listed", w.cluster, w.namespace, w.secret)
			} else if !w.check(last.Certificates[i]) {
				t.Errorf("%s/%s/%s listed as %+v, want %+v", w.cluster, w.namespace, w.secret, last.Certificates[i].Record, w)
			}
		}
		t.Fatalf("certhub status --discovered never listed every certificate as it is")
	}
	for _, row := range last.Certificates {
		if row.Secret == "not-served" {
			t.Errorf("an Opaque Secret no Ingress names is listed: %+v", row)
		}
		if row.Cluster == ours.Name && row.Secret == crt.Spec.SecretName && (len(row.DNSNames) != 1 || row.DNSNames[0] != "web.shop.example.com" || row.Issuer == "") {
			t.Errorf("certhub's certificate listed without its names or issuer: %+v", row.Record)
		}
	}
	// Sorted by expiry: the expired one first.
	if last.Certificates[0].Secret != "expired" {
		t.Errorf("first row %s/%s, want the expired certificate first", last.Certificates[0].Cluster, last.Certificates[0].Secret)
	}

	// Filters.
	unmanaged := status(t, "--managed", "unmanaged", "--cluster", hand.Name)
	for _, row := range unmanaged.Certificates {
		if row.Cluster != hand.Name || row.Managed != discovery.ManagedByNone {
			t.Errorf("--managed unmanaged --cluster %s listed %+v", hand.Name, row)
		}
	}
	if managed := status(t, "--managed", "cert-manager"); len(managed.Certificates) != 1 || managed.Certificates[0].Secret != cmCrt.Spec.SecretName {
		t.Errorf("--managed cert-manager listed %+v", managed.Certificates)
	}

	// The metrics: each certificate's expiry with who manages it (certhub's
	// own are not repeated: certsync reports them), and the problems.
	for _, w := range wants {
		_, ok := fixture.Gauge(t, discovery.MetricExpiration, map[string]string{"cluster": w.cluster, "namespace": w.namespace,
			"secret": w.secret, "managed": string(w.managed)})
		if want := w.managed != discovery.ManagedByCerthub; ok != want {
			t.Errorf("%s series for %s/%s/%s managed %s: %t, want %t", discovery.MetricExpiration, w.cluster, w.namespace, w.secret, w.managed, ok, want)
		}
	}
	for cluster, problems := range map[string]map[discovery.Problem]float64{
		ours.Name: {discovery.ProblemWeakKey: 1},
		hand.Name: {discovery.ProblemExpired: 1, discovery.ProblemExpiredServed: 1, discovery.ProblemSHA1Signature: 1},
	} {
		for p, n := range problems {
			if got, _ := fixture.Gauge(t, discovery.MetricProblems, map[string]string{"cluster": cluster, "problem": string(p)}); got != n {
				t.Errorf("%s{cluster=%s,problem=%s} = %v, want %v", discovery.MetricProblems, cluster, p, got, n)
			}
		}
	}
	if got, _ := fixture.Gauge(t, discovery.MetricCertificates, map[string]string{"cluster": cm.Name, "managed": string(discovery.ManagedByCertManager)}); got != 1 {
		t.Errorf("%s{cluster=%s,managed=cert-manager} = %v, want 1", discovery.MetricCertificates, cm.Name, got)
	}
}

// A Secret replaced, renewed by hand or deleted is seen as it is now.
func TestDiscoveryFollowsChanges(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[1]
	fixture.EnsureNamespace(t, cp.Client, "churn")
	s := fixture.TLSSecret(t, "churn", "rotating", fixture.WithRSAKey(1024))
	create(t, cp.Client, s)
	waitRow(t, cp, "churn", "rotating", func(r *app.DiscoveredRow) bool { return r != nil && r.KeySize == 1024 })

	fresh := fixture.TLSSecret(t, "churn", "rotating", fixture.WithRSAKey(2048))
	s.Data = fresh.Data
	if err := cp.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitRow(t, cp, "churn", "rotating", func(r *app.DiscoveredRow) bool { return r != nil && r.KeySize == 2048 && len(r.Problems) == 0 })

	if err := cp.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitRow(t, cp, "churn", "rotating", func(r *app.DiscoveredRow) bool { return r == nil })
}

// waitRow polls `certhub status --discovered --cluster` until the row of
// ns/secret (nil: none) satisfies ok.
func waitRow(t *testing.T, cp *testbed.ControlPlane, ns, secret string, ok func(*app.DiscoveredRow) bool) {
	t.Helper()
	var row *app.DiscoveredRow
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		row = nil
		for _, r := range status(t, "--cluster", cp.Name).Certificates {
			if r.Namespace == ns && r.Secret == secret {
				row = &r
			}
		}
		return ok(row), nil
	})
	if err != nil {
		t.Fatalf("%s/%s/%s: last listed as %+v", cp.Name, ns, secret, row)
	}
}
