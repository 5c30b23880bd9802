package policy_test

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/test/fixture"
)

var (
	dev  = map[string]string{"env": "dev"}
	prod = map[string]string{"env": "prod"}
)

// ownNames: each cluster may get names under its own subdomain, and its
// namespaces names under <namespace>.svc.
func ownNames() hubapi.IssuancePolicy {
	return fixture.Policy("own-names", hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
		CommonName: &hubapi.StringValue{Value: "*.{{cluster}}.example.com"},
		DNSNames:   fixture.Values("*.{{cluster}}.example.com", "*.{{namespace}}.svc"),
	}})
}

func devOnly() hubapi.IssuancePolicy {
	return fixture.Policy("dev", hubapi.IssuancePolicySpec{Selector: fixture.ForClusterLabels(dev), Allowed: hubapi.PolicyAllowed{
		CommonName: &hubapi.StringValue{Value: "*.dev.example.com"},
		DNSNames:   fixture.Values("*.dev.example.com"),
	}})
}

func ca(maxPathLen int) hubapi.IssuancePolicy {
	return fixture.Policy("sub-ca", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Namespaces: &hubapi.NamespaceSelector{MatchNames: []string{"pki-*"}}},
		Allowed:  hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, IsCA: true, MaxPathLen: &maxPathLen},
	})
}

func bounded() hubapi.IssuancePolicy {
	return fixture.Policy("bounded", hubapi.IssuancePolicySpec{
		Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*"),
			IPAddresses: fixture.Values("10.0.0.0/8", "fd00::1"), Usages: []cmapi.KeyUsage{cmapi.UsageServerAuth, cmapi.UsageDigitalSignature}},
		Constraints: hubapi.PolicyConstraints{MaxDuration: &metav1.Duration{Duration: 30 * 24 * time.Hour},
			PrivateKey: &hubapi.PrivateKeyConstraints{Algorithm: cmapi.ECDSAKeyAlgorithm, MinSize: 256, MaxSize: 384}},
	})
}

func crt(ns, name string, opts ...fixture.CertificateOption) *cmapi.Certificate {
	return fixture.Certificate(ns, name, "hub-ca", opts...)
}

