package certsync

import (
	"crypto"
	"crypto/x509"
	"strings"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/issuers"
)

// testCA is a CA key pair shared by the property test's CA-signed cases.
var testCA = sync.OnceValues(func() ([]*x509.Certificate, crypto.Signer) {
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		panic(err)
	}
	tmpl, err := pki.CertificateTemplateFromCertificate(&cmapi.Certificate{Spec: cmapi.CertificateSpec{
		CommonName: "property test CA", IsCA: true, Duration: &metav1.Duration{Duration: 10 * 365 * 24 * time.Hour},
		PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm},
	}})
	if err != nil {
		panic(err)
	}
	_, cert, err := pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		panic(err)
	}
	return []*x509.Certificate{cert}, key
})

// issuedSecret issues crt the way the reconciler does (key for the spec,
// certificateTemplate, CA or self-signed as the issuance package signs) and
// returns the Secret certhub would write.
func issuedSecret(t testing.TB, crt *cmapi.Certificate, selfSigned bool) *corev1.Secret {
	t.Helper()
	key, err := pki.GeneratePrivateKeyForCertificate(crt)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	tmpl, err := issuers.Template(crt)
	if err != nil {
		t.Fatalf("template of a valid spec: %v", err)
	}
	var chainPEM, caPEM []byte
	if selfSigned {
		if chainPEM, _, err = pki.SignCertificate(tmpl, tmpl, key.Public(), key); err != nil {
			t.Fatalf("self-sign: %v", err)
		}
		caPEM = chainPEM
	} else {
		certs, caKey := testCA()
		tmpl.PublicKey = key.Public()
		bundle, err := pki.SignCSRTemplate(certs, caKey, tmpl)
		if err != nil {
			t.Fatalf("sign with CA: %v", err)
		}
		chainPEM, caPEM = bundle.ChainPEM, bundle.CAPEM
	}
	cert, err := pki.DecodeX509CertificateBytes(chainPEM)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodePrivateKey(key, crt.Spec.PrivateKey.Encoding)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := secretApply(crt, secretData{certPEM: chainPEM, keyPEM: keyPEM, caPEM: caPEM, cert: cert}, "replica-0")
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: *ac.Name, Namespace: *ac.Namespace, Annotations: ac.Annotations, Labels: ac.Labels},
		Type:       *ac.Type,
		Data:       ac.Data,
	}
}

// allUsages indexes the usages a fuzzed bitmask picks from.
var allUsages = []cmapi.KeyUsage{
	cmapi.UsageSigning, cmapi.UsageDigitalSignature, cmapi.UsageContentCommitment, cmapi.UsageKeyEncipherment,
	cmapi.UsageKeyAgreement, cmapi.UsageDataEncipherment, cmapi.UsageCertSign, cmapi.UsageCRLSign,
	cmapi.UsageEncipherOnly, cmapi.UsageDecipherOnly, cmapi.UsageAny, cmapi.UsageServerAuth, cmapi.UsageClientAuth,
	cmapi.UsageCodeSigning, cmapi.UsageEmailProtection, cmapi.UsageSMIME, cmapi.UsageIPsecEndSystem,
	cmapi.UsageIPsecTunnel, cmapi.UsageIPsecUser, cmapi.UsageTimestamping, cmapi.UsageOCSPSigning,
	cmapi.UsageMicrosoftSGC, cmapi.UsageNetscapeSGC,
}

// keyParams maps a fuzzed byte to key parameters; RSA is rare because it is slow.
func keyParams(k uint8) *cmapi.CertificatePrivateKey {
	enc := cmapi.PKCS1
	if k&0x80 != 0 {
		enc = cmapi.PKCS8
	}
	switch k & 0x0f {
	case 1:
		return &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 384, Encoding: enc}
	case 2:
		return &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 521, Encoding: enc}
	case 3:
		return &cmapi.CertificatePrivateKey{Algorithm: cmapi.Ed25519KeyAlgorithm, Encoding: cmapi.PKCS8}
	case 4:
		return &cmapi.CertificatePrivateKey{Algorithm: cmapi.RSAKeyAlgorithm, Size: 2048, Encoding: enc}
	default:
		return &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256, Encoding: enc}
	}
}

// literalOf writes subject fields as a literalSubject; "" when all are empty.
func literalOf(cn, org, serial string) string {
	var parts []string
	for _, kv := range [][2]string{{"CN", cn}, {"O", org}, {"SERIALNUMBER", serial}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+ldapEscape(kv[1]))
		}
	}
	return strings.Join(parts, ",")
}

