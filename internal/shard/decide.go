package shard

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// plan is an assignment and the standby set it implies, with the inputs it
// was computed from.
type plan struct {
	inputs  string
	assign  map[string]string // fence key → peer ID
	standby map[multicluster.ClusterName]bool
}

func (c *Coordinator) kick() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// step is one pass of the decision loop:
//
//	membership + registered clusters ─▶ AssignBounded(fence keys, peers)
//	for each fence key: want = assigned to self
//	   want & !held ─▶ acquire (create, or take over a released/expired Lease)
//	   want &  held ─▶ renew every RenewInterval; past RenewDeadline ─▶ lost
//	  !want &  held ─▶ stop engagements, then release (holder = "")
//	─▶ engage connected clusters whose fence is held; cancel the others
//	─▶ wanted connections = assigned to self ∪ standbys ─▶ tell the provider
func (c *Coordinator) step(ctx context.Context) {
	renewed := c.renewPeerIfDue(ctx)
	now := c.opts.clock.Now()
	selfAlive := now.Sub(renewed) < c.opts.RenewDeadline
	peers := c.membership(now, selfAlive)
	c.metrics.peers.Set(float64(len(peers)))
	c.notePeers(peers)

	c.mu.Lock()
	members := c.knownLocked()
	keys := map[string]int{} // fence key → clusters it guards
	for _, m := range members {
		keys[m.key]++
	}
	known := c.known
	var work []*fenceState
	for k := range keys {
		if c.fences[k] == nil {
			c.fences[k] = &fenceState{key: k, name: leaseName(c.opts.FencePrefix, k)}
		}
	}
	for k, f := range c.fences {
		if keys[k] == 0 && !f.held {
			delete(c.fences, k)
			continue
		}
		work = append(work, f)
	}
	c.mu.Unlock()

	pl := c.planFor(peers, keys, members, known)
	conflict := c.obs.layoutConflict(now, c.opts.Identity, c.opts.Buckets)
	c.noteLayoutConflict(conflict)
	// Each fence is written by one goroutine at a time, at most
	// fenceWriters at once: at 1,000 fences a serial loop spends seconds on
	// round trips, and a burst of renewals would outlast RenewDeadline.
	var wg sync.WaitGroup
	sem := make(chan struct{}, fenceWriters)
	run := func(op func()) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			op()
		})
	}
	for _, f := range work {
		want := conflict == "" && keys[f.key] > 0 && pl.assign[f.key] == c.opts.Identity
		switch {
		case want && !c.isHeld(f):
			run(func() { c.acquire(ctx, f) })
		case want:
			if c.opts.clock.Since(c.lastRenew(f)) >= c.opts.RenewInterval {
				run(func() { c.renew(ctx, f) })
			}
		case c.isHeld(f) && conflict != "":
			run(func() { c.release(ctx, f, "another fence layout is in use") })
		case c.isHeld(f):
			run(func() { c.release(ctx, f, "not assigned to this replica") })
		}
	}
	wg.Wait()
	c.syncEngagements()
	if selfAlive && conflict == "" {
		// A replica that cannot renew its own peer Lease keeps its
		// connections as they are: it owns nothing meanwhile, and dropping
		// every cache during a hub outage would only slow the recovery.
		c.syncWanted(pl, members)
	}
	c.updateMetrics(keys)
}

// noteLayoutConflict logs a conflict of fence layouts when it starts,
// changes or ends, and sets its metric.
func (c *Coordinator) noteLayoutConflict(why string) {
	if why == c.layoutConflict {
		return
	}
	if why != "" {
		c.metrics.layoutConflict.Set(1)
		c.log.Info("another fence layout is in use: holding no fence until every replica uses this one",
			"shardBuckets", c.opts.Buckets, "why", why)
	} else {
		c.metrics.layoutConflict.Set(0)
		c.log.Info("every replica uses this fence layout again; deciding ownership", "shardBuckets", c.opts.Buckets)
	}
	c.layoutConflict = why
}

// planFor returns the assignment of the fence keys (with their cluster
// counts) to peers and this replica's standby clusters, reusing the last
// plan while its inputs — peers, weights, known clusters — are unchanged.
func (c *Coordinator) planFor(peers []Peer, keys map[string]int, members []member, known uint64) plan {
	ids := make([]string, 0, len(peers))
	for _, p := range peers {
		ids = append(ids, p.ID+"="+strconv.FormatFloat(p.Weight, 'g', -1, 64))
	}
	slices.Sort(ids)
	inputs := strconv.FormatUint(known, 10) + "|" + strings.Join(ids, ",")
	if c.plan.assign != nil && c.plan.inputs == inputs {
		return c.plan
	}
	units := make([]Unit, 0, len(keys))
	for k, n := range keys {
		units = append(units, Unit{Key: k, Load: n})
	}
	pl := plan{inputs: inputs, assign: AssignBounded(units, peers, c.opts.Balance), standby: map[multicluster.ClusterName]bool{}}
	if c.opts.Standby > 0 && len(peers) > 1 {
		// The fence keys this replica takes over if their owner dies: those
		// the assignment without that owner gives to us.
		next := map[string]bool{}
		for _, q := range peers {
			if q.ID == c.opts.Identity {
				continue
			}
			rest := slices.DeleteFunc(slices.Clone(peers), func(p Peer) bool { return p.ID == q.ID })
			alt := AssignBounded(units, rest, c.opts.Balance)
			for k, owner := range pl.assign {
				if owner == q.ID && alt[k] == c.opts.Identity {
					next[k] = true
				}
			}
		}
		self := Peer{ID: c.opts.Identity, Weight: c.opts.Weight}
		var candidates []multicluster.ClusterName
		for _, m := range members {
			if next[m.key] {
				candidates = append(candidates, m.name)
			}
		}
		// The closest first: the highest rendezvous score for this replica.
		slices.SortFunc(candidates, func(a, b multicluster.ClusterName) int {
			if c := cmp.Compare(score(string(b), self), score(string(a), self)); c != 0 {
				return c
			}
			return strings.Compare(string(a), string(b))
		})
		for _, name := range candidates[:min(len(candidates), c.opts.Standby)] {
			pl.standby[name] = true
		}
	}
	c.plan = pl
	return pl
}

