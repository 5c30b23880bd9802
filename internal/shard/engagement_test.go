package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
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
// the engagement goes on, and Paused tells the controllers that what ran
// during the pause must be tried again — only that, not every object.
func TestLateRenewalPausesOwnership(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.addCluster("east")
	h.c.step(h.ctx)
	h.waitEngaged("east")
	h.rec.mu.Lock()
	first := h.rec.engaged["east"]
	h.rec.mu.Unlock()
	before := h.c.Mark("east")
	if _, paused := h.c.Paused("east", before); paused {
		t.Fatal("paused before any late renewal")
	}
	var during uint64
	var ownedDuring bool
	h.renewLate("east", h.c.opts.RenewDeadline, func() { // the hub answers the fence renewal late
		during = h.c.Mark("east")
		_, ownedDuring = h.owns("east")
	})
	if ownedDuring {
		t.Error("owned past the renew deadline, before the late renewal came")
	}
	if first.Err() != nil {
		t.Error("the late renewal ended the engagement; it should only pause ownership")
	}
	for name, mark := range map[string]uint64{"a reconcile begun before the pause": before, "a reconcile begun during the pause": during} {
		if retry, paused := h.c.Paused("east", mark); !paused || retry != h.c.opts.RetryPeriod {
			t.Errorf("%s: Paused = %v, %v; want true, %v", name, paused, retry, h.c.opts.RetryPeriod)
		}
	}
	h.c.step(h.ctx) // renewed again, on time
	if stamp, ok := h.owns("east"); !ok || stamp != "r0/0" {
		t.Errorf("after the late renewal: owns %v with stamp %q, want r0/0 (the same holding)", ok, stamp)
	}
	after := h.c.Mark("east")
	h.clk.Step(h.c.opts.RenewInterval)
	h.c.step(h.ctx) // and again
	if _, paused := h.c.Paused("east", after); paused {
		t.Error("a reconcile begun after the pause ended counts as paused")
	}
	// Once the fence is lost, nothing is retried here: the next owner's
	// engagement sees every object anew.
	h.cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("hub unreachable")
	})
	h.clk.Step(h.c.opts.RenewDeadline + time.Second)
	h.c.step(h.ctx)
	if _, paused := h.c.Paused("east", before); paused {
		t.Error("Paused after the fence was lost")
	}
}

// renewLate runs the next decision step RenewInterval on, with the hub
// answering cluster's fence renewal by more later: the clock moves on
// while the request is in flight, and meanwhile runs then.
func (h *harness) renewLate(cluster string, by time.Duration, meanwhile func()) {
	h.t.Helper()
	h.cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if l, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease); ok && l.Name == leaseName(DefaultFencePrefix, cluster) {
			h.clk.Step(by)
			meanwhile()
		}
		return false, nil, nil
	})
	h.clk.Step(h.c.opts.RenewInterval)
	h.c.step(h.ctx)
	h.cs.ReactionChain = h.cs.ReactionChain[1:]
}

// A renewal sent before the renew deadline that lands after it ends a
// pause too: a reconcile begun before it that checked ownership while the
// request was in flight was refused, and is retried.
func TestRenewalLandingAfterTheDeadlineEndsAPause(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.addCluster("east")
	h.c.step(h.ctx)
	h.waitEngaged("east")
	before := h.c.Mark("east")
	var ownedInFlight bool
	h.renewLate("east", h.c.opts.RenewDeadline-h.c.opts.RenewInterval, func() { // sent in time, answered at the deadline
		_, ownedInFlight = h.owns("east")
	})
	if ownedInFlight {
		t.Fatal("owned at the renew deadline while the renewal was in flight")
	}
	if _, paused := h.c.Paused("east", before); !paused {
		t.Error("a reconcile begun before the renewal, refused while it was in flight, is not retried")
	}
}

