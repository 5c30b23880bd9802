package shard

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// layoutLease is a Lease of kind ("peer" or "fence") held by holder, renewed
// at renew, annotated with the layout ("" for none).
func layoutLease(kind, name, holder, layout string, renew time.Time) *coordinationv1.Lease {
	ann := map[string]string{}
	if layout != "" {
		ann[hubapi.ShardBucketsAnnotation] = layout
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: map[string]string{hubapi.LeaseKindLabel: kind}, Annotations: ann},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: ptr.To(metav1.NewMicroTime(renew))},
	}
}

// A replica sees another fence layout in use when a live peer announces
// one, when a live fence of another layout is held, or when a peer that
// announces nothing (an older version) holds no fence to tell its layout
// by. Expired and released Leases, and our own, say nothing.
func TestLayoutConflict(t *testing.T) {
	now := epoch
	for _, tc := range []struct {
		name   string
		mine   int
		leases []*coordinationv1.Lease
		want   string // a substring of the reason; "" for none
	}{
		{name: "alone", mine: 128, leases: []*coordinationv1.Lease{layoutLease(leaseKindPeer, "p-self", "self", "0", now)}},
		{name: "peers agree", mine: 128, leases: []*coordinationv1.Lease{
			layoutLease(leaseKindPeer, "p-a", "a", "128", now), layoutLease(leaseKindFence, "f-bucket-3", "a", "128", now)}},
		{name: "a peer announces another layout", mine: 128, leases: []*coordinationv1.Lease{
			layoutLease(leaseKindPeer, "p-a", "a", "0", now)}, want: `replica "a" uses --shard-buckets=0`},
		{name: "an older peer holding per-cluster fences, mine per-cluster", mine: 0, leases: []*coordinationv1.Lease{
			layoutLease(leaseKindPeer, "p-a", "a", "", now), layoutLease(leaseKindFence, "f-east", "a", "", now)}},
		{name: "an older peer holding per-cluster fences, mine buckets", mine: 128, leases: []*coordinationv1.Lease{
			layoutLease(leaseKindPeer, "p-a", "a", "", now), layoutLease(leaseKindFence, "f-east", "a", "", now)},
			want: `fence Lease f-east is held by "a" under --shard-buckets=0`},
		{name: "an older peer holding nothing", mine: 0, leases: []*coordinationv1.Lease{
			layoutLease(leaseKindPeer, "p-a", "a", "", now)}, want: `replica "a" announces no fence layout`},
		{name: "a fence of another layout outlives its holder's peer Lease", mine: 128, leases: []*coordinationv1.Lease{
			layoutLease(leaseKindFence, "f-bucket-7", "gone", "32", now)}, want: `held by "gone" under --shard-buckets=32`},
		{name: "that fence expired", mine: 128, leases: []*coordinationv1.Lease{
			layoutLease(leaseKindFence, "f-bucket-7", "gone", "32", now.Add(-time.Hour))}},
		{name: "that fence released", mine: 128, leases: []*coordinationv1.Lease{
			layoutLease(leaseKindFence, "f-bucket-7", "", "32", now)}},
		{name: "a peer of another layout expired", mine: 128, leases: []*coordinationv1.Lease{
			layoutLease(leaseKindPeer, "p-a", "a", "0", now.Add(-time.Hour))}},
		{name: "our own fences", mine: 128, leases: []*coordinationv1.Lease{
			layoutLease(leaseKindFence, "f-east", "self", "", now)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ob := newObserver(time.Second)
			for _, l := range tc.leases {
				ob.record(l, l.Spec.RenewTime.Time) // observed when written
			}
			got := ob.layoutConflict(now, "self", tc.mine)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("layoutConflict = %q, want %q", got, tc.want)
			}
		})
	}
}

