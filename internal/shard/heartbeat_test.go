package shard

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// The peer Lease is renewed while a decision step is stuck on a fence
// write: a slow hub must not make the replica's peers drop it, and move
// its clusters, when only its fence writes are slow.
func TestPeerLeaseRenewedWhileAStepIsBlocked(t *testing.T) {
	h := newHarness(t, "r0", nil)
	release := make(chan struct{})
	h.c.leases = slowFence{LeaseInterface: h.c.leases, name: leaseName(DefaultFencePrefix, "east"), release: release}
	h.c.Register("east")
	ctx := h.run()
	t.Cleanup(func() { close(release) }) // first: the blocked step ends
	peer := func() time.Time {
		l, err := h.cs.CoordinationV1().Leases(testNS).Get(ctx, leaseName(DefaultPeerPrefix, "r0"), metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return !peer().IsZero(), nil
	}); err != nil {
		t.Fatalf("no peer Lease: %v", err)
	}
	first := peer()
	// The first step is now waiting for the fence write. Time passes.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		h.clk.Step(h.c.opts.RetryPeriod)
		return peer().After(first), nil
	}); err != nil {
		t.Fatalf("peer Lease not renewed while a step waited for the hub (renewTime %v, now %v): %v", peer(), h.clk.Now(), err)
	}
}

// slowFence is a Lease client whose creation of one Lease waits for release
// (the fake clientset holds its lock while a reactor runs, so a slow
// reactor would stall every other call too).
type slowFence struct {
	coordinationclient.LeaseInterface
	name    string
	release <-chan struct{}
}

func (s slowFence) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if l.Name == s.name {
		<-s.release
	}
	return s.LeaseInterface.Create(ctx, l, opts)
}
