package shard

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

const testNS = "certhub"

// recorder is a multicluster.Aware that records which clusters are engaged.
type recorder struct {
	mu      sync.Mutex
	engaged map[multicluster.ClusterName]context.Context
	fail    error
}

func (r *recorder) Engage(ctx context.Context, name multicluster.ClusterName, _ cluster.Cluster) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.engaged[name] = ctx
	return nil
}

// active lists the clusters engaged and not cancelled.
func (r *recorder) active() map[multicluster.ClusterName]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[multicluster.ClusterName]bool{}
	for n, ctx := range r.engaged {
		if ctx.Err() == nil {
			out[n] = true
		}
	}
	return out
}

// harness is one replica's Coordinator on a fake clientset and a fake clock,
// driven step by step (no informer: other replicas' Leases are observed by hand).
type harness struct {
	t   testing.TB
	c   *Coordinator
	cs  *fake.Clientset
	clk *clocktesting.FakeClock
	rec *recorder
	ctx context.Context
}

var epoch = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newHarness(t testing.TB, id string, mutate func(*Options)) *harness {
	t.Helper()
	clk := clocktesting.NewFakeClock(epoch)
	opts := Options{Config: &rest.Config{}, Namespace: testNS, Identity: id, Registerer: prometheus.NewRegistry(), clock: clk}
	if mutate != nil {
		mutate(&opts)
	}
	opts.defaults()
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	c, err := newCoordinator(opts, logr.Discard(), cs)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{engaged: map[multicluster.ClusterName]context.Context{}}
	c.AddAware(rec)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &harness{t: t, c: c, cs: cs, clk: clk, rec: rec, ctx: ctx}
}

// run starts the Coordinator's loop (Start) until the test ends, and
// returns the context it runs under.
func (h *harness) run() context.Context {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.c.Start(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("Start: %v", err)
		}
	})
	return ctx
}

// addCluster makes name available, as the provider does; the returned
// cancel ends the cluster's life (registration deleted).
func (h *harness) addCluster(name string) context.CancelFunc {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	if err := h.c.Engage(ctx, multicluster.ClusterName(name), nil); err != nil {
		h.t.Fatal(err)
	}
	return cancel
}

// peer makes another replica live, as if its peer Lease had just been seen;
// it announces the harness's fence layout.
func (h *harness) peer(id string) {
	h.peerWithLayout(id, strconv.Itoa(h.c.opts.Buckets))
}

// peerWithLayout is peer announcing layout ("" announces none, as versions
// before layouts did).
func (h *harness) peerWithLayout(id, layout string) {
	ann := map[string]string{}
	if layout != "" {
		ann[hubapi.ShardBucketsAnnotation] = layout
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName(DefaultPeerPrefix, id), Namespace: testNS,
		Labels: map[string]string{hubapi.LeaseKindLabel: leaseKindPeer}, Annotations: ann},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(id), LeaseDurationSeconds: ptr.To(int32(15)),
			RenewTime: ptr.To(metav1.NewMicroTime(h.clk.Now()))}}
	h.c.obs.record(l, h.clk.Now())
}

// fence returns the fence Lease of key as stored in the fake API server.
func (h *harness) fence(key string) *coordinationv1.Lease {
	h.t.Helper()
	l, err := h.cs.CoordinationV1().Leases(testNS).Get(context.Background(), leaseName(DefaultFencePrefix, key), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// waitEngaged waits for the asynchronous Engage calls of the awares.
func (h *harness) waitEngaged(want ...string) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := h.rec.active()
		ok := len(got) == len(want)
		for _, w := range want {
			ok = ok && got[multicluster.ClusterName(w)]
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("engaged %v, want %v", got, want)
		}
		time.Sleep(time.Millisecond) // the awares engage on their own goroutines
	}
}

func (h *harness) owns(name string) (string, bool) { return h.c.Owns(multicluster.ClusterName(name)) }

// A lone replica acquires each cluster's fence, engages it and stamps its
// writes with the fence's transition; it renews every RenewInterval.
func TestCoordinatorAcquiresAndRenews(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.addCluster("east")
	h.c.step(h.ctx)
	f := h.fence("east")
	if f == nil || *f.Spec.HolderIdentity != "r0" || *f.Spec.LeaseTransitions != 0 || f.Annotations[hubapi.FenceKeyAnnotation] != "east" {
		t.Fatalf("fence after the first step: %+v", f)
	}
	if stamp, ok := h.owns("east"); !ok || stamp != "r0/0" {
		t.Fatalf("Owns = %q, %v; want r0/0, true", stamp, ok)
	}
	h.waitEngaged("east")

	renewed := f.Spec.RenewTime.Time
	h.clk.Step(h.c.opts.RenewInterval - time.Millisecond)
	h.c.step(h.ctx)
	if got := h.fence("east").Spec.RenewTime.Time; !got.Equal(renewed) {
		t.Errorf("renewed before RenewInterval: %v → %v", renewed, got)
	}
	h.clk.Step(time.Millisecond)
	h.c.step(h.ctx)
	if got := h.fence("east").Spec.RenewTime.Time; !got.Equal(h.clk.Now()) {
		t.Errorf("not renewed at RenewInterval: renewTime %v, now %v", got, h.clk.Now())
	}
	if _, ok := h.owns("east"); !ok {
		t.Errorf("a renewed fence is not owned")
	}
}

