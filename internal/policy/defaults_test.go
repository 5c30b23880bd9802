package policy_test

import (
	"encoding/asn1"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/test/fixture"
)

// What cert-manager issues, the default policies decide as the table in
// docs/issuancepolicy.md says: allow issues it, except a CA a hub CA would
// sign (SelfSignedOnly: only a SelfSigned issuer may sign it without a
// policy); deny issues nothing no policy selects.
func TestDefaultPoliciesFollowCertManager(t *testing.T) {
	isCA := fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IsCA = true })
	literal := func(subject string) fixture.CertificateOption {
		return fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.LiteralSubject = subject })
	}
	for _, tc := range []struct {
		name string
		crt  *cmapi.Certificate
		// allow: the decision under default allow for a SelfSigned issuer
		// and for a hub CA; deny: under default deny (always denied).
		selfSigned, hubCA bool
		hubCAWhy          string
	}{
		{name: "leaf", crt: crt("a", "web"), selfSigned: true, hubCA: true},
		// cert-manager's documented CA bootstrap, its name-constraints
		// example and linkerd's trust anchor.
		{name: "self-signed CA bootstrap", crt: crt("cert-manager", "my-selfsigned-ca", fixture.WithNames("my-selfsigned-ca"), isCA), selfSigned: true,
			hubCAWhy: "allowed.isCA: true"},
		{name: "linkerd trust anchor", crt: crt("linkerd", "linkerd-trust-anchor", fixture.WithNames("root.linkerd.cluster.local"), isCA, fixture.WithSpec(func(s *cmapi.CertificateSpec) {
			s.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm}
			s.Usages = []cmapi.KeyUsage{cmapi.UsageCertSign, cmapi.UsageCRLSign, cmapi.UsageServerAuth, cmapi.UsageClientAuth}
		})), selfSigned: true, hubCAWhy: "the default policy allows a CA from a SelfSigned issuer only"},
		// cert-manager's e2e "all RDNs" literalSubject.
		{name: "literalSubject with every RDN", crt: crt("a", "web", fixture.WithNames(""), literal("CN=foo,OU=FooLong,OU=Barq,OU=Baz,OU=Dept.,O=Corp.,L=Sometown,ST=Some State,STREET=Some Street,C=US,SERIALNUMBER=1,UID=jdoe,DC=example,DC=com")),
			selfSigned: true, hubCA: true},
		{name: "literalSubject with an OID attribute", crt: crt("a", "web", fixture.WithNames(""), literal("CN=foo,1.2.840.113549.1.9.1=ops@example.com")),
			selfSigned: true, hubCA: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allow, _ := policy.Compile(nil, policy.Allow)
			d := allow.Evaluate(policy.Request{Cluster: "east", Certificate: tc.crt})
			for _, c := range []struct {
				selfSigned, want bool
			}{{true, tc.selfSigned}, {false, tc.hubCA}} {
				got := d.ForIssuer(c.selfSigned)
				if got.Allowed != c.want {
					t.Errorf("default allow, self-signed issuer %v: allowed %v, want %v (%s)", c.selfSigned, got.Allowed, c.want, got.Message)
				}
				if !c.want && !strings.Contains(got.Message, tc.hubCAWhy) {
					t.Errorf("default allow, self-signed issuer %v: message %q does not name %q", c.selfSigned, got.Message, tc.hubCAWhy)
				}
			}
			deny, _ := policy.Compile(nil, policy.Deny)
			if d := deny.Evaluate(policy.Request{Cluster: "east", Certificate: tc.crt}).ForIssuer(true); d.Allowed {
				t.Errorf("default deny allowed it: %s", d.Message)
			}
		})
	}
}