// When a replica dies, a survivor's new standbys (those it would take from
// the other survivors) wait until it holds every fence it now has to take
// over: the takeover goes first. Standbys it already had stay connected.
func TestNewStandbysWaitForTheTakeover(t *testing.T) {
	const n = 30
	h := newHarness(t, "r0", func(o *Options) { o.Standby = n })
	var names []multicluster.ClusterName
	for i := range n {
		name := multicluster.ClusterName(fmt.Sprintf("cluster-%02d", i))
		names = append(names, name)
		h.c.Register(name)
	}
	h.peer("r1")
	h.peer("r2")
	h.c.step(h.ctx)
	wanted := func() map[multicluster.ClusterName]bool {
		w := map[multicluster.ClusterName]bool{}
		for _, name := range names {
			if h.c.Wanted(name) {
				w[name] = true
			}
		}
		return w
	}
	before := wanted()
	var r1s []multicluster.ClusterName
	for _, name := range names {
		if h.c.plan.assign[string(name)] == "r1" {
			r1s = append(r1s, name)
		}
	}

	// r1 is gone (its peer Lease lapsed), but the fences it held are still live.
	h.clk.Step(16 * time.Second)
	h.peer("r2")
	for _, name := range r1s {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName(DefaultFencePrefix, string(name)), Namespace: testNS,
			Labels: map[string]string{hubapi.LeaseKindLabel: leaseKindFence}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("r1"), LeaseDurationSeconds: ptr.To(int32(15)),
				RenewTime: ptr.To(metav1.NewMicroTime(h.clk.Now()))}}
		created, err := h.cs.CoordinationV1().Leases(testNS).Create(h.ctx, l, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h.c.obs.record(created, h.clk.Now())
	}
	h.c.step(h.ctx)
	var takeover, fresh []multicluster.ClusterName
	for _, name := range names {
		switch {
		case h.c.plan.assign[string(name)] == "r0" && slices.Contains(r1s, name):
			takeover = append(takeover, name)
		case h.c.plan.standby[name] && !before[name]:
			fresh = append(fresh, name)
		}
	}
	if len(takeover) == 0 || len(fresh) == 0 {
		t.Fatalf("the test needs clusters to take over (%v) and new standbys (%v)", takeover, fresh)
	}
	during := wanted()
	for _, name := range takeover {
		if !during[name] {
			t.Errorf("%s, to be taken over, is not wanted", name)
		}
	}
	for _, name := range fresh {
		if during[name] {
			t.Errorf("%s became a standby during the takeover and was connected at once", name)
		}
	}
	for name := range before {
		if !during[name] {
			t.Errorf("%s was connected before the takeover and was dropped during it", name)
		}
	}

	// r1's fences expire; once they are all held the new standbys follow.
	for range 3 {
		h.clk.Step(16 * time.Second)
		h.peer("r2")
		h.c.step(h.ctx)
	}
	for _, name := range takeover {
		if f := h.fence(string(name)); f == nil || *f.Spec.HolderIdentity != "r0" {
			t.Fatalf("%s not taken over: %+v", name, f)
		}
	}
	after := wanted()
	for _, name := range fresh {
		if !after[name] && h.c.plan.standby[name] {
			t.Errorf("%s, a standby, still not connected after the takeover", name)
		}
	}
}

// The per-cluster owned gauge follows the fence: a series of 1 while held,
// none once lost, so a fleet of N clusters exports N series, not N per
// replica.
func TestClusterOwnedGaugeFollowsTheFence(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.addCluster("east")
	h.c.step(h.ctx)
	h.waitEngaged("east")
	h.c.step(h.ctx)
	if n := testutil.CollectAndCount(h.c.metrics.clusterOwned); n != 1 {
		t.Fatalf("%d owned series while the fence is held, want 1", n)
	}
	if got := testutil.ToFloat64(h.c.metrics.clusterOwned); got != 1 {
		t.Fatalf("owned gauge %v while the fence is held, want 1", got)
	}
	h.cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("hub unreachable")
	})
	h.clk.Step(h.c.opts.RenewDeadline + time.Second)
	h.c.step(h.ctx)
	h.c.step(h.ctx)
	if n := testutil.CollectAndCount(h.c.metrics.clusterOwned); n != 0 {
		t.Errorf("%d owned series after the fence was lost, want 0", n)
	}
}

// A cluster that is no longer registered loses its series with its fence.
func TestClusterOwnedGaugeEndsWithTheCluster(t *testing.T) {
	h := newHarness(t, "r0", nil)
	gone := h.addCluster("east")
	h.c.step(h.ctx)
	h.waitEngaged("east")
	h.c.step(h.ctx)
	if n := testutil.CollectAndCount(h.c.metrics.clusterOwned); n != 1 {
		t.Fatalf("%d owned series while the fence is held, want 1", n)
	}
	gone()
	if err := wait.PollUntilContextTimeout(h.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		h.c.step(h.ctx)
		return testutil.CollectAndCount(h.c.metrics.clusterOwned) == 0, nil
	}); err != nil {
		t.Errorf("%d owned series after the cluster is gone, want 0", testutil.CollectAndCount(h.c.metrics.clusterOwned))
	}
}