// A holder that cannot renew stops writing at the renew deadline, before
// the Lease expires for anyone else, and disengages.
func TestCoordinatorLosesAtRenewDeadline(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.addCluster("east")
	h.c.step(h.ctx)
	h.waitEngaged("east")
	h.cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("hub unreachable")
	})
	h.cs.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("hub unreachable")
	})
	renewed := h.clk.Now()
	if _, until, ok := h.c.OwnsUntil("east"); !ok || !until.Equal(renewed.Add(h.c.opts.RenewDeadline)) {
		t.Fatalf("OwnsUntil = %v, %v; want the last renewal + RenewDeadline (%v)", until, ok, renewed.Add(h.c.opts.RenewDeadline))
	}
	h.clk.Step(h.c.opts.RenewInterval)
	h.c.step(h.ctx) // renew fails, deadline not reached: still ours
	if _, ok := h.owns("east"); !ok {
		t.Fatalf("lost before the renew deadline")
	}
	// A write started now must end by the same instant: the failed renewal moved nothing.
	if _, until, _ := h.c.OwnsUntil("east"); !until.Equal(renewed.Add(h.c.opts.RenewDeadline)) {
		t.Errorf("a failed renewal moved the write deadline to %v", until)
	}
	// Owns turns false at the deadline on its own, before the loop notices.
	h.clk.Step(h.c.opts.RenewDeadline - h.c.opts.RenewInterval)
	if _, ok := h.owns("east"); ok {
		t.Fatalf("Owns still true at the renew deadline")
	}
	h.c.step(h.ctx)
	h.waitEngaged()
}

// Another replica's fence is respected while live and taken over once it
// expires by this replica's clock; the transition count goes up and the
// takeover counts as a handoff.
func TestCoordinatorTakesOverAfterExpiry(t *testing.T) {
	h := newHarness(t, "r0", func(o *Options) { o.MaxClockSkew = -1 }) // judge by observation only
	h.addCluster("east")
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName(DefaultFencePrefix, "east"), Namespace: testNS,
		Labels: map[string]string{hubapi.LeaseKindLabel: leaseKindFence}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("dead"), LeaseDurationSeconds: ptr.To(int32(15)),
			LeaseTransitions: ptr.To(int32(4)), RenewTime: ptr.To(metav1.NewMicroTime(epoch.Add(-time.Hour)))}}
	created, err := h.cs.CoordinationV1().Leases(testNS).Create(h.ctx, other, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.c.obs.record(created, h.clk.Now())
	h.c.step(h.ctx)
	if _, ok := h.owns("east"); ok {
		t.Fatalf("took a fence whose holder was seen live just now")
	}
	h.clk.Step(15*time.Second - time.Millisecond)
	h.c.step(h.ctx)
	if _, ok := h.owns("east"); ok {
		t.Fatalf("took the fence before it expired")
	}
	h.clk.Step(time.Millisecond)
	h.c.step(h.ctx)
	stamp, ok := h.owns("east")
	if !ok || stamp != "r0/5" {
		t.Fatalf("after expiry Owns = %q, %v; want r0/5 (transition 4 + 1)", stamp, ok)
	}
	if got := *h.fence("east").Spec.HolderIdentity; got != "r0" {
		t.Errorf("holder %q", got)
	}
}

