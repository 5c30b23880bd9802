package multicluster

import (
	"bytes"
	"context"
	"crypto/x509"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/test/fixture"
)

var (
	ensureNamespace = fixture.EnsureNamespace
	readyCondition  = func(c *cmapi.Certificate) *cmapi.CertificateCondition {
		return fixture.Condition(c, cmapi.CertificateConditionReady)
	}
	waitFor     = fixture.WaitFor
	isReady     = fixture.IsReady
	waitReady   = fixture.WaitReady
	waitTimeout = fixture.WaitTimeout
)

func newCertificate(ns, name string, dns ...string) *cmapi.Certificate {
	return fixture.Certificate(ns, name, issuerName, fixture.WithNames("", dns...), func(c *cmapi.Certificate) { c.Spec.Duration = nil })
}

// checkIssued asserts the Secret holds what cert-manager would have written
// for crt: a chain for the requested names that verifies against ca.crt (the
// hub's CA), a matching ECDSA key, cert-manager's annotations, and a status
// that describes that certificate.
func checkIssued(t *testing.T, c client.Client, crt *cmapi.Certificate) (*corev1.Secret, *x509.Certificate) {
	t.Helper()
	return checkIssuedKeepType(t, c, crt, corev1.SecretTypeTLS)
}

// checkIssuedKeepType is checkIssued for a Secret whose type must be wantType
// (an adopted Secret keeps its type, as with cert-manager).
func checkIssuedKeepType(t *testing.T, c client.Client, crt *cmapi.Certificate, wantType corev1.SecretType) (*corev1.Secret, *x509.Certificate) {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}, s); err != nil {
		t.Fatalf("get Secret: %v", err)
	}
	if s.Type != wantType {
		t.Errorf("Secret type = %q, want %q", s.Type, wantType)
	}
	if !bytes.Equal(s.Data[cmmeta.TLSCAKey], caPEM) {
		t.Errorf("ca.crt is not the hub CA's certificate")
	}
	chain, err := pki.DecodeX509CertificateChainBytes(s.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatalf("decode tls.crt: %v", err)
	}
	leaf := chain[0]
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.Data[cmmeta.TLSCAKey]) {
		t.Fatalf("ca.crt holds no certificate")
	}
	for _, name := range crt.Spec.DNSNames {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("certificate does not verify for %s against ca.crt: %v", name, err)
		}
	}
	if got, want := leaf.DNSNames, crt.Spec.DNSNames; !equalStrings(got, want) {
		t.Errorf("DNS names = %v, want %v", got, want)
	}
	key, err := pki.DecodePrivateKeyBytes(s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatalf("decode tls.key: %v", err)
	}
	if ok, err := pki.PublicKeyMatchesCertificate(key.Public(), leaf); err != nil || !ok {
		t.Errorf("tls.key does not match tls.crt (err %v)", err)
	}
	if v := pki.PrivateKeyMatchesSpec(key, crt.Spec); len(v) > 0 {
		t.Errorf("private key does not match spec: %v", v)
	}
	wantAnn := map[string]string{
		cmapi.CertificateNameKey:       crt.Name,
		cmapi.IssuerNameAnnotationKey:  issuerName,
		cmapi.IssuerKindAnnotationKey:  cmapi.ClusterIssuerKind,
		cmapi.IssuerGroupAnnotationKey: "cert-manager.io",
		cmapi.AltNamesAnnotationKey:    joinComma(crt.Spec.DNSNames),
	}
	for k, v := range wantAnn {
		if s.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, s.Annotations[k], v)
		}
	}
	if s.Labels[cmapi.PartOfCertManagerControllerLabelKey] != "true" {
		t.Errorf("label %s missing", cmapi.PartOfCertManagerControllerLabelKey)
	}
	st := crt.Status
	if st.NotBefore == nil || !st.NotBefore.Time.Equal(leaf.NotBefore) || st.NotAfter == nil || !st.NotAfter.Time.Equal(leaf.NotAfter) {
		t.Errorf("status notBefore/notAfter = %v/%v, want %v/%v", st.NotBefore, st.NotAfter, leaf.NotBefore, leaf.NotAfter)
	}
	if st.RenewalTime == nil || !st.RenewalTime.After(leaf.NotBefore) || !st.RenewalTime.Time.Before(leaf.NotAfter) {
		t.Errorf("status renewalTime = %v, want between notBefore and notAfter", st.RenewalTime)
	}
	if st.Revision == nil || *st.Revision < 1 {
		t.Errorf("status revision = %v, want >= 1", st.Revision)
	}
	return s, leaf
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func joinComma(s []string) string {
	var b bytes.Buffer
	for i, v := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(v)
	}
	return b.String()
}
