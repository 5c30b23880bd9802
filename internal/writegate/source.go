package writegate

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// RequeueSource is a controller source that queues every object of one
// kind in a cluster each time subscribe reports that cluster (Gate.Subscribe:
// its mode or Writes answer changed), so the objects a writer skipped while
// the gate said no are decided again. newList makes an empty list of the
// kind, read from the cluster's cache; keep, when set, selects the objects
// queued. A nil subscribe queues nothing.
func RequeueSource(subscribe func(func(multicluster.ClusterName)), get func(context.Context, multicluster.ClusterName) (cluster.Cluster, error),
	newList func() client.ObjectList, keep func(client.Object) bool, log logr.Logger) source.TypedSource[mcreconcile.Request] {
	return source.TypedFunc[mcreconcile.Request](func(ctx context.Context, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) error {
		if subscribe == nil {
			return nil
		}
		subscribe(func(name multicluster.ClusterName) {
			cl, err := get(ctx, name)
			if err != nil {
				return // not engaged here
			}
			list := newList()
			if err := cl.GetCache().List(ctx, list); err != nil {
				if meta.IsNoMatchError(err) {
					return // the cluster does not serve the kind (no Gateway API there): nothing to decide again
				}
				log.Error(err, "failed to list after a change of the cluster's mode or conflict", "cluster", name)
				return
			}
			queued := 0
			_ = meta.EachListItem(list, func(o runtime.Object) error {
				if obj, ok := o.(client.Object); ok && (keep == nil || keep(obj)) {
					q.Add(mcreconcile.Request{ClusterName: name, Request: reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)}})
					queued++
				}
				return nil
			})
			log.V(1).Info("cluster mode or conflict changed; objects decided again", "cluster", name, "queued", queued)
		})
		return nil
	})
}
