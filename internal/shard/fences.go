package shard

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

type fenceState struct {
	key, name   string
	held        bool
	lastRenew   time.Time
	transitions int32
	lease       *coordinationv1.Lease // as last written by us
	writes      int                   // downstream writes begun (BeginWrite) and not yet done
	pauses      uint64                // renewals that came after the renew deadline
}

// Owns reports whether this replica may write to cluster now, and the stamp
// to record on what it writes: "<replica>/<fence transition>", so a write by
// a stale owner is detectable after the fact. It is false as soon as the
// fence's renew deadline has passed, even before the decision loop notices.
func (c *Coordinator) Owns(name multicluster.ClusterName) (string, bool) {
	stamp, _, ok := c.OwnsUntil(name)
	return stamp, ok
}

// OwnsUntil is Owns with the instant ownership ends unless the fence is
// renewed meanwhile: its last renewal + RenewDeadline. A write given this
// deadline cannot complete after it, and RenewDeadline < LeaseDuration, so
// it completes before any other replica may take the fence over — the
// fence holds at write time, not only at check time.
func (c *Coordinator) OwnsUntil(name multicluster.ClusterName) (string, time.Time, bool) {
	now := c.opts.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.ownedLocked(name, now)
	if !ok {
		return "", time.Time{}, false
	}
	return c.opts.Identity + "/" + strconv.Itoa(int(f.transitions)), f.lastRenew.Add(c.opts.RenewDeadline), true
}

// BeginWrite is OwnsUntil for one downstream write, which the caller ends
// with done (idempotent). A graceful release of the fence waits for the
// writes begun under it (at most until their deadline) before clearing the
// holder, so the next owner never writes alongside a write still in flight.
func (c *Coordinator) BeginWrite(name multicluster.ClusterName) (stamp string, until time.Time, done func(), ok bool) {
	now := c.opts.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.ownedLocked(name, now)
	if !ok {
		return "", time.Time{}, func() {}, false
	}
	f.writes++
	var once sync.Once
	done = func() {
		once.Do(func() {
			c.mu.Lock()
			f.writes--
			c.mu.Unlock()
		})
	}
	return c.opts.Identity + "/" + strconv.Itoa(int(f.transitions)), f.lastRenew.Add(c.opts.RenewDeadline), done, true
}

// ownedLocked returns the fence of cluster name if this replica may write
// to it at now. c.mu is held.
func (c *Coordinator) ownedLocked(name multicluster.ClusterName, now time.Time) (*fenceState, bool) {
	cs := c.clusters[name]
	f := c.fences[c.keyLocked(name)]
	if cs == nil || cs.engCancel == nil || f == nil || !f.held || now.Sub(f.lastRenew) >= c.opts.RenewDeadline {
		return nil, false
	}
	return f, true
}

// awaitWrites waits until the writes begun under f are done, or until
// deadline (by which they must have ended), or ctx ends.
func (c *Coordinator) awaitWrites(ctx context.Context, f *fenceState, deadline time.Time) {
	for {
		c.mu.Lock()
		n := f.writes
		c.mu.Unlock()
		if n == 0 || !c.opts.clock.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// heldLocked reports whether this replica holds the fence of key. c.mu is held.
func (c *Coordinator) heldLocked(key string) bool {
	f := c.fences[key]
	return f != nil && f.held
}

func (c *Coordinator) lastRenew(f *fenceState) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f.lastRenew
}

func (c *Coordinator) isHeld(f *fenceState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f.held
}

// setHeld records a fence state change under the lock Owns and Mark read
// with. A renewal of a held fence that lands after its renew deadline ends
// a pause, counted here so that no Mark sees the new renewal without it;
// setHeld reports whether it did. The deadline is checked against the
// clock now, not at (when the renewal was sent): a Mark taken while the
// request was in flight may have seen the pause. The clock is read under
// the lock: whatever Owns or Mark saw before it, setHeld sees no earlier.
func (c *Coordinator) setHeld(f *fenceState, held bool, lease *coordinationv1.Lease, at time.Time) (resumed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.clock.Now()
	if held && f.held && now.Sub(f.lastRenew) >= c.opts.RenewDeadline {
		f.pauses++
		resumed = true
	}
	f.held = held
	if lease != nil {
		f.lease = lease
		f.transitions = ptr.Deref(lease.Spec.LeaseTransitions, 0)
	}
	if held {
		f.lastRenew = at
	}
	return resumed
}

func (c *Coordinator) acquire(ctx context.Context, f *fenceState) {
	now := c.opts.clock.Now()
	obs := c.obs.get(f.name)
	if obs != nil && obs.holder() != c.opts.Identity && c.obs.live(f.name, now) {
		return // someone else holds it; wait for its release or expiry
	}
	var (
		got *coordinationv1.Lease
		err error
	)
	prevHolder := obs.holder()
	if obs == nil {
		got, err = c.leases.Create(ctx, c.fenceLease(f, nil, now), metav1.CreateOptions{})
	} else {
		got, err = c.leases.Update(ctx, c.fenceLease(f, obs.lease, now), metav1.UpdateOptions{})
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			c.metrics.fenceFailures.WithLabelValues("acquire").Inc()
			c.log.Error(err, "failed to acquire fence", "fence", f.name)
		}
		return // lost a race or will retry on the next tick
	}
	c.obs.record(got, now)
	c.setHeld(f, true, got, now)
	if prevHolder != "" && prevHolder != c.opts.Identity {
		c.metrics.handoffs.Inc()
	}
	c.log.Info("fence acquired", "fence", f.name, "previousHolder", prevHolder, "transitions", ptr.Deref(got.Spec.LeaseTransitions, 0))
}

