package policy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/app"
	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// createPolicy creates p in the hub and deletes it when the test ends.
func createPolicy(t *testing.T, p hubapi.IssuancePolicy) {
	t.Helper()
	obj := fixture.PolicyObject(p)
	if err := bed.Hub.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("create IssuancePolicy %s: %v", p.Name, err)
	}
	t.Cleanup(func() { _ = bed.Hub.Client.Delete(context.Background(), obj) })
}

// create creates crt in cp (its namespace first).
func create(t *testing.T, cp *testbed.ControlPlane, crt *cmapi.Certificate) client.ObjectKey {
	t.Helper()
	fixture.EnsureNamespace(t, cp.Client, crt.Namespace)
	if err := cp.Client.Create(context.Background(), crt); err != nil {
		t.Fatalf("create Certificate %s/%s: %v", crt.Namespace, crt.Name, err)
	}
	return client.ObjectKeyFromObject(crt)
}

// denied waits for Ready=False/PolicyDenied and checks the message holds every want.
func denied(t *testing.T, cp *testbed.ControlPlane, key client.ObjectKey, want ...string) *cmapi.Certificate {
	t.Helper()
	crt := fixture.WaitFor(t, cp.Client, key, "Ready=False/PolicyDenied", fixture.NotReadyWith(reasons.PolicyDenied))
	msg := fixture.Condition(crt, cmapi.CertificateConditionReady).Message
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s on %s: message %q does not contain %q", key, cp.Name, msg, w)
		}
	}
	t.Logf("%s on %s: %s", key, cp.Name, msg)
	noSecret(t, cp, crt)
	return crt
}

// noSecret asserts nothing was written for crt.
func noSecret(t *testing.T, cp *testbed.ControlPlane, crt *cmapi.Certificate) {
	t.Helper()
	err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Secret %s/%s of a denied Certificate: err %v, want NotFound", crt.Namespace, crt.Spec.SecretName, err)
	}
}

func onlyNamespace(ns string) *hubapi.NamespaceSelector {
	return &hubapi.NamespaceSelector{MatchNames: []string{ns}}
}

func anyName() hubapi.PolicyAllowed {
	return hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*")}
}

// A dev cluster cannot get a prod name; each environment gets its own.
func TestDevCannotGetProdName(t *testing.T) {
	const ns = "names-by-env"
	for _, e := range []string{"dev", "prod"} {
		createPolicy(t, fixture.Policy("env-"+e, hubapi.IssuancePolicySpec{
			Selector: hubapi.PolicySelector{Clusters: &hubapi.ClusterSelector{MatchLabels: map[string]string{"env": e}}, Namespaces: onlyNamespace(ns)},
			Allowed:  hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*." + e + ".example.com"}, DNSNames: fixture.Values("*." + e + ".example.com")},
		}))
	}
	dev, prod := bed.Downstreams[0], bed.Downstreams[1]
	steal := create(t, dev, fixture.Certificate(ns, "steal", issuerName, fixture.WithNames("api.prod.example.com", "api.prod.example.com")))
	own := create(t, dev, fixture.Certificate(ns, "own", issuerName, fixture.WithNames("api.dev.example.com", "api.dev.example.com")))
	prodOwn := create(t, prod, fixture.Certificate(ns, "own", issuerName, fixture.WithNames("api.prod.example.com", "api.prod.example.com")))
	denied(t, dev, steal, `(env-dev)`, `spec.commonName "api.prod.example.com" is not allowed (allowed: "*.dev.example.com")`)
	fixture.WaitReady(t, dev.Client, own)
	fixture.WaitReady(t, prod.Client, prodOwn)
}