func TestEvaluate(t *testing.T) {
	short := fixture.WithDuration(24 * time.Hour)
	for _, tc := range []struct {
		name     string
		policies []hubapi.IssuancePolicy
		def      policy.Mode
		cluster  string
		labels   map[string]string
		crt      *cmapi.Certificate
		allowed  bool
		policy   string
		contains []string // in the message
	}{
		{name: "no policy, default allow", crt: crt("a", "web"), allowed: true},
		{name: "no policy, default deny", def: policy.Deny, cluster: "east", crt: crt("a", "web"),
			contains: []string{`no IssuancePolicy selects cluster "east", namespace "a", issuer ClusterIssuer/hub-ca`, "deny"}},
		{name: "policy that does not select leaves the default", def: policy.Deny, policies: []hubapi.IssuancePolicy{devOnly()},
			labels: prod, crt: crt("a", "web", fixture.WithNames("x.dev.example.com", "x.dev.example.com")), contains: []string{"no IssuancePolicy selects"}},
		{name: "dev gets a dev name", policies: []hubapi.IssuancePolicy{devOnly()}, labels: dev,
			crt: crt("a", "web", fixture.WithNames("api.dev.example.com", "api.dev.example.com")), allowed: true, policy: "dev"},
		{name: "dev cannot get a prod name", policies: []hubapi.IssuancePolicy{devOnly()}, labels: dev,
			crt:      crt("a", "web", fixture.WithNames("api.dev.example.com", "api.prod.example.com")),
			contains: []string{"(dev)", `spec.dnsNames "api.prod.example.com" is not allowed (allowed: *.dev.example.com)`}},
		{name: "own cluster's names", policies: []hubapi.IssuancePolicy{ownNames()}, cluster: "east",
			crt: crt("team", "web", fixture.WithNames("www.east.example.com", "www.east.example.com", "api.team.svc")), allowed: true, policy: "own-names"},
		{name: "another cluster's names", policies: []hubapi.IssuancePolicy{ownNames()}, cluster: "east",
			crt: crt("team", "web", fixture.WithNames("", "www.west.example.com")), contains: []string{`"www.west.example.com"`, "*.{{cluster}}.example.com"}},
		{name: "another namespace's service names", policies: []hubapi.IssuancePolicy{ownNames()}, cluster: "east",
			crt: crt("team", "web", fixture.WithNames("", "api.other.svc")), contains: []string{`"api.other.svc"`}},
		{name: "a cluster called * gets no wildcard", policies: []hubapi.IssuancePolicy{ownNames()}, cluster: "*",
			crt: crt("team", "web", fixture.WithNames("", "www.east.example.com")), contains: []string{`"www.east.example.com"`}},
		{name: "a field the policy does not list", policies: []hubapi.IssuancePolicy{ownNames()}, cluster: "east",
			crt:      crt("team", "web", fixture.WithNames("", "www.east.example.com"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.URIs = []string{"spiffe://east/x"} })),
			contains: []string{`spec.uris "spiffe://east/x" is not allowed (the policy allows none)`}},
		{name: "isCA denied by default", policies: []hubapi.IssuancePolicy{ownNames()}, cluster: "east",
			crt: crt("team", "ca", fixture.WithNames("ca.east.example.com"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IsCA = true })), contains: []string{"spec.isCA true is not allowed"}},
		{name: "isCA allowed where a policy allows it", policies: []hubapi.IssuancePolicy{ownNames(), ca(1)}, cluster: "east",
			crt: crt("pki-east", "ca", fixture.WithNames("Team CA"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IsCA = true })), allowed: true, policy: "sub-ca"},
		{name: "a CA policy's cert sign is not a leaf's", policies: []hubapi.IssuancePolicy{ca(0)}, cluster: "east",
			crt: crt("pki-east", "leaf", fixture.WithNames("leaf"), fixture.WithSpec(func(s *cmapi.CertificateSpec) {
				s.Usages = []cmapi.KeyUsage{cmapi.UsageCertSign, cmapi.UsageDigitalSignature}
			})), contains: []string{`spec.usages "cert sign" is not allowed`}},
		{name: "within bounds", policies: []hubapi.IssuancePolicy{bounded()},
			crt: crt("a", "web", short, fixture.WithSpec(func(s *cmapi.CertificateSpec) {
				s.IPAddresses = []string{"10.1.2.3", "fd00::1"}
				s.Usages = []cmapi.KeyUsage{cmapi.UsageServerAuth}
			})), allowed: true, policy: "bounded"},
		{name: "maxDuration", policies: []hubapi.IssuancePolicy{bounded()}, crt: crt("a", "web"), contains: []string{"duration 2160h0m0s exceeds maxDuration 720h0m0s"}},
		{name: "default duration counts", policies: []hubapi.IssuancePolicy{bounded()},
			crt: crt("a", "web", fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.Duration = nil })), contains: []string{"duration 2160h0m0s exceeds"}},
		{name: "ip outside the CIDRs", policies: []hubapi.IssuancePolicy{bounded()},
			crt: crt("a", "web", short, fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IPAddresses = []string{"192.168.0.1"} })), contains: []string{`spec.ipAddresses "192.168.0.1" is not allowed (allowed: 10.0.0.0/8, fd00::1/128)`}},
		{name: "usage not allowed", policies: []hubapi.IssuancePolicy{bounded()},
			crt: crt("a", "web", short, fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.Usages = []cmapi.KeyUsage{cmapi.UsageClientAuth} })), contains: []string{`spec.usages "client auth"`}},
		{name: "key algorithm", policies: []hubapi.IssuancePolicy{bounded()},
			crt: crt("a", "web", short, fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.PrivateKey = nil })), contains: []string{"spec.privateKey.algorithm RSA is not allowed (allowed: ECDSA)"}},
		{name: "key too large", policies: []hubapi.IssuancePolicy{bounded()},
			crt: crt("a", "web", short, fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.PrivateKey.Size = 521 })), contains: []string{"spec.privateKey.size 521 is above maxSize 384"}},
		{name: "literalSubject is checked like subject", policies: []hubapi.IssuancePolicy{ownNames()}, cluster: "east",
			crt:      crt("a", "web", fixture.WithNames("", "www.east.example.com"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.LiteralSubject = "CN=www.east.example.com,O=Evil" })),
			contains: []string{`spec.subject.organizations "Evil" is not allowed`}},
		{name: "literalSubject CN is the common name", policies: []hubapi.IssuancePolicy{ownNames()}, cluster: "east",
			crt:      crt("a", "web", fixture.WithNames("", "www.east.example.com"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.LiteralSubject = "CN=www.west.example.com" })),
			contains: []string{`spec.commonName "www.west.example.com"`}},
		{name: "any one policy allowing is enough", policies: []hubapi.IssuancePolicy{devOnly(), ownNames()}, cluster: "east", labels: dev,
			crt: crt("a", "web", fixture.WithNames("", "www.east.example.com")), allowed: true, policy: "own-names"},
		{name: "every policy considered is named", policies: []hubapi.IssuancePolicy{devOnly(), ownNames()}, cluster: "east", labels: dev,
			crt: crt("a", "web", fixture.WithNames("", "www.prod.example.com")), contains: []string{"(dev, own-names)", "dev: spec.dnsNames", "own-names: spec.dnsNames"}},
		{name: "required field missing", policies: []hubapi.IssuancePolicy{fixture.Policy("req", hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
			DNSNames: &hubapi.StringValues{Values: []string{"*"}, Required: true}, CommonName: &hubapi.StringValue{Value: "*"}}})},
			crt: crt("a", "web", fixture.WithNames("web")), contains: []string{"spec.dnsNames is required"}},
		{name: "issuer selector by kind", def: policy.Deny, policies: []hubapi.IssuancePolicy{fixture.Policy("ns-issuers", hubapi.IssuancePolicySpec{
			Selector: hubapi.PolicySelector{IssuerRef: &hubapi.IssuerRefSelector{Kind: "Issuer"}}, Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*")}})},
			crt: crt("a", "web", fixture.WithIssuer(cmmeta.IssuerReference{Name: "local"})), allowed: true, policy: "ns-issuers"},
		{name: "issuer selector by name skips others", def: policy.Deny, policies: []hubapi.IssuancePolicy{fixture.Policy("other-ca", hubapi.IssuancePolicySpec{
			Selector: hubapi.PolicySelector{IssuerRef: &hubapi.IssuerRefSelector{Name: "other-*"}}, Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*")}})},
			crt: crt("a", "web"), contains: []string{"no IssuancePolicy selects"}},
		{name: "an invalid policy allows nothing", def: policy.Allow, policies: []hubapi.IssuancePolicy{fixture.Policy("broken", hubapi.IssuancePolicySpec{
			Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*"), IPAddresses: fixture.Values("10.0.0.0/33")}})},
			crt: crt("a", "web"), contains: []string{"broken: the policy is invalid", "10.0.0.0/33"}},
		{name: "cluster names", def: policy.Deny, policies: []hubapi.IssuancePolicy{fixture.Policy("east-only", hubapi.IssuancePolicySpec{
			Selector: hubapi.PolicySelector{Clusters: &hubapi.ClusterSelector{MatchNames: []string{"east-*"}}}, Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*")}})},
			cluster: "west-1", crt: crt("a", "web"), contains: []string{"no IssuancePolicy selects"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := tc.def
			if def == "" {
				def = policy.Allow
			}
			set, _ := policy.Compile(tc.policies, def)
			cluster := tc.cluster
			if cluster == "" {
				cluster = "c1"
			}
			d := set.Evaluate(policy.Request{Cluster: cluster, ClusterLabels: tc.labels, Certificate: tc.crt})
			if d.Allowed != tc.allowed {
				t.Fatalf("Allowed = %v, want %v (message %q)", d.Allowed, tc.allowed, d.Message)
			}
			if d.Policy != tc.policy {
				t.Errorf("Policy = %q, want %q", d.Policy, tc.policy)
			}
			for _, s := range tc.contains {
				if !strings.Contains(d.Message, s) {
					t.Errorf("message %q does not contain %q", d.Message, s)
				}
			}
		})
	}
}

// A sub-CA is issued only when a policy allows it, whatever the default,
// and carries the allowing policy's path length and name constraints: a
// leaf it signs for a name outside the policy does not verify against the
// hub's root (Go's x509 path validation), one inside does.
func TestSubCAsAreConstrainedByTheirPolicy(t *testing.T) {
	isCA := fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IsCA = true })
	subCA := crt("pki-a", "ca", fixture.WithNames("Dev CA"), isCA)
	for _, def := range []policy.Mode{policy.Allow, policy.Deny} {
		set, _ := policy.Compile([]hubapi.IssuancePolicy{devOnly()}, def)
		// A hub CA would sign it (ForIssuer(false)); a SelfSigned issuer
		// is TestDefaultPoliciesFollowCertManager's.
		if d := set.Evaluate(policy.Request{Cluster: "c", ClusterLabels: prod, Certificate: subCA}).ForIssuer(false); d.Allowed {
			t.Errorf("default %s, no policy selects it: a CA was allowed (%s)", def, d.Message)
		}
	}
	two := 2
	sub := fixture.Policy("sub-ca", hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"},
		DNSNames: fixture.Values("*.dev.example.com"), IPAddresses: fixture.Values("10.1.0.0/16"), IsCA: true, MaxPathLen: &two}})
	set, err := policy.Compile([]hubapi.IssuancePolicy{sub}, policy.Deny)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := issuers.Template(subCA)
	if err != nil {
		t.Fatal(err)
	}
	d := set.Evaluate(policy.Request{Cluster: "c", Certificate: subCA, Template: tmpl})
	if !d.Allowed {
		t.Fatalf("decision %+v, want allowed", d)
	}
	d.Constrain(tmpl)
	root, rootKey := selfSignedCA(t)
	subKey, _ := pki.GenerateECPrivateKey(256)
	tmpl.PublicKey = subKey.Public()
	signed, err := pki.SignCSRTemplate([]*x509.Certificate{root}, rootKey, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	subCert, _ := pki.DecodeX509CertificateBytes(signed.ChainPEM)
	if subCert.MaxPathLen != 2 || !slices.Equal(subCert.PermittedDNSDomains, []string{".dev.example.com"}) {
		t.Errorf("sub-CA path length %d, permitted DNS %v", subCert.MaxPathLen, subCert.PermittedDNSDomains)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	inter.AddCert(subCert)
	for _, tc := range []struct {
		name   string
		leaf   *cmapi.Certificate
		verify bool
	}{
		{"inside the policy", crt("a", "web", fixture.WithNames("", "web.dev.example.com"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IPAddresses = []string{"10.1.2.3"} })), true},
		{"a DNS name outside", crt("a", "web", fixture.WithNames("", "api.prod.example.com")), false},
		{"an IP outside", crt("a", "web", fixture.WithNames("", "web.dev.example.com"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IPAddresses = []string{"192.168.0.1"} })), false},
		{"an email, which the policy does not list", crt("a", "web", fixture.WithNames("", "web.dev.example.com"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.EmailAddresses = []string{"a@dev.example.com"} })), false},
		{"a URI, which the policy does not list", crt("a", "web", fixture.WithNames("", "web.dev.example.com"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.URIs = []string{"spiffe://dev.example.com/x"} })), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt, err := issuers.Template(tc.leaf)
			if err != nil {
				t.Fatal(err)
			}
			key, _ := pki.GenerateECPrivateKey(256)
			lt.PublicKey = key.Public()
			b, err := pki.SignCSRTemplate([]*x509.Certificate{subCert}, subKey, lt) // as a downstream CA Issuer on the sub-CA's Secret signs
			if err != nil {
				t.Fatal(err)
			}
			leaf, _ := pki.DecodeX509CertificateBytes(b.ChainPEM)
			_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			if (err == nil) != tc.verify {
				t.Errorf("verify error %v, want verified %v", err, tc.verify)
			}
		})
	}
}

// Patterns x509 cannot express as a CA's constraints refuse the CA, naming
// the pattern; "X" together with "*.X" can.
func TestSubCAPatternsThatCannotBeConstraints(t *testing.T) {
	isCA := fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IsCA = true })
	for _, tc := range []struct {
		name    string
		allowed hubapi.PolicyAllowed
		want    string // "" allowed
	}{
		{"exact name alone", hubapi.PolicyAllowed{DNSNames: fixture.Values("dev.example.com")}, `allowed.dnsNames "dev.example.com" cannot be a CA's name constraint`},
		{"exact name with its wildcard", hubapi.PolicyAllowed{DNSNames: fixture.Values("dev.example.com", "*.dev.example.com")}, ""},
		{"wildcard inside a label", hubapi.PolicyAllowed{DNSNames: fixture.Values("web-*.example.com")}, `allowed.dnsNames "web-*.example.com"`},
		{"URI path", hubapi.PolicyAllowed{URIs: fixture.Values("spiffe://dev/*")}, `allowed.uris "spiffe://dev/*"`},
		{"otherNames", hubapi.PolicyAllowed{OtherNames: fixture.Values("1.2.3.4=*")}, "otherNames"},
		{"email domain alone", hubapi.PolicyAllowed{EmailAddresses: fixture.Values("*@dev.example.com")}, `allowed.emailAddresses "*@dev.example.com"`},
		{"email subdomains", hubapi.PolicyAllowed{EmailAddresses: fixture.Values("*@*.dev.example.com")}, ""},
		{"everything", hubapi.PolicyAllowed{DNSNames: fixture.Values("*"), URIs: fixture.Values("*"), EmailAddresses: fixture.Values("*")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.allowed.CommonName, tc.allowed.IsCA = &hubapi.StringValue{Value: "*"}, true
			set, _ := policy.Compile([]hubapi.IssuancePolicy{fixture.Policy("sub", hubapi.IssuancePolicySpec{Allowed: tc.allowed})}, policy.Deny)
			d := set.Evaluate(policy.Request{Cluster: "c", Certificate: crt("pki", "ca", fixture.WithNames("CA"), isCA)})
			if d.Allowed != (tc.want == "") || !strings.Contains(d.Message, tc.want) {
				t.Errorf("decision %+v, want allowed %v with %q", d, tc.want == "", tc.want)
			}
		})
	}
}

// Every common name and serialNumber of a literalSubject is checked, in
// either order and in one multi-valued RDN, as is every SAN kind.
func TestEveryAttributeIsChecked(t *testing.T) {
	set, _ := policy.Compile([]hubapi.IssuancePolicy{fixture.Policy("dev", hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
		CommonName: &hubapi.StringValue{Value: "*.dev.example.com"}, DNSNames: fixture.Values("*.dev.example.com"),
		Subject: &hubapi.SubjectAllowed{SerialNumber: &hubapi.StringValue{Value: "1"}},
	}})}, policy.Deny)
	for _, tc := range []struct{ literal, want string }{
		{"CN=a.dev.example.com", ""},
		{"CN=a.dev.example.com,CN=postgres", `spec.commonName "postgres"`},
		{"CN=postgres,CN=a.dev.example.com", `spec.commonName "postgres"`},
		{"CN=a.dev.example.com+CN=postgres", `spec.commonName "postgres"`},
		{"CN=postgres+CN=a.dev.example.com", `spec.commonName "postgres"`},
		{"CN=a.dev.example.com+SERIALNUMBER=1,SERIALNUMBER=2", `spec.subject.serialNumber "2"`},
		{"CN=a.dev.example.com,DC=evil", `spec.literalSubject DC "evil" is not allowed (the policy allows none)`},
	} {
		c := crt("a", "web", fixture.WithNames("", "a.dev.example.com"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.LiteralSubject = tc.literal }))
		d := set.Evaluate(policy.Request{Cluster: "c", Certificate: c})
		if d.Allowed != (tc.want == "") || !strings.Contains(d.Message, tc.want) {
			t.Errorf("%s: decision %+v, want allowed %v with %q", tc.literal, d, tc.want == "", tc.want)
		}
	}
	for name, mut := range map[string]func(*cmapi.CertificateSpec){
		"ipAddresses":    func(s *cmapi.CertificateSpec) { s.IPAddresses = []string{"10.0.0.1"} },
		"uris":           func(s *cmapi.CertificateSpec) { s.URIs = []string{"spiffe://x/y"} },
		"emailAddresses": func(s *cmapi.CertificateSpec) { s.EmailAddresses = []string{"a@dev.example.com"} },
		"otherNames":     func(s *cmapi.CertificateSpec) { s.OtherNames = []cmapi.OtherName{{OID: "1.2.3.4", UTF8Value: "x"}} },
	} {
		d := set.Evaluate(policy.Request{Cluster: "c", Certificate: crt("a", "web", fixture.WithNames("a.dev.example.com", "a.dev.example.com"), fixture.WithSpec(mut))})
		if d.Allowed || !strings.Contains(d.Message, "spec."+name) {
			t.Errorf("%s: decision %+v, want denied naming it", name, d)
		}
	}
}

