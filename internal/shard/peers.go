package shard

import (
	"context"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// heartbeat renews the peer Lease whenever it is due, on its own: the
// decision loop renews it too, but a step can run long (fence writes queued
// behind a slow hub, a burst of engagements), and a peer Lease that goes
// unrenewed for LeaseDuration drops this replica from its peers' views, and
// the assignment with it. At 10,000 clusters, replicas busy with a
// takeover dropped out of each other's views for 6–20 s at a time, and
// fences changed hands with every change (docs/benchmarks.md).
func (c *Coordinator) heartbeat(ctx context.Context) {
	t := c.opts.clock.NewTicker(c.opts.RetryPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			c.renewPeerIfDue(ctx)
		}
	}
}

// renewPeerIfDue renews the peer Lease if RenewInterval has passed since
// its last renewal, logging a failure, and returns when it was last renewed.
func (c *Coordinator) renewPeerIfDue(ctx context.Context) time.Time {
	c.peerMu.Lock()
	defer c.peerMu.Unlock()
	if c.opts.clock.Since(c.peerRenewed) >= c.opts.RenewInterval {
		if err := c.renewPeerLocked(ctx); err != nil {
			c.log.Error(err, "failed to renew peer Lease")
		}
	}
	return c.peerRenewed
}

// renewPeer writes the peer Lease now.
func (c *Coordinator) renewPeer(ctx context.Context) error {
	c.peerMu.Lock()
	defer c.peerMu.Unlock()
	return c.renewPeerLocked(ctx)
}

// renewPeerLocked writes the peer Lease: created when missing, else updated
// from the last copy written (no Get). c.peerMu is held.
func (c *Coordinator) renewPeerLocked(ctx context.Context) error {
	now := c.opts.clock.Now()
	mt := metav1.NewMicroTime(now)
	l := c.peerLease
	create := false
	if l == nil {
		cur, err := c.leases.Get(ctx, leaseName(c.opts.PeerPrefix, c.opts.Identity), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName(c.opts.PeerPrefix, c.opts.Identity), Namespace: c.opts.Namespace}}
			create = true
		case err != nil:
			return fmt.Errorf("failed to get peer Lease: %w", err)
		default:
			l = cur
		}
	}
	l = l.DeepCopy()
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[hubapi.LeaseKindLabel] = leaseKindPeer
	l.Annotations[hubapi.ReplicaWeightAnnotation] = strconv.FormatFloat(c.opts.Weight, 'g', -1, 64)
	l.Annotations[hubapi.ShardBucketsAnnotation] = strconv.Itoa(c.opts.Buckets) // the fence layout (layout.go)
	l.Spec.HolderIdentity = ptr.To(c.opts.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
	l.Spec.RenewTime = &mt
	var (
		got *coordinationv1.Lease
		err error
	)
	if create {
		got, err = c.leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		got, err = c.leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		c.peerLease = nil // re-read on the next attempt
		return fmt.Errorf("failed to write peer Lease: %w", err)
	}
	c.peerLease, c.peerRenewed = got, now
	c.obs.record(got, now)
	return nil
}
