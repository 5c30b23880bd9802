package issuers

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const ns = "certhub"

// keyPair returns PEM cert and key; isCA controls basicConstraints.
func keyPair(t testing.TB, isCA bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	certPEM, _, err = pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err = pki.EncodePrivateKey(key, cmapi.PKCS8)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

func resolver(t *testing.T, objs ...client.Object) *Resolver {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := cmapi.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Client: fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build(), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func caIssuer(name, secret string) *cmapi.ClusterIssuer {
	return &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: secret}}}}
}

func tlsSecret(name string, certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
}

func ref(kind, name string) cmmeta.IssuerReference {
	return cmmeta.IssuerReference{Name: name, Kind: kind, Group: "cert-manager.io"}
}

func TestResolveErrorsCarryReasons(t *testing.T) {
	caPEM, _ := keyPair(t, true)
	leafPEM, leafKey := keyPair(t, false)
	r := resolver(t,
		caIssuer("no-secret", "missing"),
		caIssuer("not-a-ca", "leaf"), tlsSecret("leaf", leafPEM, leafKey),
		caIssuer("mismatched", "mixed"), tlsSecret("mixed", caPEM, leafKey),
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "acme"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{}}},
	)
	tests := []struct {
		name   string
		ref    cmmeta.IssuerReference
		reason string
	}{
		{"missing ClusterIssuer", ref(cmapi.ClusterIssuerKind, "nope"), ReasonIssuerNotFound},
		{"namespaced Issuer without a downstream reader", ref(cmapi.IssuerKind, "x"), ReasonIssuerNotSupported},
		{"default kind is Issuer", cmmeta.IssuerReference{Name: "x"}, ReasonIssuerNotSupported},
		{"unknown kind", cmmeta.IssuerReference{Name: "x", Kind: "Vault"}, ReasonIssuerNotSupported},
		{"foreign group", cmmeta.IssuerReference{Name: "x", Kind: "Thing", Group: "example.com"}, ReasonIssuerNotSupported},
		{"CA Secret missing", ref(cmapi.ClusterIssuerKind, "no-secret"), ReasonIssuerNotReady},
		{"CA certificate is not a CA", ref(cmapi.ClusterIssuerKind, "not-a-ca"), ReasonIssuerNotReady},
		{"CA key does not match", ref(cmapi.ClusterIssuerKind, "mismatched"), ReasonIssuerNotReady},
		{"no supported issuer type", ref(cmapi.ClusterIssuerKind, "acme"), ReasonIssuerNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Resolve(context.Background(), tt.ref, "default", nil)
			var ie *Error
			if !errors.As(err, &ie) || ie.Reason != tt.reason {
				t.Fatalf("err = %v, want *Error with reason %s", err, tt.reason)
			}
		})
	}
}

func template(t *testing.T, dns string) (*x509.Certificate, *cmapi.Certificate) {
	t.Helper()
	crt := &cmapi.Certificate{Spec: cmapi.CertificateSpec{DNSNames: []string{dns}, PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm}}}
	tmpl, err := pki.CertificateTemplateFromCertificate(crt)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl, crt
}

func TestCAIssuerSignsAChainThatVerifies(t *testing.T) {
	caPEM, caKey := keyPair(t, true)
	r := resolver(t, caIssuer("ca", "ca-kp"), tlsSecret("ca-kp", caPEM, caKey))
	iss, err := r.Resolve(context.Background(), ref(cmapi.ClusterIssuerKind, "ca"), "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, crt := template(t, "a.example.com")
	key, _ := pki.GeneratePrivateKeyForCertificate(crt)
	res, err := iss.Sign(context.Background(), Request{Template: tmpl, PublicKey: key.Public(), PrivateKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.CAPEM) != string(caPEM) {
		t.Errorf("ca.crt is not the CA certificate")
	}
	leaf, err := pki.DecodeX509CertificateBytes(res.ChainPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(res.CAPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "a.example.com"}); err != nil {
		t.Errorf("leaf does not verify against the CA: %v", err)
	}
	if ok, _ := pki.PublicKeyMatchesCertificate(key.Public(), leaf); !ok {
		t.Errorf("leaf is not for the requested key")
	}
}

func TestSelfSignedIsItsOwnCA(t *testing.T) {
	r := resolver(t, &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "ss"},
		Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}}})
	iss, err := r.Resolve(context.Background(), ref(cmapi.ClusterIssuerKind, "ss"), "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, crt := template(t, "s.example.com")
	key, _ := pki.GeneratePrivateKeyForCertificate(crt)
	res, err := iss.Sign(context.Background(), Request{Template: tmpl, PublicKey: key.Public(), PrivateKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.CAPEM) != string(res.ChainPEM) {
		t.Errorf("self-signed ca.crt should be the certificate itself")
	}
	if _, err := iss.Sign(context.Background(), Request{Template: tmpl, PublicKey: key.Public()}); err == nil {
		t.Errorf("self-signing without the private key should fail")
	}
}

// BenchmarkSign measures the raw key generation + signing cost per
// certificate, the physical limit of issuance on this machine.
func BenchmarkSign(b *testing.B) {
	for _, alg := range []struct {
		name string
		pk   cmapi.CertificatePrivateKey
	}{
		{"ECDSA-P256", cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256}},
		{"RSA-2048", cmapi.CertificatePrivateKey{Algorithm: cmapi.RSAKeyAlgorithm, Size: 2048}},
	} {
		b.Run(alg.name, func(b *testing.B) {
			caPEM, caKey := keyPair(b, true)
			c, err := newCA(caPEM, caKey)
			if err != nil {
				b.Fatal(err)
			}
			crt := &cmapi.Certificate{Spec: cmapi.CertificateSpec{DNSNames: []string{"b.example.com"}, PrivateKey: &alg.pk}}
			for b.Loop() {
				key, err := pki.GeneratePrivateKeyForCertificate(crt)
				if err != nil {
					b.Fatal(err)
				}
				tmpl, err := pki.CertificateTemplateFromCertificate(crt)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Sign(context.Background(), Request{Template: tmpl, PublicKey: key.Public()}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// NamesOf and NamesOfCSR count every name a request asks for, of every
// kind, so the limit cannot be passed by spreading names over kinds.
func TestNamesOf(t *testing.T) {
	crt := &cmapi.Certificate{Spec: cmapi.CertificateSpec{CommonName: "a", DNSNames: []string{"a", "b"}, IPAddresses: []string{"10.0.0.1"},
		URIs: []string{"spiffe://x/y"}, EmailAddresses: []string{"a@b.c"}, OtherNames: []cmapi.OtherName{{OID: "1.2.3.4", UTF8Value: "x"}},
		PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm}}}
	if n := NamesOf(crt); n != 7 {
		t.Errorf("NamesOf = %d, want 7", n)
	}
	csr, err := CertificateRequest(crt)
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, csr, key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	if n := NamesOfCSR(parsed); n != 7 { // CN + 6 SANs, the otherName among them
		t.Errorf("NamesOfCSR = %d, want 7", n)
	}
	crt.Spec.LiteralSubject, crt.Spec.CommonName = "CN=a,O=b,DC=c", ""
	if n := NamesOf(crt); n != 9 {
		t.Errorf("NamesOf with a literalSubject = %d, want 9", n)
	}
}
