package issuance

import (
	"context"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/test/fixture"
)

// This tier's hub runs with --default-policy=allow (the flag's default):
// a Certificate no IssuancePolicy selects is issued, one a policy selects
// still needs that policy's allowance. (test/integration/policy runs with
// deny.)
func TestDefaultPolicyAllow(t *testing.T) {
	ctx := context.Background()
	p := fixture.PolicyObject(fixture.Policy("scoped", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Namespaces: &hubapi.NamespaceSelector{MatchNames: []string{"policy-scoped"}}},
		Allowed:  hubapi.PolicyAllowed{DNSNames: fixture.Values("*.allowed.example.com"), CommonName: &hubapi.StringValue{Value: "*.allowed.example.com"}},
	}))
	if err := bed.Hub.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Hub.Client.Delete(context.Background(), p) })
	c := bed.Downstreams[1].Client
	unselected := fixture.Certificate("policy-free", "web", issuerName)
	selected := fixture.Certificate("policy-scoped", "web", issuerName)
	for _, crt := range []client.Object{unselected, selected} {
		fixture.EnsureNamespace(t, c, crt.GetNamespace())
		if err := c.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
	}
	fixture.WaitReady(t, c, client.ObjectKeyFromObject(unselected))
	fixture.WaitFor(t, c, client.ObjectKeyFromObject(selected), "Ready=False/PolicyDenied", fixture.NotReadyWith(reasons.PolicyDenied))
}

// Under allow too, a CA a hub CA signs is issued only when a policy allows
// it: a sub-CA no policy selects is denied, naming the policy it needs,
// while its neighbour issues; once a policy allows it, it is signed with
// that policy's constraints.
func TestDefaultAllowNeverIssuesACA(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[0].Client
	const ns = "allow-sub-ca"
	fixture.EnsureNamespace(t, c, ns)
	subCA := fixture.Certificate(ns, "team-ca", issuerName, fixture.WithNames("Team CA"), fixture.WithSpec(func(s *cmapi.CertificateSpec) { s.IsCA = true }))
	neighbour := fixture.Certificate(ns, "web", issuerName)
	for _, crt := range []client.Object{subCA, neighbour} {
		if err := c.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
	}
	fixture.WaitReady(t, c, client.ObjectKeyFromObject(neighbour))
	crt := fixture.WaitFor(t, c, client.ObjectKeyFromObject(subCA), "Ready=False/PolicyDenied", fixture.NotReadyWith(reasons.PolicyDenied))
	if msg := fixture.Condition(crt, cmapi.CertificateConditionReady).Message; !strings.Contains(msg, "isCA true signed by a hub CA needs an IssuancePolicy that selects the Certificate and allows it (allowed.isCA: true") {
		t.Errorf("message %q: want the policy it needs named", msg)
	}
	one := 1
	p := fixture.PolicyObject(fixture.Policy("allow-sub-ca", hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Namespaces: &hubapi.NamespaceSelector{MatchNames: []string{ns}}},
		Allowed:  hubapi.PolicyAllowed{CommonName: &hubapi.StringValue{Value: "*"}, DNSNames: fixture.Values("*.example.com", "example.com"), IsCA: true, MaxPathLen: &one},
	}))
	if err := bed.Hub.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Hub.Client.Delete(context.Background(), p) })
	crt = fixture.WaitReady(t, c, client.ObjectKeyFromObject(subCA))
	cert, err := pki.DecodeX509CertificateBytes(fixture.GetSecret(t, c, crt).Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA || cert.MaxPathLen != 1 || len(cert.PermittedDNSDomains) != 1 || cert.PermittedDNSDomains[0] != "example.com" || len(cert.ExcludedIPRanges) != 2 {
		t.Errorf("sub-CA: IsCA %v pathLen %d permitted DNS %v excluded IPs %v; want the policy's constraints", cert.IsCA, cert.MaxPathLen, cert.PermittedDNSDomains, cert.ExcludedIPRanges)
	}
}

// What cert-manager issues, default allow issues: a SelfSigned CA
// (cert-manager's documented CA bootstrap, linkerd's trust anchor: chained
// to nothing the hub vouches for) and a literalSubject with DC and UID
// components (cert-manager's e2e "all RDNs"), beside a neighbour.
func TestDefaultAllowIssuesWhatCertManagerDoes(t *testing.T) {
	ctx := context.Background()
	selfSigned := &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "selfsigned-issuer"},
		Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}}}
	if err := bed.Hub.Client.Create(ctx, selfSigned); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Hub.Client.Delete(context.Background(), selfSigned) })
	c := bed.Downstreams[1].Client
	const ns = "allow-cert-manager-inputs"
	fixture.EnsureNamespace(t, c, ns)
	bootstrap := fixture.Certificate(ns, "my-selfsigned-ca", selfSigned.Name, fixture.WithNames("my-selfsigned-ca"), fixture.WithSpec(func(s *cmapi.CertificateSpec) {
		s.IsCA = true
		s.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256}
	}))
	rdns := fixture.Certificate(ns, "all-rdns", issuerName, fixture.WithNames(""), fixture.WithSpec(func(s *cmapi.CertificateSpec) {
		s.LiteralSubject = "CN=foo,OU=FooLong,OU=Barq,OU=Baz,OU=Dept.,O=Corp.,L=Sometown,ST=Some State,STREET=Some Street,C=US,SERIALNUMBER=1,UID=jdoe,DC=example,DC=com"
	}))
	neighbour := fixture.Certificate(ns, "web", issuerName)
	for _, crt := range []client.Object{bootstrap, rdns, neighbour} {
		if err := c.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
	}
	fixture.WaitReady(t, c, client.ObjectKeyFromObject(neighbour))
	crt := fixture.WaitReady(t, c, client.ObjectKeyFromObject(bootstrap))
	cert, err := pki.DecodeX509CertificateBytes(fixture.GetSecret(t, c, crt).Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA || cert.CheckSignatureFrom(cert) != nil {
		t.Errorf("my-selfsigned-ca: IsCA %v, self-signature %v; want a self-signed CA", cert.IsCA, cert.CheckSignatureFrom(cert))
	}
	crt = fixture.WaitReady(t, c, client.ObjectKeyFromObject(rdns))
	if cert, err = pki.DecodeX509CertificateBytes(fixture.GetSecret(t, c, crt).Data[corev1.TLSCertKey]); err != nil {
		t.Fatal(err)
	}
	dc := 0
	for _, atv := range cert.Subject.Names {
		if atv.Type.String() == "0.9.2342.19200300.100.1.25" {
			dc++
		}
	}
	if dc != 2 || len(cert.Subject.OrganizationalUnit) != 4 {
		t.Errorf("all-rdns: subject %v, want its two DC and four OU", cert.Subject.Names)
	}
}
