package policy

import (
	"crypto/x509"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
)

// The policy judges the certificate that is signed: a literalSubject with a
// second common name, in either order or in one multi-valued RDN, is denied
// naming it, while a neighbour with one allowed common name issues.
func TestEveryCommonNameIsChecked(t *testing.T) {
	const ns = "every-cn"
	createPolicy(t, fixture.Policy("every-cn", hubapi.IssuancePolicySpec{Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(ns)},
		Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*.dev.example.com"}, DNSNames: fixture.Values("*.dev.example.com")}}))
	cp := bed.Downstreams[0]
	literal := func(name, subject string) client.ObjectKey {
		return create(t, cp, fixture.Certificate(ns, name, issuerName, fixture.WithNames("", "a.dev.example.com"),
			fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.LiteralSubject = subject })))
	}
	neighbour := literal("one-cn", "CN=a.dev.example.com")
	bad := map[string]string{
		"allowed-first":  "CN=a.dev.example.com,CN=postgres",
		"allowed-last":   "CN=postgres,CN=a.dev.example.com",
		"multi-valued":   "CN=a.dev.example.com+CN=postgres",
		"multi-reversed": "CN=postgres+CN=a.dev.example.com",
	}
	keys := map[string]client.ObjectKey{}
	for name, subject := range bad {
		keys[name] = literal(name, subject)
	}
	crt := fixture.WaitReady(t, cp.Client, neighbour)
	if cns := subjectCNs(t, leaf(t, fixture.GetSecret(t, cp.Client, crt))); len(cns) != 1 || cns[0] != "a.dev.example.com" {
		t.Errorf("the neighbour's certificate has common names %v", cns)
	}
	for name, key := range keys {
		t.Run(name, func(t *testing.T) {
			denied(t, cp, key, `spec.commonName "postgres" is not allowed (allowed: "*.dev.example.com")`)
		})
	}
}

// Every kind of SAN is judged: a policy listing only DNS names denies an IP
// address, a URI, an email address and an otherName, while a neighbour
// with DNS names alone issues.
func TestEverySANKindIsChecked(t *testing.T) {
	const ns = "every-san"
	createPolicy(t, fixture.Policy("dns-only", hubapi.IssuancePolicySpec{Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(ns)},
		Allowed: hubapi.PolicyAllowed{DNSNames: fixture.Values("*.dev.example.com")}}))
	cp := bed.Downstreams[1]
	with := func(name string, mut func(*cmapi.CertificateSpec)) client.ObjectKey {
		return create(t, cp, fixture.Certificate(ns, name, issuerName, fixture.WithNames("", "a.dev.example.com"), fixture.WithSpec(mut)))
	}
	neighbour := with("dns", func(*cmapi.CertificateSpec) {})
	cases := map[string]func(*cmapi.CertificateSpec){
		"spec.ipAddresses":    func(s *cmapi.CertificateSpec) { s.IPAddresses = []string{"10.0.0.1"} },
		"spec.uris":           func(s *cmapi.CertificateSpec) { s.URIs = []string{"spiffe://dev/x"} },
		"spec.emailAddresses": func(s *cmapi.CertificateSpec) { s.EmailAddresses = []string{"a@dev.example.com"} },
		"spec.otherNames": func(s *cmapi.CertificateSpec) {
			s.OtherNames = []cmapi.OtherName{{OID: "1.3.6.1.4.1.311.20.2.3", UTF8Value: "admin@dev.example.com"}}
		},
	}
	keys := map[string]client.ObjectKey{}
	for field, mut := range cases {
		keys[field] = with(map[string]string{"spec.ipAddresses": "ip", "spec.uris": "uri", "spec.emailAddresses": "email", "spec.otherNames": "othername"}[field], mut)
	}
	fixture.WaitReady(t, cp.Client, neighbour)
	for field, key := range keys {
		t.Run(field, func(t *testing.T) { denied(t, cp, key, field, "(the policy allows none)") })
	}
}