// With MaxClockSkew, a Lease whose renewTime is already older than lease
// duration + skew is expired when first seen: no waiting a whole lease for
// a holder that is long gone (the restart/relist case).
func TestCoordinatorSkewShortcut(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.addCluster("east")
	stale := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName(DefaultFencePrefix, "east"), Namespace: testNS,
		Labels: map[string]string{hubapi.LeaseKindLabel: leaseKindFence}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("dead"), LeaseDurationSeconds: ptr.To(int32(15)),
			RenewTime: ptr.To(metav1.NewMicroTime(epoch.Add(-16*time.Second - time.Millisecond)))}}
	created, err := h.cs.CoordinationV1().Leases(testNS).Create(h.ctx, stale, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.c.obs.record(created, h.clk.Now())
	h.c.step(h.ctx)
	if _, ok := h.owns("east"); !ok {
		t.Fatalf("a Lease renewed more than lease duration + skew ago was not taken at once")
	}
	// A renewTime in the future cannot extend a claim past what we observed.
	h2 := newHarness(t, "r0", nil)
	h2.addCluster("west")
	future := stale.DeepCopy()
	future.Name = leaseName(DefaultFencePrefix, "west")
	future.Spec.RenewTime = ptr.To(metav1.NewMicroTime(epoch.Add(time.Hour)))
	created, err = h2.cs.CoordinationV1().Leases(testNS).Create(h2.ctx, future, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h2.c.obs.record(created, h2.clk.Now())
	h2.clk.Step(15 * time.Second)
	h2.c.step(h2.ctx)
	if _, ok := h2.owns("west"); !ok {
		t.Fatalf("a renewTime in the future extended the claim beyond the observed lease duration")
	}
}

// When a second replica appears, the clusters the assignment gives it are released:
// engagement stops first, then the holder is cleared so the new owner need
// not wait for expiry. Scaling back down hands them back.
func TestCoordinatorReleasesOnRebalance(t *testing.T) {
	h := newHarness(t, "r0", nil)
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, n := range names {
		h.addCluster(n)
	}
	h.c.step(h.ctx)
	h.waitEngaged(names...)
	if got := h.c.Share(); got != 1 {
		t.Errorf("Share = %v holding every cluster, want 1", got)
	}
	h.peer("r1")
	h.c.step(h.ctx)
	peers := []Peer{{ID: "r0", Weight: 1}, {ID: "r1", Weight: 1}}
	var units []Unit
	for _, n := range names {
		units = append(units, Unit{Key: n, Load: 1})
	}
	assignment := AssignBounded(units, peers, DefaultBalance)
	var mine, theirs []string
	for _, n := range names {
		if assignment[n] == "r0" {
			mine = append(mine, n)
		} else {
			theirs = append(theirs, n)
		}
	}
	if len(theirs) == 0 || len(mine) == 0 {
		t.Fatalf("test clusters all hash to one replica: %v / %v", mine, theirs)
	}
	h.waitEngaged(mine...)
	for _, n := range theirs {
		if _, ok := h.owns(n); ok {
			t.Errorf("%s still owned after it moved to r1", n)
		}
		if f := h.fence(n); *f.Spec.HolderIdentity != "" || *f.Spec.LeaseDurationSeconds != 1 {
			t.Errorf("%s not released: holder %q duration %d", n, *f.Spec.HolderIdentity, *f.Spec.LeaseDurationSeconds)
		}
	}
	if got, want := h.c.Share(), float64(len(mine))/float64(len(names)); got != want {
		t.Errorf("Share = %v after the rebalance, want %d/%d", got, len(mine), len(names))
	}
	// r1 goes away (its peer Lease expires): everything comes back.
	h.clk.Step(15 * time.Second)
	h.c.step(h.ctx)
	h.waitEngaged(names...)
}

// A cluster whose registration goes away is disengaged and its fence
// released; Start's shutdown hands every fence back and deletes the peer Lease.
func TestCoordinatorClusterRemovedAndShutdown(t *testing.T) {
	h := newHarness(t, "r0", nil)
	gone := h.addCluster("gone")
	h.addCluster("kept")
	h.c.step(h.ctx)
	h.waitEngaged("gone", "kept")
	gone()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.c.step(h.ctx)
		if f := h.fence("gone"); f != nil && *f.Spec.HolderIdentity == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fence of a removed cluster was not released: %+v", h.fence("gone").Spec)
		}
		time.Sleep(time.Millisecond) // the cluster's ctx watcher runs on its own goroutine
	}
	h.waitEngaged("kept")

	before := len(h.cs.Actions())
	h.c.shutdown()
	h.waitEngaged()
	if f := h.fence("kept"); *f.Spec.HolderIdentity != "" {
		t.Errorf("shutdown did not release %s", f.Name)
	}
	peer := leaseName(DefaultPeerPrefix, "r0")
	if _, err := h.cs.CoordinationV1().Leases(testNS).Get(context.Background(), peer, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("peer Lease not deleted on shutdown: %v", err)
	}
	// The fences are released before the peer Lease goes (measured: the
	// other order hands off slower, see shutdown).
	var order []string
	for _, a := range h.cs.Actions()[before:] {
		switch a := a.(type) {
		case k8stesting.DeleteAction:
			order = append(order, "delete "+a.GetName())
		case k8stesting.UpdateAction:
			if l, ok := a.GetObject().(*coordinationv1.Lease); ok {
				order = append(order, "update "+l.Name)
			}
		}
	}
	if want := []string{"update " + leaseName(DefaultFencePrefix, "kept"), "delete " + peer}; !slices.Equal(order, want) {
		t.Errorf("shutdown wrote %q, want %q", order, want)
	}
}