// A replica that sees a peer of another layout releases the fences it
// holds and acquires none, says so in its metric, and keeps its connections;
// once that peer is gone it owns its clusters again.
func TestCoordinatorHoldsNoFenceWhileAnotherLayoutIsInUse(t *testing.T) {
	h := newHarness(t, "r0", nil) // a fence per cluster
	h.addCluster("east")
	h.c.step(h.ctx)
	h.waitEngaged("east")

	h.peerWithLayout("r1", "128") // a replica of a rollout to --shard-buckets=128
	h.c.step(h.ctx)
	if _, ok := h.owns("east"); ok {
		t.Fatal("owns east beside a replica of another layout")
	}
	if f := h.fence("east"); f == nil || ptr.Deref(f.Spec.HolderIdentity, "") != "" {
		t.Errorf("east's fence not released: %+v", f)
	}
	h.waitEngaged()
	if got := testutil.ToFloat64(h.c.metrics.layoutConflict); got != 1 {
		t.Errorf("%s = %v, want 1", metricLayout, got)
	}
	if !h.c.Wanted("east") {
		t.Error("the connection to east was dropped during the pause")
	}

	h.clk.Step(16 * time.Second) // r1's peer Lease expires (its rollout was undone)
	h.peer("r0-twin")            // a replica of our layout is no reason to wait
	h.c.step(h.ctx)
	h.c.step(h.ctx)
	if got := testutil.ToFloat64(h.c.metrics.layoutConflict); got != 0 {
		t.Errorf("%s = %v after the other layout left, want 0", metricLayout, got)
	}
	owner := AssignBounded([]Unit{{Key: "east", Load: 1}}, []Peer{{ID: "r0"}, {ID: "r0-twin"}}, DefaultBalance)["east"]
	if _, ok := h.owns("east"); ok != (owner == "r0") {
		t.Errorf("owns east = %v, assigned to %s", ok, owner)
	}
}

// A replica of a new layout acquires nothing while a fence of the old one is
// held live, even when its holder's peer Lease is gone.
func TestCoordinatorWaitsForTheOldLayoutsFences(t *testing.T) {
	h := newHarness(t, "r0", func(o *Options) { o.Buckets = 128 })
	h.addCluster("east")
	h.c.obs.record(layoutLease(leaseKindFence, leaseName(DefaultFencePrefix, "east"), "old", "", h.clk.Now()), h.clk.Now())
	h.c.step(h.ctx)
	if _, ok := h.owns("east"); ok {
		t.Fatal("owns east while its per-cluster fence is held")
	}
	if f := h.fence(FenceKey("east", 128)); f != nil {
		t.Errorf("acquired the bucket fence: %+v", f)
	}
	h.clk.Step(16 * time.Second)
	h.c.step(h.ctx)
	if _, ok := h.owns("east"); !ok {
		t.Error("does not own east once the old fence expired")
	}
}

// A fence Lease another layout wrote under the same name (bucket-N of 32
// buckets and of 128 share it) says the new layout once taken over, or
// every replica of the new layout would see the old one still in use.
func TestFenceTakenOverSaysItsLayout(t *testing.T) {
	h := newHarness(t, "r0", func(o *Options) { o.Buckets = 4 })
	h.addCluster("east")
	key := FenceKey("east", 4)
	old := layoutLease(leaseKindFence, leaseName(DefaultFencePrefix, key), "", "32", h.clk.Now()) // released
	old.Annotations[hubapi.FenceKeyAnnotation] = "bucket-x"
	created, err := h.cs.CoordinationV1().Leases(testNS).Create(h.ctx, old, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.c.obs.record(created, h.clk.Now())
	h.c.step(h.ctx)
	f := h.fence(key)
	if ptr.Deref(f.Spec.HolderIdentity, "") != "r0" {
		t.Fatalf("fence not taken over: %+v", f)
	}
	if got := f.Annotations[hubapi.ShardBucketsAnnotation]; got != "4" {
		t.Errorf("%s = %q on the taken-over fence, want 4", hubapi.ShardBucketsAnnotation, got)
	}
	if got := f.Annotations[hubapi.FenceKeyAnnotation]; got != key {
		t.Errorf("%s = %q, want %s", hubapi.FenceKeyAnnotation, got, key)
	}
	if why := h.c.obs.layoutConflict(h.clk.Now(), "r1", 4); why != "" {
		t.Errorf("a replica of the same layout sees a conflict: %s", why)
	}
}
