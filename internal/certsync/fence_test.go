package certsync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/certhub/certhub/internal/apis/reasons"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// A replica that lost the cluster writes no Event there, even mid-reconcile.
func TestEventsOnlyByTheOwner(t *testing.T) {
	h := newReconcilerHarness(t, nil, testCertificate())
	tg := &target{name: "east", crt: testCertificate(), rec: h.rec}
	h.own.owned = false
	h.r.eventf(tg, tg.crt, corev1.EventTypeWarning, reasons.IssuanceFailed, "lost")
	if ev := h.events(); ev != "" {
		t.Errorf("a non-owner recorded %q", ev)
	}
	h.own.owned = true
	h.r.eventf(tg, tg.crt, corev1.EventTypeWarning, reasons.IssuanceFailed, "kept")
	if ev := h.events(); !strings.Contains(ev, "kept") {
		t.Errorf("the owner's Event is missing: %q", ev)
	}
}

// untilOwnership holds until a fixed instant and counts writes in flight.
type untilOwnership struct {
	until    time.Time
	inFlight *int
}

func (u untilOwnership) Owns(multicluster.ClusterName) (string, bool) { return "replica-0/3", true }

func (u untilOwnership) BeginWrite(multicluster.ClusterName) (string, time.Time, func(), bool) {
	*u.inFlight++
	return "replica-0/3", u.until, func() { *u.inFlight-- }, true
}

// Every downstream write carries the owner's deadline: a stalled replica
// cannot complete one after another may have taken the cluster over.
func TestWritesCarryTheOwnershipDeadline(t *testing.T) {
	until := time.Now().Add(7 * time.Second)
	var deadlines []time.Time
	record := func(ctx context.Context) {
		d, ok := ctx.Deadline()
		if !ok {
			d = time.Time{}
		}
		deadlines = append(deadlines, d)
	}
	h := newReconcilerHarness(t, &interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			record(ctx)
			return c.Apply(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			record(ctx)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}, testCertificate())
	inFlight := 0
	h.r.opts.Fence = untilOwnership{until: until, inFlight: &inFlight}
	h.reconcile("web")
	if inFlight != 0 {
		t.Errorf("%d writes never reported done", inFlight)
	}
	if len(deadlines) < 2 {
		t.Fatalf("saw %d writes, want the Secret and the status", len(deadlines))
	}
	for i, d := range deadlines {
		if !d.Equal(until) {
			t.Errorf("write %d: deadline %v, want the ownership's %v", i, d, until)
		}
	}
}