// `*.{{cluster}}.example.com` allows exactly each cluster's own names.
func TestClusterVariableAllowsOwnNamesOnly(t *testing.T) {
	const ns = "names-by-cluster"
	createPolicy(t, fixture.Policy("own-subdomain", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(ns)},
		Allowed:  hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*.{{cluster}}.example.com"}, DNSNames: fixture.Values("*.{{cluster}}.example.com", "*.{{namespace}}.svc")},
	}))
	for i, cp := range bed.Downstreams[:2] { // the registered two
		other := bed.Downstreams[1-i]
		own := create(t, cp, fixture.Certificate(ns, "own", issuerName, fixture.WithNames("www."+cp.Name+".example.com", "www."+cp.Name+".example.com", "api."+ns+".svc")))
		theirs := create(t, cp, fixture.Certificate(ns, "theirs", issuerName, fixture.WithNames("", "www."+other.Name+".example.com")))
		fixture.WaitReady(t, cp.Client, own)
		denied(t, cp, theirs, `spec.dnsNames "www.`+other.Name+`.example.com" is not allowed (allowed: *.{{cluster}}.example.com, *.{{namespace}}.svc)`)
	}
}

// isCA is denied unless a policy allows it; then the certificate carries
// the policy's path length.
func TestSubCAOnlyWithPolicyAndPathLength(t *testing.T) {
	const ns = "pki-team"
	leafOnly := fixture.Policy("pki-leaves", hubapi.IssuancePolicySpec{Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(ns)}, Allowed: anyName()})
	createPolicy(t, leafOnly)
	cp := bed.Downstreams[0]
	subCA := fixture.Certificate(ns, "team-ca", issuerName, fixture.WithNames("Team CA"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IsCA = true }))
	key := create(t, cp, subCA)
	denied(t, cp, key, "spec.isCA true is not allowed")

	pathLen := 1
	ca := anyName()
	ca.IsCA, ca.MaxPathLen = true, &pathLen
	createPolicy(t, fixture.Policy("pki-sub-ca", hubapi.IssuancePolicySpec{Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(ns)}, Allowed: ca}))
	crt := fixture.WaitReady(t, cp.Client, key)
	cert := leaf(t, fixture.GetSecret(t, cp.Client, crt))
	if !cert.IsCA || cert.MaxPathLen != pathLen || cert.MaxPathLenZero {
		t.Fatalf("sub-CA: IsCA %v MaxPathLen %d MaxPathLenZero %v, want a CA with MaxPathLen %d", cert.IsCA, cert.MaxPathLen, cert.MaxPathLenZero, pathLen)
	}
}

// maxDuration and key constraints are enforced.
func TestDurationAndKeyConstraints(t *testing.T) {
	const ns = "bounded"
	createPolicy(t, fixture.Policy("bounded", hubapi.IssuancePolicySpec{Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(ns)}, Allowed: anyName(),
		Constraints: hubapi.PolicyConstraints{MaxDuration: &metav1.Duration{Duration: 30 * 24 * time.Hour},
			PrivateKey: &hubapi.PrivateKeyConstraints{Algorithm: cmapi.ECDSAKeyAlgorithm, MinSize: 256, MaxSize: 384}}}))
	cp := bed.Downstreams[1]
	month := fixture.WithDuration(30 * 24 * time.Hour)
	for _, tc := range []struct {
		name string
		opts []fixture.CertificateOption
		want string
	}{
		{"long", nil, "duration 2160h0m0s exceeds maxDuration 720h0m0s"},
		{"rsa", []fixture.CertificateOption{month, fixture.WithSpec(func(s *cmapi.CertificateSpec) {
			s.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.RSAKeyAlgorithm, Size: 2048}
		})}, "spec.privateKey.algorithm RSA is not allowed (allowed: ECDSA)"},
		{"p521", []fixture.CertificateOption{month, fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.PrivateKey.Size = 521 })}, "spec.privateKey.size 521 is above maxSize 384"},
	} {
		denied(t, cp, create(t, cp, fixture.Certificate(ns, tc.name, issuerName, tc.opts...)), tc.want)
	}
	fixture.WaitReady(t, cp.Client, create(t, cp, fixture.Certificate(ns, "fits", issuerName, month)))
}

