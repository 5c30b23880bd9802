package external

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/crsign"
	"github.com/certhub/certhub/test/fixture"
)

// Certificates that name the hub through certhub.io are issued by
// cert-manager in the cluster: it generates each key, sends a request, the
// hub signs it with its CA; the Secrets are cert-manager's, and no response
// the hub received carried private-key bytes (a positive control proves
// the recording sees them).
func TestCertificatesKeepTheirKeys(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[0]
	proxy := keepsKeys
	const ns = "mesh"
	fixture.EnsureNamespace(t, cp.Client, ns)
	var crts []*cmapi.Certificate
	for i := range 5 {
		name := fmt.Sprintf("svc-%d", i)
		crt := fixture.Certificate(ns, name, hubIssuer, fixture.WithNames("", name+".mesh.example.com"), fixture.WithIssuer(hubRef))
		if err := cp.Client.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
		crts = append(crts, crt)
	}
	ca := hubCA(t)
	for _, crt := range crts {
		fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crt))
		s := fixture.GetSecret(t, cp.Client, crt)
		leaf, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
		if err != nil {
			t.Fatal(err)
		}
		key, err := pki.DecodePrivateKeyBytes(s.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			t.Fatal(err)
		}
		if err := leaf.CheckSignatureFrom(ca); err != nil {
			t.Errorf("%s: not signed by the hub's CA: %v", crt.Name, err)
		}
		if ok, err := pki.PublicKeyMatchesCertificate(key.Public(), leaf); err != nil || !ok {
			t.Errorf("%s: the key cert-manager generated does not match the certificate", crt.Name)
		}
		if s.Labels[hubapi.ManagedByLabel] != "" {
			t.Errorf("%s: the hub wrote the Secret (labels %v); cert-manager must", crt.Name, s.Labels)
		}
	}
	if keys := proxy.PrivateKeyReads(); len(keys) > 0 {
		t.Errorf("private-key bytes reached the hub in %d responses: %v", len(keys), keys)
	}
	for _, w := range proxy.Writes() {
		if !strings.Contains(w, "/certificaterequests/") && !strings.Contains(w, "/events") {
			t.Errorf("the hub wrote %s; in external mode it writes only CertificateRequest status and Events", w)
		}
	}
	if n, _ := fixture.Gauge(t, "certhub_certificaterequests_total", map[string]string{"cluster": "keeps-keys", "result": "Issued"}); n < float64(len(crts)) {
		t.Errorf("certhub_certificaterequests_total{result=Issued} = %g; want ≥ %d", n, len(crts))
	}

	// The control: a Secret with a key read through the same proxy, with
	// the hub's own credentials, is seen.
	token, err := env.Bed.ServiceAccountToken(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(&rest.Config{Host: proxy.URL(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: proxy.CAData()}}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := len(proxy.PrivateKeyReads())
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: crts[0].Spec.SecretName}, &corev1.Secret{}); err != nil {
		t.Fatal(err)
	}
	if len(proxy.PrivateKeyReads()) == before {
		t.Error("the proxy did not see the key in a Secret read through it; its check proves nothing")
	}
}