// Every attribute type a literalSubject may carry has a policy field that
// allows it by value and refuses it otherwise, naming the attribute.
func TestEveryLiteralSubjectAttributeHasAField(t *testing.T) {
	p := fixture.Policy("ldap", hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
		CommonName: &hubapi.StringValue{Value: "*"},
		Subject: &hubapi.SubjectAllowed{DomainComponents: fixture.Values("example", "com"), UserIDs: fixture.Values("svc-*"),
			OtherAttributes: fixture.Values("1.2.840.113549.1.9.1=*@example.com")},
	}})
	set, err := policy.Compile([]hubapi.IssuancePolicy{p}, policy.Deny)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ literal, want string }{
		{"CN=foo,DC=example,DC=com", ""},
		{"CN=foo,DC=evil,DC=com", `spec.literalSubject DC "evil" is not allowed (allowed: example, com)`},
		{"CN=foo,UID=svc-web", ""},
		{"CN=foo,UID=root", `spec.literalSubject UID "root" is not allowed (allowed: svc-*)`},
		{"CN=foo,1.2.840.113549.1.9.1=ops@example.com", ""},
		{"CN=foo,1.2.840.113549.1.9.1=ops@evil.com", `spec.literalSubject attribute "1.2.840.113549.1.9.1=ops@evil.com" is not allowed`},
		{"CN=foo,O=Corp", `spec.subject.organizations "Corp" is not allowed (the policy allows none)`},
	} {
		c := crt("a", "web", fixture.WithNames(""), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.LiteralSubject = tc.literal }))
		d := set.Evaluate(policy.Request{Cluster: "east", Certificate: c})
		if d.Allowed != (tc.want == "") || !strings.Contains(d.Message, tc.want) {
			t.Errorf("%s: allowed %v (%s), want allowed %v with %q", tc.literal, d.Allowed, d.Message, tc.want == "", tc.want)
		}
	}
}

// Registrations Argo CD accepts under names that are not DNS labels are
// served; a policy without {{cluster}} decides them as any other cluster,
// and a {{cluster}} pattern matches them never.
func TestClusterNamesThatAreNotLabels(t *testing.T) {
	plain := fixture.Policy("shop", hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
		CommonName: &hubapi.StringValue{Value: "*.shop.example.com"}, DNSNames: fixture.Values("*.shop.example.com")}})
	for _, cluster := range []string{"mycluster.example.com", "Prod-EU", "prod.eu-west-1", "GKE-Prod"} {
		set, _ := policy.Compile([]hubapi.IssuancePolicy{plain}, policy.Deny)
		if d := set.Evaluate(policy.Request{Cluster: cluster, Certificate: crt("a", "web", fixture.WithNames("www.shop.example.com", "www.shop.example.com"))}); !d.Allowed {
			t.Errorf("cluster %q under a policy without {{cluster}}: %s", cluster, d.Message)
		}
		set, _ = policy.Compile([]hubapi.IssuancePolicy{ownNames()}, policy.Deny)
		name := "www." + strings.ToLower(cluster) + ".example.com"
		if d := set.Evaluate(policy.Request{Cluster: cluster, Certificate: crt("a", "web", fixture.WithNames(name, name))}); d.Allowed {
			t.Errorf("cluster %q matched *.{{cluster}}.example.com with %q", cluster, name)
		}
		if why := hubapi.UnsafeClusterName(cluster); why == "" {
			t.Errorf("hubapi.UnsafeClusterName(%q) = \"\"", cluster)
		}
	}
}

// An extended key usage cert-manager has no name for (a CSR's smart-card
// logon) is denied under default allow, and allowed only by a policy that
// lists its OID.
func TestUnknownExtendedKeyUsages(t *testing.T) {
	c := crt("a", "web", fixture.WithNames("web.example.com", "web.example.com"))
	tmpl, err := issuers.Template(c)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.UnknownExtKeyUsage = []asn1.ObjectIdentifier{{1, 3, 6, 1, 4, 1, 311, 20, 2, 2}}
	allow, _ := policy.Compile(nil, policy.Allow)
	if d := allow.Evaluate(policy.Request{Cluster: "east", Certificate: c, Template: tmpl}); d.Allowed || !strings.Contains(d.Message, "1.3.6.1.4.1.311.20.2.2 has no cert-manager name") {
		t.Errorf("default allow: %+v; want denied naming the OID", d)
	}
	for _, tc := range []struct {
		allowed []string
		want    bool
	}{{nil, false}, {[]string{"1.3.6.1.4.1.311.20.2.2"}, true}, {[]string{"1.3.6.1.4.1.311.*"}, true}, {[]string{"1.2.3.4"}, false}} {
		p := fixture.Policy("smartcard", hubapi.IssuancePolicySpec{Allowed: hubapi.PolicyAllowed{
			CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*")}})
		if tc.allowed != nil {
			p.Spec.Allowed.OtherExtendedKeyUsages = fixture.Values(tc.allowed...)
		}
		set, _ := policy.Compile([]hubapi.IssuancePolicy{p}, policy.Deny)
		d := set.Evaluate(policy.Request{Cluster: "east", Certificate: c, Template: tmpl})
		if d.Allowed != tc.want || !tc.want && !strings.Contains(d.Message, `extended key usage "1.3.6.1.4.1.311.20.2.2" is not allowed`) {
			t.Errorf("policy allowing %v: %+v; want allowed %v", tc.allowed, d, tc.want)
		}
	}
}