// A sub-CA allowed by a policy carries x509 name constraints from it: a
// leaf signed with the sub-CA's key (as a downstream CA Issuer on its
// Secret would sign) verifies against the hub's root for a name the policy
// allows and fails path validation for any other, while a leaf neighbour
// issues meanwhile.
func TestSubCAIsNameConstrained(t *testing.T) {
	const ns = "pki-constrained"
	cp := bed.Downstreams[0]
	zero := 0
	createPolicy(t, fixture.Policy("constrained-ca", hubapi.IssuancePolicySpec{Selector: hubapi.PolicySelector{Namespaces: onlyNamespace(ns)},
		Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*.{{cluster}}.example.com"),
			IsCA: true, MaxPathLen: &zero}}))
	isCA := fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IsCA = true })
	subKey := create(t, cp, fixture.Certificate(ns, "team-ca", issuerName, fixture.WithNames("Team CA"), isCA))
	neighbour := create(t, cp, fixture.Certificate(ns, "web", issuerName, fixture.WithNames("", "web."+cp.Name+".example.com")))
	sub := fixture.WaitReady(t, cp.Client, subKey)
	fixture.WaitReady(t, cp.Client, neighbour)
	secret := fixture.GetSecret(t, cp.Client, sub)
	subCert := leaf(t, secret)
	if want := "." + cp.Name + ".example.com"; len(subCert.PermittedDNSDomains) != 1 || subCert.PermittedDNSDomains[0] != want || !subCert.PermittedDNSDomainsCritical {
		t.Fatalf("sub-CA permitted DNS domains %v (critical %v), want [%s]", subCert.PermittedDNSDomains, subCert.PermittedDNSDomainsCritical, want)
	}
	subPriv, err := pki.DecodePrivateKeyBytes(secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AppendCertsFromPEM(env.CAPEM)
	inter.AddCert(subCert)
	for _, tc := range []struct {
		name   string
		spec   func(*cmapi.CertificateSpec)
		verify bool
	}{
		{"inside", func(s *cmapi.CertificateSpec) { s.DNSNames = []string{"api." + cp.Name + ".example.com"} }, true},
		{"another cluster's name", func(s *cmapi.CertificateSpec) { s.DNSNames = []string{"api.cluster-2.example.com"} }, false},
		{"a production name", func(s *cmapi.CertificateSpec) { s.DNSNames = []string{"shop.example.com"} }, false},
		{"an IP address", func(s *cmapi.CertificateSpec) {
			s.DNSNames, s.IPAddresses = []string{"api." + cp.Name + ".example.com"}, []string{"10.0.0.1"}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := pki.CertificateTemplateFromCertificate(fixture.Certificate(ns, "leaf", issuerName, fixture.WithNames(""), fixture.WithSpec(tc.spec)))
			if err != nil {
				t.Fatal(err)
			}
			key, _ := pki.GenerateECPrivateKey(256)
			tmpl.PublicKey = key.Public()
			b, err := pki.SignCSRTemplate([]*x509.Certificate{subCert}, subPriv, tmpl)
			if err != nil {
				t.Fatal(err)
			}
			signed, _ := pki.DecodeX509CertificateBytes(b.ChainPEM)
			_, err = signed.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			if (err == nil) != tc.verify {
				t.Errorf("verify against the hub root: %v, want verified %v", err, tc.verify)
			}
		})
	}
}

// Under --default-policy=deny, a sub-CA nothing selects is denied like any
// Certificate; TestSubCAOnlyWithPolicyAndPathLength covers a selecting
// policy without and then with isCA. (The issuance tier, whose hub runs
// with allow, shows allow never issues a CA either.)
func TestSubCAWithoutPolicyIsDenied(t *testing.T) {
	const ns = "pki-unselected"
	cp := bed.Downstreams[1]
	key := create(t, cp, fixture.Certificate(ns, "rogue-ca", issuerName, fixture.WithNames("Rogue CA"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IsCA = true })))
	denied(t, cp, key, `no IssuancePolicy selects cluster "cluster-2", namespace "pki-unselected"`, "default policy is deny")
}

func subjectCNs(t *testing.T, cert *x509.Certificate) []string {
	t.Helper()
	rdns, err := pki.UnmarshalRawDerBytesToRDNSequence(cert.RawSubject)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rdn := range rdns {
		for _, atv := range rdn {
			if s, ok := atv.Value.(string); ok && atv.Type.Equal(pki.OIDConstants.CommonName) {
				out = append(out, s)
			}
		}
	}
	return out
}