// ldapEscape escapes an attribute value for an RFC 4514 string.
func ldapEscape(v string) string {
	var b strings.Builder
	for i, r := range v {
		if strings.ContainsRune(`,+"\<>;=`, r) || (i == 0 && (r == '#' || r == ' ')) || (i == len(v)-1 && r == ' ') {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// split turns a fuzzed string into a list (";"-separated; "" is none).
func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ";")
}

// FuzzIssuedCertificateStaysPut is the property that no spec can make its
// own certificate look stale: for every spec that passes validation, the
// certificate built and signed from it (CA or self-signed) satisfies the
// whole trigger chain right after issuance. A violation is a re-issue loop.
func FuzzIssuedCertificateStaysPut(f *testing.F) {
	// Seeds: the shapes of the field-parity tests and cert-manager's docs.
	// cn, dns, ips, uris, emails, otherOID, otherValue, literal, org, serial, isCA, usages, key, hours, selfSigned
	f.Add("web.example.com", "web.example.com", "", "", "", "", "", "", "", "", false, uint32(0), uint8(0), uint16(2160), false)
	f.Add("", "a.example.com;*.a.example.com", "10.1.2.3;fd00::1", "spiffe://cluster.local/ns/a/sa/b", "ops@example.com",
		"1.3.6.1.4.1.311.20.2.3", "upn@example.com", "", "Example Org;Other Org", "42", false, uint32(1<<1|1<<3|1<<11|1<<12), uint8(0x81), uint16(2), false)
	f.Add("", "", "", "", "", "", "", "CN=Team Sub CA,OU=Platform,O=Example Org,C=DE", "", "", true, uint32(0), uint8(0), uint16(8760), false)
	f.Add("", "b.example.com", "", "", "", "", "", "CN=literal.example.com,O=Example", "", "", false, uint32(0), uint8(3), uint16(24), true)
	f.Add("", "other.example.com", "", "", "", "", "", "app.example.com", "Example", "", false, uint32(0), uint8(0), uint16(48), false)
	f.Add("cn-only.example.com", "", "", "", "", "", "", "", "", "", false, uint32(0), uint8(4), uint16(1), true)
	f.Add("", "", "127.0.0.1", "", "", "", "", "", "", "", false, uint32(1<<11), uint8(2), uint16(48), false)
	f.Add("", "", "", "", "jane@example.com", "", "", "", "", "", false, uint32(1<<14|1<<15), uint8(1), uint16(48), false)
	f.Add("", "", "", "", "", "1.2.3.4", "only-other-name", "", "", "", false, uint32(0), uint8(0), uint16(48), false)
	f.Add("", "", "", "", "", "", "", "O=NoCommonName,C=DE", "", "", false, uint32(0), uint8(0), uint16(48), false)
	f.Add("dup.example.com", "dup.example.com;dup.example.com", "", "", "", "", "", "", "", "", false, uint32(1<<11|1<<12), uint8(0), uint16(48), false)
	f.Fuzz(func(t *testing.T, cn, dns, ips, uris, emails, otherOID, otherValue, literal, org, serial string,
		isCA bool, usageBits uint32, keyKind uint8, hours uint16, selfSigned bool) {
		// A literal without "=" is a common name written as a literalSubject
		// with org and serial (CN=literal,O=org,SERIALNUMBER=serial), so the
		// fuzzer reaches literal subjects without inventing their syntax.
		if literal != "" && !strings.Contains(literal, "=") {
			literal = literalOf(literal, org, serial)
			org, serial = "", ""
		}
		crt := &cmapi.Certificate{
			ObjectMeta: metav1.ObjectMeta{Name: "prop", Namespace: "fuzz", Generation: 1},
			Spec: cmapi.CertificateSpec{
				SecretName:     "prop-tls",
				CommonName:     cn,
				DNSNames:       split(dns),
				IPAddresses:    split(ips),
				URIs:           split(uris),
				EmailAddresses: split(emails),
				LiteralSubject: literal,
				IsCA:           isCA,
				Duration:       &metav1.Duration{Duration: time.Duration(hours) * time.Hour},
				IssuerRef:      testCertificate().Spec.IssuerRef,
				PrivateKey:     keyParams(keyKind),
			},
		}
		if otherOID != "" || otherValue != "" {
			crt.Spec.OtherNames = []cmapi.OtherName{{OID: otherOID, UTF8Value: otherValue}}
		}
		if org != "" || serial != "" {
			crt.Spec.Subject = &cmapi.X509Subject{Organizations: split(org), SerialNumber: serial}
		}
		for i, u := range allUsages {
			if usageBits&(1<<i) != 0 {
				crt.Spec.Usages = append(crt.Spec.Usages, u)
			}
		}
		if certspec.ValidateSpec(crt) != nil {
			return
		}
		if _, err := issuers.Template(crt); err != nil {
			// Validation passed but cert-manager's builder refuses (e.g. a
			// name Go's x509 cannot encode): issuance ends in a terminal
			// InvalidSpec, never a loop.
			return
		}
		s := issuedSecret(t, crt, selfSigned)
		reason, msg, reissue, _ := triggerChain.evaluate(input{crt: crt, secret: s, now: time.Now()})
		if reissue {
			t.Fatalf("a freshly issued certificate is judged stale (%s: %s) for spec %+v", reason, msg, crt.Spec)
		}
	})
}
