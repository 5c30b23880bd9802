package issuance

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/test/fixture"
)

// This tier's hub runs with --default-policy=allow (the flag's default):
// a Certificate no IssuancePolicy selects is issued, one a policy selects
// still needs that policy's allowance. (test/integration/policy runs with
// deny.)
func TestDefaultPolicyAllow(t *testing.T) {
	ctx := context.Background()
	p := fixture.PolicyObject(fixture.Policy("scoped", policy.Spec{
		Selector: policy.Selector{Namespaces: &policy.NamespaceSelector{MatchNames: []string{"policy-scoped"}}},
		Allowed:  policy.Allowed{DNSNames: fixture.Values("*.allowed.example.com"), CommonName: &policy.StringValue{Value: "*.allowed.example.com"}},
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
