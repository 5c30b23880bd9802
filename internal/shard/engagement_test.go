package shard

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// A registered cluster nobody could connect yet is assigned and its fence
// held all the same: the owner wants the connection (and keeps retrying),
// and Owns stays false until the provider hands the cluster over.
func TestRegisteredClusterIsOwnedBeforeItConnects(t *testing.T) {
	h := newHarness(t, "r0", nil)
	var woke []multicluster.ClusterName
	h.c.OnWantedChanged(func(n multicluster.ClusterName) { woke = append(woke, n) })
	h.c.Register("east")
	if h.c.Wanted("east") {
		t.Fatal("wanted before the first decision")
	}
	h.c.step(h.ctx)
	if f := h.fence("east"); f == nil || *f.Spec.HolderIdentity != "r0" {
		t.Fatalf("fence of an unconnected cluster: %+v", f)
	}
	if !h.c.Wanted("east") || !slices.Equal(woke, []multicluster.ClusterName{"east"}) {
		t.Fatalf("wanted %v, woke %v", h.c.Wanted("east"), woke)
	}
	if _, ok := h.owns("east"); ok {
		t.Error("owns a cluster it is not connected to")
	}
	if got := h.c.Share(); got != 1 {
		t.Errorf("Share %v, want 1 (the fence is held)", got)
	}
	h.addCluster("east")
	h.c.step(h.ctx)
	h.waitEngaged("east")
	if _, ok := h.owns("east"); !ok {
		t.Error("connected and fenced, yet not owned")
	}
	// Unregistered and disconnected: released, no longer wanted.
	h.c.Unregister("east")
	h.c.step(h.ctx)
	if f := h.fence("east"); f == nil || *f.Spec.HolderIdentity != "r0" {
		t.Fatalf("still connected: the fence stays until the provider lets go: %+v", f)
	}
}

// Each replica wants the clusters it is assigned and, with Standby = N, the
// N clusters (highest score first) it would take over if their owner died:
// those the assignment without that owner gives to it. Nothing else.
func TestStandbyAreTheClustersItWouldTakeOver(t *testing.T) {
	const n = 30
	h := newHarness(t, "r0", func(o *Options) { o.Standby = 4 })
	var names []string
	var units []Unit
	for i := range n {
		name := "cluster-" + string(rune('a'+i%26)) + string(rune('0'+i/26))
		names = append(names, name)
		units = append(units, Unit{Key: name, Load: 1})
		h.c.Register(multicluster.ClusterName(name))
	}
	h.peer("r1")
	h.peer("r2")
	h.c.step(h.ctx)
	all := []Peer{{ID: "r0", Weight: 1}, {ID: "r1", Weight: 1}, {ID: "r2", Weight: 1}}
	assign := AssignBounded(units, all, DefaultBalance)
	next := map[string]bool{}
	for _, gone := range []string{"r1", "r2"} {
		rest := slices.DeleteFunc(slices.Clone(all), func(p Peer) bool { return p.ID == gone })
		alt := AssignBounded(units, rest, DefaultBalance)
		for k, o := range assign {
			if o == gone && alt[k] == "r0" {
				next[k] = true
			}
		}
	}
	if len(next) < 4 {
		t.Fatalf("only %d takeover candidates; the test needs 4", len(next))
	}
	standby := 0
	for _, name := range names {
		w := h.c.Wanted(multicluster.ClusterName(name))
		switch {
		case assign[name] == "r0":
			if !w {
				t.Errorf("%s assigned to r0 but not wanted", name)
			}
		case w:
			standby++
			if !next[name] {
				t.Errorf("%s wanted as a standby, but r0 would not take it over", name)
			}
		}
	}
	if standby != 4 || testutil.ToFloat64(h.c.metrics.standby) != 4 {
		t.Errorf("%d standbys (metric %v), want 4", standby, testutil.ToFloat64(h.c.metrics.standby))
	}
	// Without its own peer Lease a replica keeps its connections as they
	// are (it owns nothing meanwhile): nothing is dropped during a hub outage.
	before := map[string]bool{}
	for _, name := range names {
		before[name] = h.c.Wanted(multicluster.ClusterName(name))
	}
	h.cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("hub unreachable")
	})
	h.clk.Step(h.c.opts.RenewDeadline + time.Second)
	h.c.step(h.ctx)
	for _, name := range names {
		if h.c.Wanted(multicluster.ClusterName(name)) != before[name] {
			t.Errorf("%s: wanted changed while the replica could not renew its peer Lease", name)
		}
	}
}

// A renewal answered only after the renew deadline keeps the fence, but
// Owns was false from the deadline on (writes refused, reconciles skipped):
// the cluster is engaged anew, so the controllers see every object again.
func TestLateRenewalRestartsTheEngagement(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.addCluster("east")
	h.c.step(h.ctx)
	h.waitEngaged("east")
	h.rec.mu.Lock()
	first := h.rec.engaged["east"]
	h.rec.mu.Unlock()
	h.cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if l, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease); ok && l.Name == leaseName(DefaultFencePrefix, "east") {
			h.clk.Step(h.c.opts.RenewDeadline) // the hub answers the fence renewal late
		}
		return false, nil, nil
	})
	h.clk.Step(h.c.opts.RenewInterval)
	h.c.step(h.ctx)
	h.cs.ReactionChain = h.cs.ReactionChain[1:]
	if first.Err() == nil {
		t.Error("the engagement of the late renewal was not ended")
	}
	h.waitEngaged("east")
	h.rec.mu.Lock()
	again := h.rec.engaged["east"]
	h.rec.mu.Unlock()
	if again == first || again.Err() != nil {
		t.Error("not engaged anew")
	}
	h.c.step(h.ctx) // renewed again, on time
	if stamp, ok := h.owns("east"); !ok || stamp != "r0/0" {
		t.Errorf("after the late renewal: owns %v with stamp %q, want r0/0 (the same holding)", ok, stamp)
	}
}