// Losing a race for a fence (409 / AlreadyExists) is quiet and retried; a
// renewal refused because someone else holds the Lease now loses it at once.
func TestCoordinatorConflicts(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.addCluster("east")
	h.cs.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if l, ok := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease); ok && l.Name == leaseName(DefaultFencePrefix, "east") {
			return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "leases"}, "east")
		}
		return false, nil, nil
	})
	h.c.step(h.ctx)
	if _, ok := h.owns("east"); ok {
		t.Fatalf("owned after losing the create race")
	}
	h.cs.ReactionChain = h.cs.ReactionChain[1:]
	h.c.step(h.ctx)
	if _, ok := h.owns("east"); !ok {
		t.Fatalf("not acquired on retry")
	}
	// Someone else took it (we see their write), and our renewal conflicts.
	taken := h.fence("east").DeepCopy()
	taken.Spec.HolderIdentity = ptr.To("r9")
	taken.ResourceVersion = "999"
	h.c.obs.record(taken, h.clk.Now())
	h.cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, "east", errors.New("changed"))
	})
	h.clk.Step(h.c.opts.RenewInterval)
	h.c.step(h.ctx)
	if _, ok := h.owns("east"); ok {
		t.Fatalf("still owned after the fence was taken by r9")
	}
}

// An aware that fails to engage is undone and retried on the next step.
func TestCoordinatorEngageFailureRetries(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.rec.fail = errors.New("cache did not sync")
	h.addCluster("east")
	h.c.step(h.ctx)
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.c.mu.Lock()
		undone := h.c.clusters["east"].engCancel == nil
		h.c.mu.Unlock()
		if undone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a failed engagement was not undone")
		}
		time.Sleep(time.Millisecond) // engage runs on its own goroutine
	}
	if _, ok := h.owns("east"); ok {
		t.Fatalf("Owns true for a cluster that failed to engage")
	}
	h.rec.mu.Lock()
	h.rec.fail = nil
	h.rec.mu.Unlock()
	h.c.step(h.ctx)
	h.waitEngaged("east")
}

// With buckets, one fence guards every cluster of its bucket.
func TestCoordinatorBuckets(t *testing.T) {
	h := newHarness(t, "r0", func(o *Options) { o.Buckets = 4 })
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		h.addCluster(n)
	}
	h.c.step(h.ctx)
	list, err := h.cs.CoordinationV1().Leases(testNS).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fences := 0
	for _, l := range list.Items {
		if l.Labels[hubapi.LeaseKindLabel] == leaseKindFence {
			fences++
		}
	}
	keys := map[string]bool{}
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		keys[FenceKey(n, 4)] = true
		if _, ok := h.owns(n); !ok {
			t.Errorf("%s not owned", n)
		}
	}
	if fences != len(keys) {
		t.Errorf("%d fence Leases for %d buckets in use", fences, len(keys))
	}
}

// A replica that cannot renew its own peer Lease owns nothing.
func TestCoordinatorOwnsNothingWithoutItsPeerLease(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.addCluster("east")
	h.cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("hub unreachable")
	})
	h.c.step(h.ctx)
	if _, ok := h.owns("east"); ok {
		t.Fatalf("owned without a peer Lease")
	}
	if err := h.c.renewPeer(h.ctx); err == nil {
		t.Fatalf("renewPeer succeeded against an unreachable hub")
	}
}

// A graceful release waits for the downstream writes begun under the fence
// before it clears the holder, and no write begins once it has started.
func TestReleaseWaitsForWritesInFlight(t *testing.T) {
	h := newHarness(t, "r0", nil)
	h.addCluster("east")
	h.c.step(h.ctx)
	h.waitEngaged("east")
	_, until, done, ok := h.c.BeginWrite("east")
	if !ok || !until.After(h.clk.Now()) {
		t.Fatalf("BeginWrite = %v, %v; want a write until a future instant", until, ok)
	}
	h.c.mu.Lock()
	f := h.c.fences[FenceKey("east", h.c.opts.Buckets)]
	h.c.mu.Unlock()
	released := make(chan struct{})
	go func() {
		h.c.release(h.ctx, f, "test")
		close(released)
	}()
	if err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, ok := h.c.Owns("east")
		return !ok, nil
	}); err != nil {
		t.Fatal("Owns still true after the release began")
	}
	if _, _, _, ok := h.c.BeginWrite("east"); ok {
		t.Errorf("a write began during the release")
	}
	select {
	case <-released:
		t.Fatal("released with a write in flight")
	case <-time.After(50 * time.Millisecond):
	}
	if l := h.fence("east"); l == nil || *l.Spec.HolderIdentity != "r0" {
		t.Fatalf("holder cleared with a write in flight: %+v", l)
	}
	done()
	done() // idempotent
	<-released
	if l := h.fence("east"); *l.Spec.HolderIdentity != "" {
		t.Errorf("holder %q after the release, want cleared", *l.Spec.HolderIdentity)
	}
}
