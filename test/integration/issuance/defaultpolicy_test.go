package issuance

import (
	"context"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/certsync"
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
	fixture.WaitFor(t, c, client.ObjectKeyFromObject(selected), "Ready=False/PolicyDenied", fixture.NotReadyWith(certsync.ReasonPolicyDenied))
}

// Under allow too, a CA is issued only when a policy allows it: a sub-CA no
// policy selects is denied while its neighbour issues; once a policy allows
// it, it is signed with that policy's constraints.
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
	crt := fixture.WaitFor(t, c, client.ObjectKeyFromObject(subCA), "Ready=False/PolicyDenied", fixture.NotReadyWith(certsync.ReasonPolicyDenied))
	if msg := fixture.Condition(crt, cmapi.CertificateConditionReady).Message; !strings.Contains(msg, "the default policy never allows a CA") {
		t.Errorf("message %q", msg)
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
