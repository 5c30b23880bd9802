package adversarial

import (
	"context"
	"testing"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/test/fixture"
)

// Issue 30: a status is output, never input. A tenant writes
// Issuing=True, reason OrderPending (what the hub writes while an ACME
// order of its own runs) into an up-to-date Certificate's status: the hub
// holds no such order, so nothing is signed (the Secret and the revision
// stay), and the claim is cleared. A neighbour issues meanwhile.
func TestForgedOrderPendingGetsNothingSigned(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[0].Client
	const ns = "forger"
	fixture.EnsureNamespace(t, c, ns)
	crt := fixture.Certificate(ns, "web", issuerName)
	if err := c.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	issued := fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt))
	before := fixture.GetSecret(t, c, crt).ResourceVersion

	apiutil.SetCertificateCondition(issued, issued.Generation, cmapi.CertificateConditionIssuing, cmmeta.ConditionTrue,
		issuers.ReasonOrderPending, "ACME order certhub/web-0123456789abcdef in the hub is pending")
	if err := c.Status().Update(ctx, issued); err != nil {
		t.Fatal(err)
	}
	neighbourIssues(t, c, "forger-neighbour", "web", "a forged OrderPending status")
	got := fixture.WaitFor(t, c, client.ObjectKeyFromObject(crt), "the forged Issuing condition cleared", func(crt *cmapi.Certificate) bool {
		return fixture.Condition(crt, cmapi.CertificateConditionIssuing) == nil && fixture.IsReady(crt)
	})
	if r := ptr.Deref(got.Status.Revision, 0); r != 1 {
		t.Errorf("revision %d after a forged OrderPending, want 1: something was signed", r)
	}
	if after := fixture.GetSecret(t, c, crt).ResourceVersion; after != before {
		t.Errorf("the Secret was rewritten (resourceVersion %s → %s) after a forged OrderPending", before, after)
	}
}