// Requests made directly, as istio-csr and csi-driver make them, follow
// cert-manager's approval contract and the hub's checks.
func TestRequestsAsIstioCSRMakesThem(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[1]
	const ns, restricted = "workloads", "restricted"
	fixture.EnsureNamespace(t, cp.Client, ns)
	fixture.EnsureNamespace(t, cp.Client, restricted)
	p := fixture.PolicyObject(fixture.Policy("restricted-names", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Namespaces: &hubapi.NamespaceSelector{MatchNames: []string{restricted}}},
		Allowed: hubapi.PolicyAllowed{DNSNames: fixture.Values("*.allowed.example.com"),
			Usages: []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageKeyEncipherment, cmapi.UsageServerAuth}},
	}))
	if err := env.Bed.Hub.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Bed.Hub.Client.Delete(context.Background(), p) })
	ec, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	weakKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	approved := request(t, ns, "approved", ec, "approved.workloads.example.com")
	waiting := request(t, ns, "waiting", ec, "waiting.workloads.example.com")
	weak := request(t, ns, "weak", weakKey, "weak.workloads.example.com")
	outside := request(t, restricted, "outside", ec, "evil.example.com")
	inside := request(t, restricted, "inside", ec, "ok.allowed.example.com")
	wrongKind := request(t, ns, "wrong-kind", ec, "kind.workloads.example.com")
	wrongKind.Spec.IssuerRef.Kind = cmapi.IssuerKind
	for _, cr := range []*cmapi.CertificateRequest{approved, waiting, weak, outside, inside, wrongKind} {
		if err := cp.Client.Create(ctx, cr); err != nil {
			t.Fatal(err)
		}
	}
	// Unapproved: the hub says it waits, and signs nothing.
	fixture.WaitEvent(t, cp.Client, ns, "waiting", crsign.ReasonWaitingForApproval, "until it is Approved")
	for _, cr := range []*cmapi.CertificateRequest{approved, weak, outside, inside, wrongKind} {
		setCondition(t, cp.Client, cr, cmapi.CertificateRequestConditionApproved, "test.approver")
	}

	got := waitRequest(t, cp.Client, approved, "Issued", func(cr *cmapi.CertificateRequest) bool {
		return readyReason(cr) == cmapi.CertificateRequestReasonIssued
	})
	leaf, err := pki.DecodeX509CertificateBytes(got.Status.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.CheckSignatureFrom(hubCA(t)); err != nil {
		t.Errorf("approved: not signed by the hub's CA: %v", err)
	}
	if ok, _ := pki.PublicKeyMatchesCertificate(ec.Public(), leaf); !ok {
		t.Error("approved: the certificate is not for the request's key")
	}
	if !bytes.Equal(bytes.TrimSpace(got.Status.CA), bytes.TrimSpace(env.CAPEM)) {
		t.Errorf("approved: status.ca is not the hub's CA:\n%s", got.Status.CA)
	}

	waitRequest(t, cp.Client, inside, "Issued (inside the policy)", func(cr *cmapi.CertificateRequest) bool {
		return readyReason(cr) == cmapi.CertificateRequestReasonIssued
	})
	for _, tc := range []struct {
		cr   *cmapi.CertificateRequest
		says string
	}{
		{weak, "RSA key of 1024 bits"},
		{outside, "denied by every IssuancePolicy that selects it (restricted-names)"},
		{wrongKind, `kind "Issuer"`},
	} {
		cr := waitRequest(t, cp.Client, tc.cr, "Failed", func(cr *cmapi.CertificateRequest) bool {
			return readyReason(cr) == cmapi.CertificateRequestReasonFailed
		})
		c := readyCondition(cr)
		if !strings.Contains(c.Message, tc.says) || cr.Status.FailureTime == nil || len(cr.Status.Certificate) > 0 {
			t.Errorf("%s: Ready %s/%s %q, failureTime %v, %d certificate bytes; want Failed saying %q, a failureTime, nothing signed",
				cr.Name, c.Status, c.Reason, c.Message, cr.Status.FailureTime, len(cr.Status.Certificate), tc.says)
		}
	}

	// Denied: never signed.
	if cur := waitRequest(t, cp.Client, waiting, "still unsigned", func(*cmapi.CertificateRequest) bool { return true }); len(cur.Status.Certificate) > 0 {
		t.Fatal("an unapproved request was signed")
	}
	setCondition(t, cp.Client, waiting, cmapi.CertificateRequestConditionDenied, "test.approver")
	denied := waitRequest(t, cp.Client, waiting, "Denied", func(cr *cmapi.CertificateRequest) bool {
		return readyReason(cr) == cmapi.CertificateRequestReasonDenied
	})
	if len(denied.Status.Certificate) > 0 || denied.Status.FailureTime == nil {
		t.Errorf("denied: %d certificate bytes, failureTime %v; want none, and a failureTime", len(denied.Status.Certificate), denied.Status.FailureTime)
	}
}

