package issuance

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	jks "github.com/pavlo-v-chernykh/keystore-go/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"software.sslmate.com/src/go-pkcs12"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
)

// issue creates crt in the first downstream cluster and returns it Ready
// with its Secret and parsed leaf.
func issue(t *testing.T, crt *cmapi.Certificate) (*cmapi.Certificate, *corev1.Secret, *x509.Certificate) {
	t.Helper()
	c := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, c, crt.Namespace)
	if err := c.Create(context.Background(), crt); err != nil {
		t.Fatalf("create Certificate: %v", err)
	}
	got := fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt))
	s := fixture.GetSecret(t, c, got)
	leaf, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatalf("decode tls.crt: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("certificate does not chain to the hub CA: %v", err)
	}
	if !bytes.Equal(s.Data[cmmeta.TLSCAKey], caPEM) {
		t.Errorf("ca.crt is not the hub CA")
	}
	if !got.Status.NotAfter.Time.Equal(leaf.NotAfter) || !got.Status.NotBefore.Time.Equal(leaf.NotBefore) {
		t.Errorf("status validity %v–%v, certificate %v–%v", got.Status.NotBefore, got.Status.NotAfter, leaf.NotBefore, leaf.NotAfter)
	}
	expectStable(t, c, got)
	return got, s, leaf
}

// stableFor is the quiet period of the stability invariant: a re-issue loop
// runs one issuance per reconcile (tens per second), so it shows in far less.
const stableFor = 2 * time.Second

// expectStable checks the stability invariant for Ready Certificates: for
// stableFor their revision and Secret stay as they are and the hub logs no
// issuance for them.
func expectStable(t *testing.T, c client.Client, crts ...*cmapi.Certificate) {
	t.Helper()
	fixture.ExpectStable(t, c, crts, stableFor, func() int {
		n := 0
		for _, crt := range crts {
			n += issuancesLogged(crt.Namespace, crt.Name)
		}
		return n
	})
}

func base(name string) *cmapi.Certificate {
	return fixture.Certificate("fields", name, issuerName)
}

