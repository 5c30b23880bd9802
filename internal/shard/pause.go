package shard

import (
	"time"

	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/fence"
)

var _ fence.Pauser = (*Coordinator)(nil)

// A fence renewed late is paused from its renew deadline until the
// renewal: Owns is false meanwhile, the engagements go on. A Mark is the
// fence's count of pauses ended, doubled, plus one while a pause lasts, so
// it changes when a pause begins and when it ends.

// Mark returns a token for cluster's ownership now (fence.Pauser).
func (c *Coordinator) Mark(name multicluster.ClusterName) uint64 {
	now := c.opts.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.markLocked(c.fences[c.keyLocked(name)], now)
}

// Paused reports whether a pause of cluster's fence began or ended since
// mark while this replica kept the fence and the cluster's engagement, and
// the decision loop's tick as the interval to retry at (fence.Pauser).
func (c *Coordinator) Paused(name multicluster.ClusterName, mark uint64) (time.Duration, bool) {
	now := c.opts.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := c.clusters[name]
	f := c.fences[c.keyLocked(name)]
	if cs == nil || cs.engCancel == nil || f == nil || !f.held {
		return 0, false // not ours: the next engagement sees everything anew
	}
	cur := c.markLocked(f, now)
	return c.opts.RetryPeriod, cur != mark || cur&1 == 1
}

func (c *Coordinator) markLocked(f *fenceState, now time.Time) uint64 {
	if f == nil {
		return 0
	}
	m := 2 * f.pauses
	if f.held && now.Sub(f.lastRenew) >= c.opts.RenewDeadline {
		m++
	}
	return m
}

// resumed records the end of a pause of f, renewed after its renew
// deadline; setHeld counted it under the lock Mark reads with.
func (c *Coordinator) resumed(f *fenceState) {
	c.metrics.fenceFailures.WithLabelValues("late").Inc()
	c.log.Info("fence renewed after its renew deadline; retrying what ran meanwhile", "fence", f.name)
}