// For the same CSR and the same CA, the hub writes on a CertificateRequest
// what cert-manager's own CA issuer controller writes, field by field,
// except the certificate's own randomness (serial, signature, notBefore's
// instant).
func TestSameFieldsAsCertManagersCAIssuer(t *testing.T) {
	ctx := context.Background()
	cp := env.Bed.Downstreams[1] // cert-manager runs there without its approver (the test approves)
	const ns, cmIssuer = "reference", "cm-same-ca"
	fixture.EnsureNamespace(t, cp.Client, ns)
	fixture.EnsureNamespace(t, cp.Client, "cert-manager")
	caSecret := &corev1.Secret{}
	if err := env.Bed.Hub.Client.Get(ctx, client.ObjectKey{Namespace: env.Bed.HubNamespace(), Name: hubIssuer + "-ca"}, caSecret); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: cmIssuer}, Type: corev1.SecretTypeTLS, Data: caSecret.Data},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: cmIssuer}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: cmIssuer}}}},
	} {
		if err := client.IgnoreAlreadyExists(cp.Client.Create(ctx, o)); err != nil {
			t.Fatal(err)
		}
	}
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	ours := request(t, ns, "by-certhub", key, "same.reference.example.com")
	theirs := ours.DeepCopy()
	theirs.Name = "by-cert-manager"
	theirs.Spec.IssuerRef = cmmeta.IssuerReference{Name: cmIssuer, Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}
	for _, cr := range []*cmapi.CertificateRequest{ours, theirs} {
		if err := cp.Client.Create(ctx, cr); err != nil {
			t.Fatal(err)
		}
		setCondition(t, cp.Client, cr, cmapi.CertificateRequestConditionApproved, "test.approver")
	}
	issued := func(cr *cmapi.CertificateRequest) bool {
		return readyReason(cr) == cmapi.CertificateRequestReasonIssued
	}
	a := waitRequest(t, cp.Client, ours, "Issued by the hub", issued)
	b := waitRequest(t, cp.Client, theirs, "Issued by cert-manager", issued)

	ra, rb := readyCondition(a), readyCondition(b)
	if ra.Status != rb.Status || ra.Reason != rb.Reason || ra.Message != rb.Message {
		t.Errorf("Ready: hub %s/%s %q; cert-manager %s/%s %q", ra.Status, ra.Reason, ra.Message, rb.Status, rb.Reason, rb.Message)
	}
	if !bytes.Equal(a.Status.CA, b.Status.CA) {
		t.Errorf("status.ca differs:\nhub %s\ncert-manager %s", a.Status.CA, b.Status.CA)
	}
	if (a.Status.FailureTime == nil) != (b.Status.FailureTime == nil) {
		t.Errorf("failureTime: hub %v, cert-manager %v", a.Status.FailureTime, b.Status.FailureTime)
	}
	ca, cb := decode(t, a.Status.Certificate), decode(t, b.Status.Certificate)
	for _, f := range []struct {
		name string
		a, b any
	}{
		{"subject", ca.Subject.String(), cb.Subject.String()},
		{"issuer", ca.Issuer.String(), cb.Issuer.String()},
		{"dnsNames", ca.DNSNames, cb.DNSNames},
		{"ipAddresses", fmt.Sprint(ca.IPAddresses), fmt.Sprint(cb.IPAddresses)},
		{"uris", fmt.Sprint(ca.URIs), fmt.Sprint(cb.URIs)},
		{"emailAddresses", ca.EmailAddresses, cb.EmailAddresses},
		{"keyUsage", ca.KeyUsage, cb.KeyUsage},
		{"extKeyUsage", ca.ExtKeyUsage, cb.ExtKeyUsage},
		{"isCA", ca.IsCA, cb.IsCA},
		{"basicConstraintsValid", ca.BasicConstraintsValid, cb.BasicConstraintsValid},
		{"validity", ca.NotAfter.Sub(ca.NotBefore), cb.NotAfter.Sub(cb.NotBefore)},
		{"signatureAlgorithm", ca.SignatureAlgorithm, cb.SignatureAlgorithm},
		{"publicKey", fmt.Sprint(ca.PublicKey), fmt.Sprint(cb.PublicKey)},
		{"authorityKeyId", fmt.Sprintf("%x", ca.AuthorityKeyId), fmt.Sprintf("%x", cb.AuthorityKeyId)},
		{"chain length", strings.Count(string(a.Status.Certificate), "BEGIN CERTIFICATE"), strings.Count(string(b.Status.Certificate), "BEGIN CERTIFICATE")},
	} {
		if fmt.Sprint(f.a) != fmt.Sprint(f.b) {
			t.Errorf("%s: hub %v; cert-manager %v", f.name, f.a, f.b)
		}
	}
	fixture.WaitEvent(t, cp.Client, ns, ours.Name, "CertificateIssued", "Certificate fetched from issuer successfully")
	fixture.WaitEvent(t, cp.Client, ns, theirs.Name, "CertificateIssued", "Certificate fetched from issuer successfully")
}

func readyCondition(cr *cmapi.CertificateRequest) cmapi.CertificateRequestCondition {
	for _, c := range cr.Status.Conditions {
		if c.Type == cmapi.CertificateRequestConditionReady {
			return c
		}
	}
	return cmapi.CertificateRequestCondition{}
}

func decode(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	c, err := pki.DecodeX509CertificateBytes(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
