package adversarial

import (
	"context"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/test/fixture"
)

// neighbourBound is how soon a healthy Certificate next to a bad one must
// be Ready; issuance takes tens of milliseconds on this bed.
const neighbourBound = 30 * time.Second

// Item 1: a Certificate the API server accepts but the typed API cannot
// decode (downstream has no webhook, the CRD types duration as a string).
// It used to break the hub's watch of the whole cluster: a valid Certificate
// in another namespace got no condition within 60 s. Now the bad one gets
// Ready=False naming the field and an Event, the neighbour is issued within
// neighbourBound, and fixing the field issues the bad one too.
func TestUndecodableCertificateHarmsNoNeighbour(t *testing.T) {
	ctx := context.Background()
	c := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, c, "tenant-bad")
	fixture.EnsureNamespace(t, c, "tenant-good")

	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(fixture.Certificate("tenant-bad", "one-day", issuerName))
	if err != nil {
		t.Fatal(err)
	}
	bad := &unstructured.Unstructured{Object: obj}
	bad.SetGroupVersionKind(cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind))
	if err := unstructured.SetNestedField(bad.Object, "1 day", "spec", "duration"); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, bad); err != nil {
		t.Fatalf("the API server refused the Certificate (the test needs it stored): %v", err)
	}

	neighbourIssues(t, c, "tenant-good", "neighbour", "an undecodable Certificate")

	// The bad one says what is wrong. Read it unstructured: the typed client cannot decode it either.
	var msg string
	deadline := time.Now().Add(fixture.WaitTimeout)
	for {
		cur := bad.DeepCopy()
		if err := c.Get(ctx, client.ObjectKeyFromObject(bad), cur); err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		if len(conds) > 0 {
			m, _ := conds[0].(map[string]any)
			if m["reason"] == reasons.InvalidLifetime && m["status"] == "False" {
				msg, _ = m["message"].(string)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the undecodable Certificate got no Ready=False/%s: %v", reasons.InvalidLifetime, conds)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition the typed helpers cannot read
	}
	if !strings.Contains(msg, `spec.duration: Invalid value: "1 day"`) {
		t.Errorf("message %q does not name the field and value", msg)
	}

	// Fixed in place, it is issued.
	cur := bad.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(bad), cur); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(cur.Object, "24h", "spec", "duration"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, c, client.ObjectKeyFromObject(bad))
}