func TestNamesSubjectAndUsages(t *testing.T) {
	crt := fixture.ParityCertificate("fields", issuerName, "names")
	_, s, leaf := issue(t, crt)

	if leaf.Subject.CommonName != "names.example.com" || !slices.Equal(leaf.DNSNames, crt.Spec.DNSNames) {
		t.Errorf("CN %q DNS %v", leaf.Subject.CommonName, leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 2 || !leaf.IPAddresses[0].Equal(net.ParseIP("10.1.2.3")) || !leaf.IPAddresses[1].Equal(net.ParseIP("fd00::1")) {
		t.Errorf("IPs %v", leaf.IPAddresses)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != crt.Spec.URIs[0] || !slices.Equal(leaf.EmailAddresses, crt.Spec.EmailAddresses) {
		t.Errorf("URIs %v emails %v", leaf.URIs, leaf.EmailAddresses)
	}
	if got := otherNamesOf(t, leaf); len(got) != 1 || got[0] != crt.Spec.OtherNames[0] {
		t.Errorf("otherNames %+v, want %+v", got, crt.Spec.OtherNames)
	}
	sub := leaf.Subject
	if !slices.Equal(sub.Organization, []string{"Example Org"}) || !slices.Equal(sub.Country, []string{"DE"}) ||
		!slices.Equal(sub.OrganizationalUnit, []string{"Platform"}) || !slices.Equal(sub.Locality, []string{"Berlin"}) ||
		!slices.Equal(sub.Province, []string{"Berlin"}) || !slices.Equal(sub.StreetAddress, []string{"Main St 1"}) ||
		!slices.Equal(sub.PostalCode, []string{"10115"}) || sub.SerialNumber != "42" {
		t.Errorf("subject %+v", sub)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != 2*time.Hour {
		t.Errorf("validity %s, want 2h", got)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment ||
		!slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("usages %v %v", leaf.KeyUsage, leaf.ExtKeyUsage)
	}
	if leaf.IsCA {
		t.Errorf("leaf must not be a CA")
	}
	for k, v := range map[string]string{
		cmapi.IPSANAnnotationKey: "10.1.2.3,fd00::1", cmapi.URISANAnnotationKey: crt.Spec.URIs[0], cmapi.EmailsAnnotationKey: "ops@example.com",
		cmapi.SubjectOrganizationsAnnotationKey: "Example Org", cmapi.SubjectSerialNumberAnnotationKey: "42", "owner": "ops",
	} {
		if s.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, s.Annotations[k], v)
		}
	}
	if s.Labels["team"] != "platform" {
		t.Errorf("secretTemplate label missing")
	}
}

func TestKeyTypesAndEncodings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pk      cmapi.CertificatePrivateKey
		pemType string
		check   func(any) bool
	}{
		{"rsa-2048-pkcs1", cmapi.CertificatePrivateKey{Algorithm: cmapi.RSAKeyAlgorithm, Size: 2048, Encoding: cmapi.PKCS1}, "RSA PRIVATE KEY",
			func(k any) bool { r, ok := k.(*rsa.PrivateKey); return ok && r.N.BitLen() == 2048 }},
		{"rsa-3072-pkcs8", cmapi.CertificatePrivateKey{Algorithm: cmapi.RSAKeyAlgorithm, Size: 3072, Encoding: cmapi.PKCS8}, "PRIVATE KEY",
			func(k any) bool { r, ok := k.(*rsa.PrivateKey); return ok && r.N.BitLen() == 3072 }},
		{"ecdsa-384-pkcs1", cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 384}, "EC PRIVATE KEY",
			func(k any) bool { e, ok := k.(*ecdsa.PrivateKey); return ok && e.Curve == elliptic.P384() }},
		{"ecdsa-521-pkcs8", cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 521, Encoding: cmapi.PKCS8}, "PRIVATE KEY",
			func(k any) bool { e, ok := k.(*ecdsa.PrivateKey); return ok && e.Curve == elliptic.P521() }},
		{"ed25519", cmapi.CertificatePrivateKey{Algorithm: cmapi.Ed25519KeyAlgorithm, Encoding: cmapi.PKCS8}, "PRIVATE KEY",
			func(k any) bool { _, ok := k.(ed25519.PrivateKey); return ok }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crt := fixture.ParityCertificate("fields", issuerName, tc.name)
			if *crt.Spec.PrivateKey != tc.pk {
				t.Fatalf("fixture key %+v, want %+v", *crt.Spec.PrivateKey, tc.pk)
			}
			_, s, leaf := issue(t, crt)
			block, _ := pem.Decode(s.Data[corev1.TLSPrivateKeyKey])
			if block == nil || block.Type != tc.pemType {
				t.Fatalf("tls.key PEM type %v, want %q", block, tc.pemType)
			}
			key, err := pki.DecodePrivateKeyBytes(s.Data[corev1.TLSPrivateKeyKey])
			if err != nil || !tc.check(key) {
				t.Fatalf("key %T (err %v) does not match %+v", key, err, tc.pk)
			}
			if ok, _ := pki.PublicKeyMatchesCertificate(key.Public(), leaf); !ok {
				t.Errorf("key does not match certificate")
			}
		})
	}
}