func selfSignedCA(t *testing.T) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hub root"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	_, cert, err := pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func TestCompileReportsInvalidPolicies(t *testing.T) {
	_, err := policy.Compile([]hubapi.IssuancePolicy{
		fixture.Policy("bad-selector", hubapi.IssuancePolicySpec{Selector: hubapi.PolicySelector{Clusters: &hubapi.ClusterSelector{MatchLabels: map[string]string{"bad key!": "x"}}}}),
		fixture.Policy("bad-bounds", hubapi.IssuancePolicySpec{Constraints: hubapi.PolicyConstraints{MinDuration: &metav1.Duration{Duration: time.Hour}, MaxDuration: &metav1.Duration{Duration: time.Minute}}}),
		ownNames(),
	}, policy.Deny)
	for _, want := range []string{`"bad-selector"`, `"bad-bounds"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile error %v does not name %s", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "own-names") {
		t.Errorf("Compile error %v names the valid policy", err)
	}
}

// BenchmarkEvaluate100 is one Certificate against 100 policies that all
// select it, the last one allowing it (the worst case: every policy checked).
func BenchmarkEvaluate100(b *testing.B) {
	var ps []hubapi.IssuancePolicy
	for i := range 99 {
		ps = append(ps, fixture.Policy(fmt.Sprintf("p%03d", i), hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
			CommonName: &hubapi.StringValue{Value: fmt.Sprintf("*.team%d.{{cluster}}.example.com", i)},
			DNSNames:   fixture.Values(fmt.Sprintf("*.team%d.{{cluster}}.example.com", i), "*.{{namespace}}.svc"),
		}}))
	}
	ps = append(ps, fixture.Policy("p999", hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
		CommonName: &hubapi.StringValue{Value: "*.{{cluster}}.example.com"}, DNSNames: fixture.Values("*.{{cluster}}.example.com"),
	}}))
	set, err := policy.Compile(ps, policy.Deny)
	if err != nil {
		b.Fatal(err)
	}
	req := policy.Request{Cluster: "east", ClusterLabels: dev, Certificate: crt("team", "web", fixture.WithNames("www.east.example.com", "www.east.example.com", "api.east.example.com"))}
	b.ReportAllocs()
	for b.Loop() {
		if d := set.Evaluate(req); !d.Allowed || d.Policy != "p999" {
			b.Fatalf("decision %+v", d)
		}
	}
}

// A cluster whose name cannot be put into a DNS name (a registration named
// after its server URL) matches no {{cluster}} pattern.
func TestUnsafeClusterNamesMatchNoClusterPattern(t *testing.T) {
	set, _ := policy.Compile([]hubapi.IssuancePolicy{ownNames()}, policy.Deny)
	for cluster, allowed := range map[string]bool{"east": true, "x.east": false, "*": false, "East": false, "https://east.example.com": false} {
		name := "www." + cluster + ".example.com"
		d := set.Evaluate(policy.Request{Cluster: cluster, Certificate: crt("a", "web", fixture.WithNames("", name))})
		if d.Allowed != allowed {
			t.Errorf("cluster %q, name %q: allowed %v, want %v (%s)", cluster, name, d.Allowed, allowed, d.Message)
		}
	}
}

// BenchmarkEvaluate60000Names is one Certificate asking for 60,000 DNS
// names against a policy that allows them all: the work the hub would do
// per reconcile for it without --max-names-per-certificate (which refuses
// it before the policy runs). Linear name handling keeps it bounded.
func BenchmarkEvaluate60000Names(b *testing.B) {
	names := make([]string, 60000)
	for i := range names {
		names[i] = fmt.Sprintf("n%d.t", i)
	}
	set, err := policy.Compile([]hubapi.IssuancePolicy{fixture.Policy("any", hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
		DNSNames: fixture.Values("*.t")}})}, policy.Deny)
	if err != nil {
		b.Fatal(err)
	}
	c := crt("a", "huge", fixture.WithNames("", names...))
	tmpl, err := issuers.Template(c)
	if err != nil {
		b.Fatal(err)
	}
	req := policy.Request{Cluster: "east", Certificate: c, Template: tmpl}
	b.ReportAllocs()
	for b.Loop() {
		if d := set.Evaluate(req); !d.Allowed {
			b.Fatalf("decision %+v", d)
		}
	}
}