// syncWanted records which clusters this replica should be connected to —
// those whose fence it is assigned or still holds, and its standbys — and
// tells the OnWantedChanged subscribers about every change.
//
// A takeover comes first: while a fence assigned to this replica waits to be
// acquired (its former holder's Lease has yet to expire), clusters that
// become standbys only now are not connected yet — after a replica dies
// every survivor gains standbys (those it would take from the other
// survivors), and connecting hundreds of them would compete for CPU and the
// hub with the takeover they exist to speed up. Standbys already connected
// stay; the hold ends when every assigned fence is held, or after
// LeaseDuration + RenewDeadline at most.
func (c *Coordinator) syncWanted(pl plan, members []member) {
	next := make(map[multicluster.ClusterName]role, len(members))
	standby, waiting := 0, 0
	now := c.opts.clock.Now()
	c.mu.Lock()
	acquiring := false
	for _, m := range members {
		if pl.assign[m.key] == c.opts.Identity && !c.heldLocked(m.key) {
			acquiring = true
			break
		}
	}
	switch {
	case !acquiring:
		c.takingOver = time.Time{}
	case c.takingOver.IsZero():
		c.takingOver = now
	}
	hold := acquiring && now.Sub(c.takingOver) < c.opts.LeaseDuration+c.opts.RenewDeadline
	for _, m := range members {
		switch {
		case pl.assign[m.key] == c.opts.Identity || c.heldLocked(m.key):
			next[m.name] = roleOwner
		case pl.standby[m.name] && hold && c.wanted[m.name] == roleNone:
			waiting++
		case pl.standby[m.name]:
			next[m.name] = roleStandby
			standby++
		}
	}
	if waiting > 0 {
		c.log.V(1).Info("new standbys wait for the takeover", "waiting", waiting)
	}
	var changed []multicluster.ClusterName
	for name, r := range next {
		if c.wanted[name] == roleNone {
			changed = append(changed, name)
		} else if c.wanted[name] != r {
			c.log.V(1).Info("cluster role changed", "cluster", name, "standby", r == roleStandby)
		}
	}
	for name := range c.wanted {
		if next[name] == roleNone {
			changed = append(changed, name)
		}
	}
	c.wanted = next
	fns := slices.Clone(c.onWanted)
	c.mu.Unlock()
	c.metrics.standby.Set(float64(standby))
	for _, name := range changed {
		for _, fn := range fns {
			fn(name)
		}
	}
}

// membership is the peer snapshot decisions use. Our own entry comes from
// our renew record, not the informer, which may lag behind our writes; a
// replica that cannot renew its own peer Lease decides to own nothing.
func (c *Coordinator) membership(now time.Time, selfAlive bool) []Peer {
	if !selfAlive {
		return nil
	}
	peers := []Peer{{ID: c.opts.Identity, Weight: c.opts.Weight}}
	for _, p := range c.obs.peers(now) {
		if p.ID != c.opts.Identity {
			peers = append(peers, p)
		}
	}
	return peers
}

// notePeers logs the live-peer set whenever it changes. The assignment is a
// function of it, so each change moves fences; a replica that cannot renew
// its own peer Lease sees no peers at all.
func (c *Coordinator) notePeers(peers []Peer) {
	ids := make([]string, 0, len(peers))
	for _, p := range peers {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	if c.livePeers != nil && slices.Equal(ids, c.livePeers) {
		return
	}
	c.log.Info("live peers changed; fences follow the new assignment", "peers", ids, "before", c.livePeers)
	c.livePeers = ids
}

// member is a known cluster and the key of its fence.
type member struct {
	name multicluster.ClusterName
	key  string
}

// knownLocked lists the clusters this replica knows, with their fence keys:
// the registered ones and those the provider connected (Engage alone also
// makes a cluster known). c.mu is held.
func (c *Coordinator) knownLocked() []member {
	out := make([]member, 0, len(c.keys))
	for name, key := range c.keys {
		out = append(out, member{name: name, key: key})
	}
	return out
}

// trackLocked bumps c.known and keeps c.keys to the known clusters after
// name's registration or connection changed. The decision loop reads every
// cluster's fence key several times a step, up to 1/minStepGap steps a
// second: hashing each name once, here, is what keeps that walk cheap at
// 10,000 clusters. c.mu is held.
func (c *Coordinator) trackLocked(name multicluster.ClusterName) {
	c.known++
	if !c.registered[name] && c.clusters[name] == nil {
		delete(c.keys, name)
		return
	}
	if _, ok := c.keys[name]; !ok {
		c.keys[name] = FenceKey(string(name), c.opts.Buckets)
	}
}

// keyLocked returns the fence key of cluster name, known or not. c.mu is held.
func (c *Coordinator) keyLocked(name multicluster.ClusterName) string {
	if key, ok := c.keys[name]; ok {
		return key
	}
	return FenceKey(string(name), c.opts.Buckets)
}
