package fence

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// Pauser is a Fence whose ownership of a cluster can pause while this
// replica keeps the cluster: a holder whose renewal is late may not write
// (Owns is false from its renew deadline on), yet the renewal may still
// succeed, and the holding goes on. Whatever was skipped meanwhile must be
// done again, by the replica that kept the cluster.
type Pauser interface {
	// Mark returns a token for the state of cluster's ownership now; two
	// tokens are equal only when ownership did not pause between them.
	Mark(cluster multicluster.ClusterName) uint64
	// Paused reports whether work on cluster that began at mark may have
	// been skipped because ownership paused since, while this replica
	// kept the cluster (it is false once the cluster is lost: the next
	// owner sees everything anew), and when to try that work again.
	Paused(cluster multicluster.ClusterName, mark uint64) (retry time.Duration, paused bool)
}

// RetryPaused wraps a reconciler of f's clusters: a reconcile that
// overlapped a pause of the cluster's ownership (it may have skipped its
// writes) is requeued after the pause's retry interval, so nothing skipped
// stays skipped. Only the requests that ran during the pause are tried
// again; the cluster's watches and caches stay as they are. With an f that
// is not a Pauser, r is returned unchanged.
func RetryPaused(f Fence, r mcreconcile.Reconciler) mcreconcile.Reconciler {
	p, ok := f.(Pauser)
	if !ok {
		return r
	}
	return reconcile.TypedFunc[mcreconcile.Request](func(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
		mark := p.Mark(req.ClusterName)
		res, err := r.Reconcile(ctx, req)
		if err != nil {
			return res, err // requeued with backoff anyway
		}
		if retry, paused := p.Paused(req.ClusterName, mark); paused && (res.RequeueAfter <= 0 || res.RequeueAfter > retry) {
			res.RequeueAfter = retry
		}
		return res, nil
	})
}
