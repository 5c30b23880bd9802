package shard

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

func TestLeaseNamesAreValidAndDistinct(t *testing.T) {
	keys := []string{"east", "East", "east_", "https://kubernetes.default.svc", strings.Repeat("a", 300), strings.Repeat("a", 301), "bucket-3"}
	seen := map[string]string{}
	for _, k := range keys {
		n := leaseName(DefaultFencePrefix, k)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("leaseName(%q) = %q is not a valid name: %v", k, n, errs)
		}
		if other, ok := seen[n]; ok {
			t.Errorf("keys %q and %q share Lease %q", k, other, n)
		}
		seen[n] = k
	}
	if got := leaseName(DefaultFencePrefix, "east"); got != "certhub-shard-east" {
		t.Errorf("a clean name should be kept readable: got %q", got)
	}
}

// FenceKey: the cluster itself without buckets; with buckets, a golden
// bucket per cluster (xxhash64 mod n: every replica and every version must
// agree, or two replicas would guard one cluster with different fences), and
// every bucket in use for a large fleet.
func TestFenceKeyBuckets(t *testing.T) {
	for _, tt := range []struct {
		cluster string
		buckets int
		want    string
	}{
		{"east", 0, "east"},
		{"east", 4, "bucket-2"},
		{"east", 32, "bucket-30"},
		{"west", 32, "bucket-2"},
		{"cluster-1", 4, "bucket-3"},
		{"cluster-1", 32, "bucket-19"},
		{"prod-eu", 32, "bucket-14"},
	} {
		if got := FenceKey(tt.cluster, tt.buckets); got != tt.want {
			t.Errorf("FenceKey(%q, %d) = %q, want %q", tt.cluster, tt.buckets, got, tt.want)
		}
	}
	used := map[string]int{}
	for i := range 1000 {
		used[FenceKey(fmt.Sprintf("cluster-%d", i), 32)]++
	}
	if len(used) != 32 {
		t.Errorf("1000 clusters use %d of 32 buckets", len(used))
	}
}

func lease(name, holder string, renew time.Time, transitions int32) *coordinationv1.Lease {
	mt := metav1.NewMicroTime(renew)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{hubapi.LeaseKindLabel: leaseKindPeer}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](10),
			RenewTime: &mt, LeaseTransitions: ptr.To(transitions)},
	}
}

// Expiry runs on the observer's clock from the last observed change: a holder
// whose clock is far ahead cannot extend its claim, and a resync of an
// unchanged Lease does not refresh it.
func TestObservationExpiryUsesLocalTime(t *testing.T) {
	ob := newObserver(time.Second)
	t0 := time.Unix(1_000_000, 0)
	future := t0.Add(time.Hour) // the holder's clock is an hour ahead
	ob.record(lease("p", "replica-0", future, 0), t0)
	if !ob.live("p", t0.Add(9*time.Second)) {
		t.Fatalf("lease should be live 9s after it was observed")
	}
	ob.record(lease("p", "replica-0", future, 0), t0.Add(9*time.Second)) // resync, no change
	if ob.live("p", t0.Add(10*time.Second)) {
		t.Fatalf("an unchanged lease must expire 10s after its last observed change, whatever its renewTime says")
	}
	ob.record(lease("p", "replica-0", future.Add(time.Second), 0), t0.Add(11*time.Second)) // renewed
	if !ob.live("p", t0.Add(20*time.Second)) {
		t.Fatalf("a renewal restarts the local expiry clock")
	}
	if peers := ob.peers(t0.Add(20 * time.Second)); len(peers) != 1 || peers[0].ID != "replica-0" || peers[0].Weight != 1 {
		t.Fatalf("peers = %v, want replica-0 with weight 1", peers)
	}
	if peers := ob.peers(t0.Add(22 * time.Second)); len(peers) != 0 {
		t.Fatalf("expired peer still listed: %v", peers)
	}
	ob.record(lease("p", "", future, 1), t0.Add(23*time.Second)) // released
	if ob.live("p", t0.Add(23*time.Second)) {
		t.Fatalf("a released lease (no holder) is never live")
	}
}

// A replica that sees a Lease for the first time long after its holder last
// renewed it (it just started, or relisted after the hub restarted) need not
// wait a whole lease: renewTime + duration + MaxClockSkew ends the claim.
// With the rule off, the observer's clock alone decides.
func TestObservationExpiryFromStaleRenewTime(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	stale := lease("p", "replica-0", t0.Add(-30*time.Second), 0) // renewed 30s ago, duration 10s
	fresh := lease("q", "replica-1", t0.Add(-3*time.Second), 0)  // renewed 3s ago
	ob := newObserver(time.Second)
	ob.record(stale, t0)
	ob.record(fresh, t0)
	if ob.live("p", t0) {
		t.Errorf("a Lease renewed 30s ago (duration 10s) is live when first seen")
	}
	if !ob.live("q", t0.Add(7*time.Second)) {
		t.Errorf("a Lease renewed 3s ago must stay live until renewTime + 10s + 1s skew")
	}
	if ob.live("q", t0.Add(8*time.Second)) {
		t.Errorf("a Lease renewed 3s before it was seen is still live 8s later (renewTime + 11s has passed)")
	}
	if got, want := ob.nextExpiry(t0, "replica-x"), t0.Add(8*time.Second); !got.Equal(want) {
		t.Errorf("nextExpiry = %s, want renewTime + duration + skew = %s", got, want)
	}
	off := newObserver(-1)
	off.record(stale, t0)
	if !off.live("p", t0.Add(9*time.Second)) {
		t.Errorf("with MaxClockSkew < 0 expiry must count from the observation only")
	}
}