// A policy created after a denial lets the Certificate issue, without a
// restart; a policy change that no longer allows an issued certificate
// flags it (condition and metric) and revokes nothing.
func TestPolicyChangesTakeEffectLive(t *testing.T) {
	const ns = "late-policy"
	cp := bed.Downstreams[0]
	key := create(t, cp, fixture.Certificate(ns, "web", issuerName, fixture.WithNames("web.dev.example.com", "web.dev.example.com")))
	denied(t, cp, key, `no IssuancePolicy selects cluster "cluster-1", namespace "late-policy"`, "default policy is deny")

	p := fixture.Policy("late", hubapi.IssuancePolicySpec{Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(ns)}, Allowed: anyName()})
	createPolicy(t, p)
	crt := fixture.WaitReady(t, cp.Client, key)
	secret := fixture.GetSecret(t, cp.Client, crt)

	// Narrow the policy: the issued certificate is now a violation.
	obj := fixture.PolicyObject(p)
	if err := bed.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	narrowed := fixture.PolicyObject(fixture.Policy("late", hubapi.IssuancePolicySpec{Selector: p.Spec.Selector,
		Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*.prod.example.com"}, DNSNames: fixture.Values("*.prod.example.com")}}))
	narrowed.SetResourceVersion(obj.GetResourceVersion())
	if err := bed.Hub.Client.Update(context.Background(), narrowed); err != nil {
		t.Fatal(err)
	}
	crt = fixture.WaitFor(t, cp.Client, key, "PolicyViolation=True", func(c *cmapi.Certificate) bool {
		v := fixture.Condition(c, certsync.ConditionPolicyViolation)
		return v != nil && v.Status == cmmeta.ConditionTrue
	})
	if !fixture.IsReady(crt) {
		t.Errorf("a violating certificate must stay Ready (nothing is revoked)")
	}
	if v, _ := fixture.Gauge(t, "certhub_certificate_policy_violations", map[string]string{"cluster": cp.Name}); v < 1 {
		t.Errorf("certhub_certificate_policy_violations{cluster=%q} = %v, want ≥ 1", cp.Name, v)
	}
	if after := fixture.GetSecret(t, cp.Client, crt); string(after.Data[corev1.TLSCertKey]) != string(secret.Data[corev1.TLSCertKey]) {
		t.Errorf("the Secret changed after the policy was narrowed; it must be left as issued")
	}
	t.Logf("violation: %s", fixture.Condition(crt, certsync.ConditionPolicyViolation).Message)

	// certhub status --cluster flags it.
	var out bytes.Buffer
	cmd := app.NewCommand()
	cmd.SetArgs([]string{"status", "--kubeconfig", env.Kubeconfig, "--namespace", bed.HubNamespace(),
		"--cluster-secret-namespace", bed.ArgoNamespace(), "--timeout", "5s", "--cluster", cp.Name})
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("certhub status --cluster %s: %v\n%s", cp.Name, err, out.String())
	}
	var row string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, ns+" ") {
			row = l
		}
	}
	if !strings.Contains(row, "VIOLATION") || !strings.Contains(out.String(), "violate the current issuance policies") {
		t.Errorf("certhub status --cluster does not flag %s/web:\n%s", ns, out.String())
	}
}

