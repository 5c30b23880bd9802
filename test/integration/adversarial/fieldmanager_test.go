package adversarial

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/writegate"
	"github.com/certhub/certhub/test/fixture"
)

// A tenant that writes its own Certificate once a second under a field
// manager named like cert-manager's (kubectl annotate
// --field-manager=cert-manager-certificates-issuing) stops nobody: a
// neighbour in another namespace of the same cluster is issued within the
// bound, no ClusterConflict is raised, and the tenant's own Secret is still
// written (only its status waits).
func TestTenantWritingAsCertManagerStopsNobody(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp := bed.Downstreams[0]
	const tenantNS = "spoofs-cert-manager"
	fixture.EnsureNamespace(t, cp.Client, tenantNS)
	mine := fixture.Certificate(tenantNS, "mine", issuerName)
	if err := cp.Client.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"metadata":{"annotations":{"x":"%d"}}}`, i))
			if err := cp.Client.Patch(ctx, mine.DeepCopy(), patch, client.FieldOwner("cert-manager-certificates-issuing")); err == nil {
				writes.Add(1)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		return writes.Load() >= 5, nil // 5 s: the gate (every 2 s here) has looked at least twice since the first
	}); err != nil {
		t.Fatalf("the tenant could not write as cert-manager: %v", err)
	}
	neighbourIssues(t, cp.Client, "spoof-neighbour", "web", "a tenant writing as cert-manager once a second")
	// Nothing of the tenant's is lost either: its Secret is written.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		return cp.Client.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: mine.Spec.SecretName}, &corev1.Secret{}) == nil, nil
	}); err != nil {
		t.Errorf("the tenant's own Secret was never written: %v", err)
	}
	cancel()
	<-done
	if writes.Load() == 0 {
		t.Fatal("the tenant wrote nothing: the test proves nothing")
	}
	evs := &eventsv1.EventList{}
	if err := bed.Hub.Client.List(context.Background(), evs, client.InNamespace(bed.ArgoNamespace())); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == writegate.ReasonClusterConflict {
			t.Errorf("ClusterConflict raised on %s: %s", e.Regarding.Name, e.Note)
		}
	}
	t.Logf("the tenant wrote %d times as cert-manager", writes.Load())
}