func TestCAAndLiteralSubject(t *testing.T) {
	// A CA is issued only where a policy allows it, under --default-policy
	// allow too: this one, in a namespace of its own.
	zero := 0
	p := fixture.PolicyObject(fixture.Policy("fields-sub-ca", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Namespaces: &hubapi.NamespaceSelector{MatchNames: []string{"fields-ca"}}},
		Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "Team Sub CA"}, DNSNames: fixture.Values("*.example.com"), IsCA: true, MaxPathLen: &zero,
			Subject: &hubapi.SubjectAllowed{OrganizationalUnits: fixture.Values("Platform"), Organizations: fixture.Values("Example Org"), Countries: fixture.Values("DE")}},
	}))
	if err := bed.Hub.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Hub.Client.Delete(context.Background(), p) })
	crt := fixture.ParityCertificate("fields-ca", issuerName, "sub-ca")
	_, _, leaf := issue(t, crt)
	if leaf.MaxPathLen != 0 || !leaf.MaxPathLenZero || len(leaf.PermittedDNSDomains) != 1 || leaf.PermittedDNSDomains[0] != ".example.com" {
		t.Errorf("sub-CA path length %d (zero %v), permitted DNS %v: want the policy's", leaf.MaxPathLen, leaf.MaxPathLenZero, leaf.PermittedDNSDomains)
	}
	if !leaf.IsCA || !leaf.BasicConstraintsValid || leaf.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("isCA not honoured: IsCA %v BasicConstraintsValid %v KeyUsage %v", leaf.IsCA, leaf.BasicConstraintsValid, leaf.KeyUsage)
	}
	if got := leaf.Subject.String(); got != "CN=Team Sub CA,OU=Platform,O=Example Org,C=DE" {
		t.Errorf("literal subject = %q", got)
	}
}

// Regression: a literalSubject whose CN is not one of the dnsNames was
// re-issued on every reconcile (revision 1 → 151 in 13 s). cert-manager's
// docs shape: literalSubject with CN, and dnsNames.
func TestLiteralSubjectWithDNSNamesStaysPut(t *testing.T) {
	crt := fixture.ParityCertificate("fields", issuerName, "literal-dns")
	got, _, leaf := issue(t, crt) // issue checks the stability invariant
	if leaf.Subject.CommonName != "literal-dns.example.com" || !slices.Equal(leaf.DNSNames, crt.Spec.DNSNames) {
		t.Errorf("CN %q DNS %v", leaf.Subject.CommonName, leaf.DNSNames)
	}
	if revision(got) != 1 {
		t.Errorf("revision %d, want 1", revision(got))
	}
}

func TestKeystoresAndOutputFormats(t *testing.T) {
	c := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, c, "fields")
	pwSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fields", Name: "p12-password"}, StringData: map[string]string{"pw": "s3cret"}}
	if err := client.IgnoreAlreadyExists(c.Create(context.Background(), pwSecret)); err != nil {
		t.Fatal(err)
	}
	crt := fixture.ParityCertificate("fields", issuerName, "stores")
	_, s, leaf := issue(t, crt)

	key, certs, _, err := pkcs12.DecodeChain(s.Data[cmapi.PKCS12SecretKey], "s3cret")
	if err != nil || !certs.Equal(leaf) {
		t.Errorf("keystore.p12 does not open with the Secret's password or holds another certificate: %v", err)
	}
	if _, ok := key.(*ecdsa.PrivateKey); !ok {
		t.Errorf("keystore.p12 key is %T", key)
	}
	if trust, err := pkcs12.DecodeTrustStore(s.Data[cmapi.PKCS12TruststoreKey], "s3cret"); err != nil || len(trust) != 1 {
		t.Errorf("truststore.p12: %v (%d certificates)", err, len(trust))
	}
	ks := jks.New()
	if err := ks.Load(bytes.NewReader(s.Data[cmapi.JKSSecretKey]), []byte("changeit")); err != nil {
		t.Fatalf("keystore.jks does not load with its password: %v", err)
	}
	entry, err := ks.GetPrivateKeyEntry("web", []byte("changeit"))
	if err != nil || len(entry.CertificateChain) == 0 || !bytes.Equal(entry.CertificateChain[0].Content, leaf.Raw) {
		t.Errorf("keystore.jks entry %q: %v", "web", err)
	}
	ts := jks.New()
	if err := ts.Load(bytes.NewReader(s.Data[cmapi.JKSTruststoreKey]), []byte("changeit")); err != nil || !ts.IsTrustedCertificateEntry("ca") {
		t.Errorf("truststore.jks: %v", err)
	}
	block, _ := pem.Decode(s.Data[corev1.TLSPrivateKeyKey])
	if !bytes.Equal(s.Data[cmapi.CertificateOutputFormatDERKey], block.Bytes) {
		t.Errorf("key.der is not the DER of tls.key")
	}
	combined := append(append(append([]byte{}, s.Data[corev1.TLSPrivateKeyKey]...), '\n'), s.Data[corev1.TLSCertKey]...)
	if !bytes.Equal(s.Data[cmapi.CertificateOutputFormatCombinedPEMKey], combined) {
		t.Errorf("tls-combined.pem is not key + certificate")
	}
}

