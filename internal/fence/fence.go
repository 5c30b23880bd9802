// Package fence answers the one question every writer of the hub asks
// before it touches a downstream cluster: may this replica write to this
// cluster now, and until when.
//
//	writer ──▶ Fence.BeginWrite(cluster) ──▶ no: skip (another replica owns it)
//	                 │ yes: stamp, until, done
//	                 ▼
//	           WriteContext: ctx with deadline `until` ──▶ the write ──▶ done()
//
// A write carries the instant ownership ends as its deadline, so a replica
// that stalls mid-write (GC pause, SIGSTOP, a slow network) cannot complete
// it after another replica may have taken the cluster over; done tells the
// fence the write ended, so a graceful release can wait for writes in
// flight.
//
// Contract:
//   - The sharded coordinator (internal/shard) implements Fence; Static
//     serves a single replica and tests. Consumers (certsync, shim, trust,
//     rotation, budget) depend on this package, never on shard.
//   - Owns and BeginWrite are safe for concurrent use and never block on
//     the network.
//   - A nil Fence allows every write (WriteContext returns ctx unchanged).
//   - A Fence whose ownership can pause (a late renewal) is a Pauser;
//     RetryPaused requeues the reconciles that overlapped a pause.
package fence

import (
	"context"
	"errors"
	"time"

	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// ErrNotOwner stops a write: another replica owns the cluster now.
var ErrNotOwner = errors.New("this replica no longer owns the cluster")

// Fence says whether this replica may write to a cluster.
type Fence interface {
	// Owns reports whether this replica owns cluster now, with the stamp
	// its writes carry (the replica's identity and fence generation).
	Owns(cluster multicluster.ClusterName) (stamp string, ok bool)
	// BeginWrite starts one write to cluster: its stamp, the instant
	// ownership ends (the write's deadline) and the func that ends the
	// write; ok is false when this replica may not write now.
	BeginWrite(cluster multicluster.ClusterName) (stamp string, until time.Time, done func(), ok bool)
}

// Sharer is a Fence that also knows which fraction of the known clusters
// this replica owns (budgets split a hub-wide rate by it).
type Sharer interface {
	Share() float64
}

// WriteContext returns the writer stamp and ctx bounded by f's ownership of
// cluster, with the func that ends the write; ErrNotOwner when this
// replica may not write now. A nil f allows every write with ctx unchanged
// and an empty stamp.
func WriteContext(ctx context.Context, f Fence, cluster multicluster.ClusterName) (string, context.Context, func(), error) {
	if f == nil {
		return "", ctx, func() {}, nil
	}
	stamp, until, done, ok := f.BeginWrite(cluster)
	if !ok {
		return "", ctx, func() {}, ErrNotOwner
	}
	if until.IsZero() { // a fence without an end (Static)
		return stamp, ctx, done, nil
	}
	wctx, cancel := context.WithDeadline(ctx, until)
	return stamp, wctx, func() { cancel(); done() }, nil
}

// Static is the fence of a single replica: it owns every cluster, forever,
// and stamps its writes with Identity.
type Static struct {
	// Identity is the stamp of every write.
	Identity string
}

var (
	_ Fence  = Static{}
	_ Sharer = Static{}
)

// Owns always owns.
func (s Static) Owns(multicluster.ClusterName) (string, bool) { return s.Identity, true }

// BeginWrite always allows, with no deadline of its own (a zero until).
func (s Static) BeginWrite(multicluster.ClusterName) (string, time.Time, func(), bool) {
	return s.Identity, time.Time{}, func() {}, true
}

// Share is all of it.
func (Static) Share() float64 { return 1 }
