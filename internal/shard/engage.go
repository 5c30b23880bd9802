package shard

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// Engage records a cluster the provider made available. It never blocks and
// never engages directly: the decision loop engages owned clusters.
func (c *Coordinator) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st := &clusterState{cl: cl, ctx: ctx}
	c.mu.Lock()
	if old, ok := c.clusters[name]; ok && old.engCancel != nil {
		old.engCancel() // new connection data: re-engaged below with the new cluster
	}
	c.clusters[name] = st
	c.trackLocked(name)
	c.mu.Unlock()
	context.AfterFunc(ctx, func() { // no goroutine per cluster while it is engaged
		c.mu.Lock()
		if cur := c.clusters[name]; cur == st {
			if cur.engCancel != nil {
				cur.engCancel()
			}
			delete(c.clusters, name)
			c.trackLocked(name)
		}
		c.mu.Unlock()
		c.kick()
	})
	c.kick()
	return nil
}

// syncEngagements engages clusters whose fence is held and cancels the rest.
func (c *Coordinator) syncEngagements() {
	type start struct {
		name multicluster.ClusterName
		cl   cluster.Cluster
		ctx  context.Context
	}
	var starts []start
	c.mu.Lock()
	awares := append([]multicluster.Aware(nil), c.awares...)
	for name, cs := range c.clusters {
		held := c.heldLocked(c.keyLocked(name))
		switch {
		case held && cs.engCancel == nil && cs.ctx.Err() == nil:
			ctx, cancel := context.WithCancel(cs.ctx)
			cs.engCancel = cancel
			starts = append(starts, start{name: name, cl: cs.cl, ctx: ctx})
		case !held && cs.engCancel != nil:
			cs.engCancel()
			cs.engCancel = nil
			c.log.Info("cluster disengaged", "cluster", name)
		}
	}
	c.mu.Unlock()
	// Engaging starts informers in the downstream cluster and can take a
	// while; it must not hold up renewals, so each cluster engages on its own.
	for _, s := range starts {
		go c.engage(s.ctx, awares, s.name, s.cl)
	}
}

func (c *Coordinator) engage(ctx context.Context, awares []multicluster.Aware, name multicluster.ClusterName, cl cluster.Cluster) {
	for _, a := range awares {
		if err := a.Engage(ctx, name, cl); err != nil {
			c.log.Error(err, "failed to engage cluster; retrying", "cluster", name)
			c.mu.Lock()
			if cs := c.clusters[name]; cs != nil && cs.engCancel != nil && cs.cl == cl {
				cs.engCancel()
				cs.engCancel = nil
			}
			c.mu.Unlock()
			c.kick()
			return
		}
	}
	if ctx.Err() != nil { // disengaged or disconnected while the controllers engaged it
		c.log.V(1).Info("engagement ended before it completed", "cluster", name)
		return
	}
	c.log.Info("cluster engaged", "cluster", name)
}