// Nothing a downstream cluster admin does downstream changes the outcome:
// an IssuancePolicy created downstream, namespace labels, Certificate
// labels and annotations, a switch to a namespaced Issuer.
func TestDownstreamAdminCannotChangeOutcome(t *testing.T) {
	const ns = "downstream-admin"
	ctx := context.Background()
	cp := bed.Downstreams[0] // dev
	createPolicy(t, fixture.Policy("dev-names", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Clusters: &hubapi.ClusterSelector{MatchLabels: map[string]string{"env": "dev"}}, Namespaces: onlyNamespace(ns)},
		Allowed:  hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*.dev.example.com"}, DNSNames: fixture.Values("*.dev.example.com")},
	}))
	key := create(t, cp, fixture.Certificate(ns, "grab", issuerName, fixture.WithNames("", "api.prod.example.com")))
	denied(t, cp, key, `spec.dnsNames "api.prod.example.com"`)

	// The downstream admin's moves. The test bed installs the certhub CRD
	// downstream too, so a permissive policy there is a real object.
	allowAll := fixture.Policy("allow-everything", hubapi.IssuancePolicySpec{Allowed: anyName()})
	if err := cp.Client.Create(ctx, fixture.PolicyObject(allowAll)); err != nil {
		t.Fatalf("create downstream IssuancePolicy: %v", err)
	}
	nsObj := &corev1.Namespace{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = map[string]string{"env": "prod", "certhub.io/policy": "allow"}
	if err := cp.Client.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	issuer := &cmapi.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "local"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}}}
	if err := cp.Client.Create(ctx, issuer); err != nil {
		t.Fatal(err)
	}
	crt := &cmapi.Certificate{}
	if err := cp.Client.Get(ctx, key, crt); err != nil {
		t.Fatal(err)
	}
	crt.Labels = map[string]string{"env": "prod"}
	crt.Annotations = map[string]string{"certhub.io/policy": "allow", "certhub.io/adopt": "true"}
	crt.Spec.IssuerRef = cmmeta.IssuerReference{Name: "local", Kind: cmapi.IssuerKind}
	if err := cp.Client.Update(ctx, crt); err != nil {
		t.Fatal(err)
	}
	gen := crt.Generation
	crt = fixture.WaitFor(t, cp.Client, key, "PolicyDenied for the new generation", func(c *cmapi.Certificate) bool {
		r := fixture.Condition(c, cmapi.CertificateConditionReady)
		return r != nil && r.ObservedGeneration == gen && r.Reason == reasons.PolicyDenied
	})
	msg := fixture.Condition(crt, cmapi.CertificateConditionReady).Message
	if !strings.Contains(msg, `(dev-names); dev-names: spec.dnsNames "api.prod.example.com" is not allowed`) {
		t.Errorf("message %q: want the hub's dev-names policy to decide, as before", msg)
	}
	noSecret(t, cp, crt)
}

func leaf(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if block == nil {
		t.Fatalf("Secret %s/%s has no PEM in tls.crt", s.Namespace, s.Name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// `certhub policy check` against the live hub reads the hub's policies and
// the cluster's labels from its Argo CD cluster Secret, and agrees with the
// hub.
func TestPolicyCheckAgainstTheLiveHub(t *testing.T) {
	const ns = "check-live"
	createPolicy(t, fixture.Policy("check-dev", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Clusters: &hubapi.ClusterSelector{MatchLabels: map[string]string{"env": "dev"}}, Namespaces: onlyNamespace(ns)},
		Allowed:  hubapi.PolicyAllowed{DNSNames: fixture.Values("*.dev.example.com")},
	}))
	manifest := filepath.Join(t.TempDir(), "certs.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: ok}
spec:
  secretName: ok-tls
  dnsNames: [api.dev.example.com]
  issuerRef: {kind: ClusterIssuer, name: policy-ca}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: grab}
spec:
  secretName: grab-tls
  dnsNames: [api.prod.example.com]
  issuerRef: {kind: ClusterIssuer, name: policy-ca}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(cluster string) (string, error) {
		var out bytes.Buffer
		cmd := app.NewCommand()
		cmd.SetArgs([]string{"policy", "check", "--kubeconfig", env.Kubeconfig, "--cluster-secret-namespace", bed.ArgoNamespace(),
			"--cluster", cluster, "--namespace", ns, manifest})
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := check("cluster-1") // env=dev
	t.Log(out)
	if err == nil || !strings.Contains(out, `ALLOWED check-live/ok: allowed by IssuancePolicy "check-dev"`) ||
		!strings.Contains(out, `DENIED  check-live/grab: denied by every IssuancePolicy that selects it (check-dev)`) {
		t.Errorf("cluster-1: err %v, output:\n%s", err, out)
	}
	out, err = check("cluster-2") // env=prod: nothing selects, and the default the check assumes is deny
	if err == nil || strings.Count(out, "no IssuancePolicy selects cluster \"cluster-2\"") != 2 {
		t.Errorf("cluster-2: err %v, output:\n%s", err, out)
	}
}
