package certsync

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// Waker calls its subscribers with a downstream Certificate that an issuer
// has news for.
type Waker interface {
	Subscribe(func(cluster, namespace, name string))
}

// wakeSource queues the Certificates w names (none when w is nil) of the
// clusters this replica is engaged with; the others' replicas queue theirs.
func wakeSource(w Waker, get func(context.Context, multicluster.ClusterName) (cluster.Cluster, error)) source.TypedSource[mcreconcile.Request] {
	return source.TypedFunc[mcreconcile.Request](func(ctx context.Context, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) error {
		if w != nil {
			w.Subscribe(func(cluster, namespace, name string) {
				if _, err := get(ctx, multicluster.ClusterName(cluster)); err != nil {
					return
				}
				q.Add(mcreconcile.Request{ClusterName: multicluster.ClusterName(cluster), Request: reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}})
			})
		}
		return nil
	})
}