// A keystore whose password Secret is missing waits with a reason and is
// issued once the Secret appears.
func TestKeystorePasswordSecretAppearsLater(t *testing.T) {
	c := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, c, "fields")
	crt := base("late-pw")
	crt.Spec.Keystores = &cmapi.CertificateKeystores{PKCS12: &cmapi.PKCS12Keystore{Create: true,
		PasswordSecretRef: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: "late-password"}, Key: "pw"}}}
	if err := c.Create(context.Background(), crt); err != nil {
		t.Fatal(err)
	}
	fixture.WaitFor(t, c, client.ObjectKeyFromObject(crt), "Ready=False/KeystorePasswordSecretNotFound", fixture.NotReadyWith("KeystorePasswordSecretNotFound"))
	pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fields", Name: "late-password"}, StringData: map[string]string{"pw": "later"}}
	if err := c.Create(context.Background(), pw); err != nil {
		t.Fatal(err)
	}
	got := fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt))
	expectStable(t, c, got)
	if _, _, _, err := pkcs12.DecodeChain(fixture.GetSecret(t, c, got).Data[cmapi.PKCS12SecretKey], "later"); err != nil {
		t.Errorf("keystore.p12 does not open with the late password: %v", err)
	}
}

// A Go HTTPS server loaded from the downstream Secret is reached by a client
// that trusts only the Secret's ca.crt.
func TestTLSHandshake(t *testing.T) {
	crt := base("handshake")
	crt.Spec.DNSNames = []string{"localhost"}
	crt.Spec.IPAddresses = []string{"127.0.0.1"}
	_, s, _ := issue(t, crt)
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatalf("tls.crt/tls.key do not form a key pair: %v", err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello over certhub TLS") }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.Data[cmmeta.TLSCAKey]) {
		t.Fatal("ca.crt holds no certificate")
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	for _, host := range []string{"localhost", "127.0.0.1"} {
		_, port, _ := net.SplitHostPort(l.Addr().String())
		resp, err := hc.Get("https://" + net.JoinHostPort(host, port))
		if err != nil {
			t.Fatalf("GET via %s: %v", host, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello over certhub TLS" {
			t.Errorf("body %q", body)
		}
	}
}

// otherNamesOf returns the UTF-8 otherName SANs of cert.
func otherNamesOf(t *testing.T, cert *x509.Certificate) []cmapi.OtherName {
	t.Helper()
	var out []cmapi.OtherName
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(asn1.ObjectIdentifier{2, 5, 29, 17}) {
			continue
		}
		sans, err := pki.UnmarshalSANs(ext.Value)
		if err != nil {
			t.Fatalf("SAN extension: %v", err)
		}
		for _, on := range sans.OtherNames {
			var inner asn1.RawValue
			if _, err := asn1.Unmarshal(on.Value.Bytes, &inner); err != nil {
				t.Fatal(err)
			}
			uv, err := pki.UnmarshalUniversalValue(inner)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, cmapi.OtherName{OID: on.TypeID.String(), UTF8Value: uv.UTF8String})
		}
	}
	return out
}