// fenceLease is the Lease that claims f for this replica, based on the
// current one (nil to create it). A claim increments leaseTransitions, so
// every holding period has its own number.
func (c *Coordinator) fenceLease(f *fenceState, cur *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: f.name, Namespace: c.opts.Namespace}}
	var transitions int32
	if cur != nil {
		l = cur.DeepCopy()
		transitions = ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1
	}
	// What the Lease guards is ours to say, also on a Lease another layout
	// wrote (bucket-3 of 32 buckets and of 128 share a name): readers map
	// clusters to it by these, and layoutConflict reads the layout.
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[hubapi.LeaseKindLabel] = leaseKindFence
	l.Annotations[hubapi.FenceKeyAnnotation] = f.key
	delete(l.Annotations, hubapi.ShardBucketsAnnotation)
	if c.opts.Buckets > 0 {
		l.Annotations[hubapi.ShardBucketsAnnotation] = strconv.Itoa(c.opts.Buckets)
	}
	mt := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = ptr.To(c.opts.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
	l.Spec.AcquireTime = &mt
	l.Spec.RenewTime = &mt
	l.Spec.LeaseTransitions = ptr.To(transitions)
	return l
}

// renew renews a held fence. A renewal that succeeds only after
// RenewDeadline keeps the fence (nobody could take it before
// LeaseDuration), but Owns was false from the deadline on, so writes were
// refused and reconciles skipped meanwhile: the pause ends (Mark changes),
// and the controllers retry what ran during it (fence.RetryPaused).
//
// Until 2026-12-05 a late renewal engaged the fence's clusters anew, so
// every object was replayed; at 10,000 clusters that storm kept a busy
// replica late (docs/benchmarks.md).
func (c *Coordinator) renew(ctx context.Context, f *fenceState) {
	now := c.opts.clock.Now()
	prev := c.lastRenew(f)
	l := f.lease.DeepCopy()
	mt := metav1.NewMicroTime(now)
	l.Spec.RenewTime = &mt
	got, err := c.leases.Update(ctx, l, metav1.UpdateOptions{})
	if err == nil {
		c.obs.record(got, now)
		if c.setHeld(f, true, got, now) {
			c.resumed(f)
		}
		return
	}
	c.metrics.fenceFailures.WithLabelValues("renew").Inc()
	if obs := c.obs.get(f.name); apierrors.IsConflict(err) && obs != nil && obs.holder() != c.opts.Identity {
		c.lose(f, fmt.Sprintf("taken by %q", obs.holder()))
		return
	}
	if c.opts.clock.Since(prev) >= c.opts.RenewDeadline {
		c.lose(f, "renew deadline passed: "+err.Error())
		return
	}
	c.log.Error(err, "failed to renew fence; retrying", "fence", f.name)
}

// lose gives up a fence without writing: it is no longer ours to release.
func (c *Coordinator) lose(f *fenceState, why string) {
	c.setHeld(f, false, nil, time.Time{})
	c.metrics.fenceFailures.WithLabelValues("lost").Inc()
	c.syncEngagements()
	c.log.Info("fence lost; stopped writing to its clusters", "fence", f.name, "why", why)
}

// release stops the engagements first and waits for the downstream writes
// still in flight under the fence (bounded by their deadline), then clears
// the holder so the new owner need not wait for expiry.
func (c *Coordinator) release(ctx context.Context, f *fenceState, why string) {
	c.mu.Lock()
	writesEnd := f.lastRenew.Add(c.opts.RenewDeadline)
	c.mu.Unlock()
	c.setHeld(f, false, nil, time.Time{}) // no write begins from here on
	c.syncEngagements()
	c.awaitWrites(ctx, f, writesEnd)
	l := f.lease.DeepCopy()
	l.Spec.HolderIdentity = ptr.To("")
	l.Spec.LeaseDurationSeconds = ptr.To(int32(1))
	got, err := c.leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		c.metrics.fenceFailures.WithLabelValues("release").Inc()
		c.log.Error(err, "failed to release fence; it will expire", "fence", f.name)
		return
	}
	c.obs.record(got, c.opts.clock.Now())
	c.log.Info("fence released", "fence", f.name, "why", why)
}