func TestOptionsValidateLeaseInvariant(t *testing.T) {
	base := func() Options {
		o := Options{Config: nil, Namespace: "certhub", Identity: "r"}
		o.defaults()
		return o
	}
	o := base()
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "Config") {
		t.Fatalf("missing Config not reported: %v", err)
	}
	for name, mutate := range map[string]func(*Options){
		"duration <= deadline":  func(o *Options) { o.LeaseDuration = o.RenewDeadline },
		"deadline <= 1.2 retry": func(o *Options) { o.RetryPeriod = o.RenewDeadline },
		"interval >= deadline":  func(o *Options) { o.RenewInterval = o.RenewDeadline },
		"negative buckets":      func(o *Options) { o.Buckets = -1 },
		"fractional lease":      func(o *Options) { o.LeaseDuration = 15500 * time.Millisecond },
		"sub-second lease": func(o *Options) {
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod, o.RenewInterval = 800*time.Millisecond, 500*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond
		},
	} {
		o := base()
		mutate(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "shard:") {
			t.Errorf("%s: not rejected (%v)", name, err)
		}
	}
}

func TestNextExpiryIgnoresOwnAndReleasedLeases(t *testing.T) {
	ob := newObserver(-1) // observation times only; the stamp rule has its own test
	t0 := time.Unix(2_000_000, 0)
	ob.record(lease("mine", "self", t0, 0), t0)
	ob.record(lease("released", "", t0, 0), t0)
	if got := ob.nextExpiry(t0, "self"); !got.IsZero() {
		t.Fatalf("nextExpiry = %v, want none", got)
	}
	ob.record(lease("a", "other", t0, 0), t0.Add(2*time.Second))
	ob.record(lease("b", "other", t0, 0), t0.Add(5*time.Second))
	if got, want := ob.nextExpiry(t0.Add(3*time.Second), "self"), t0.Add(12*time.Second); !got.Equal(want) {
		t.Fatalf("nextExpiry = %v, want %v (a's observation + 10s)", got, want)
	}
	if got, want := ob.nextExpiry(t0.Add(13*time.Second), "self"), t0.Add(15*time.Second); !got.Equal(want) {
		t.Fatalf("after a expired: nextExpiry = %v, want %v", got, want)
	}
}

// The decision loop reads fence keys from c.keys, hashed once per cluster:
// whatever order registrations come, go, connect and disconnect in, c.keys
// holds exactly the known clusters (registered or connected), each with its
// FenceKey.
func TestFenceKeysFollowTheKnownClusters(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		h := newHarness(t, "r0", func(o *Options) { o.Buckets = 4 * (round % 2) })
		names := []multicluster.ClusterName{"a", "b", "c", "d", "e"}
		cancels := map[multicluster.ClusterName]context.CancelFunc{}
		for range 200 {
			name := names[rng.IntN(len(names))]
			switch rng.IntN(4) {
			case 0:
				h.c.Register(name)
			case 1:
				h.c.Unregister(name)
			case 2:
				ctx, cancel := context.WithCancel(h.ctx)
				if err := h.c.Engage(ctx, name, nil); err != nil {
					t.Fatal(err)
				}
				cancels[name] = cancel
			case 3:
				if cancel := cancels[name]; cancel != nil {
					cancel()
					delete(cancels, name)
				}
			}
			// Cancelling runs the cluster's removal on context.AfterFunc's goroutine.
			if err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				h.c.mu.Lock()
				defer h.c.mu.Unlock()
				for _, n := range names {
					key, ok := h.c.keys[n]
					known := h.c.registered[n] || h.c.clusters[n] != nil
					if ok != known || (ok && key != FenceKey(string(n), h.c.opts.Buckets)) {
						return false, nil
					}
				}
				return len(h.c.keys) <= len(names), nil
			}); err != nil {
				h.c.mu.Lock()
				keys, registered, connected := maps.Clone(h.c.keys), maps.Clone(h.c.registered), len(h.c.clusters)
				h.c.mu.Unlock()
				t.Fatalf("round %d: keys %v, registered %v, connected %d", round, keys, registered, connected)
			}
		}
	}
}
