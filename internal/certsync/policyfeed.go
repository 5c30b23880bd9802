package certsync

import (
	"context"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// policyFeed enqueues every Certificate of every engaged cluster when the
// issuance policies change: denied Certificates are decided again (and
// issued ones re-checked for violations) without a restart.
//
//	policy.Engine ──Subscribe──▶ kick (coalesced) ──▶ loop: for each engaged
//	cluster, list Certificates from its cache ──▶ the controller's queue
//
// It is engaged with each cluster by the manager (multicluster.Aware) and
// runs its loop as a Runnable; the controller hands it the queue through
// source().
type policyFeed struct {
	log   logr.Logger
	kicks chan struct{} // buffered 1: changes while a pass runs coalesce

	mu       sync.Mutex // guards clusters and queue
	clusters map[multicluster.ClusterName]cluster.Cluster
	queue    workqueue.TypedRateLimitingInterface[mcreconcile.Request]
}

func newPolicyFeed(log logr.Logger) *policyFeed {
	return &policyFeed{log: log.WithName("policy-feed"), kicks: make(chan struct{}, 1), clusters: map[multicluster.ClusterName]cluster.Cluster{}}
}

// kick asks for a pass; it never blocks.
func (f *policyFeed) kick() {
	select {
	case f.kicks <- struct{}{}:
	default:
	}
}

// Engage remembers the cluster until its context ends.
func (f *policyFeed) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	f.mu.Lock()
	f.clusters[name] = cl
	f.mu.Unlock()
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		if f.clusters[name] == cl {
			delete(f.clusters, name)
		}
		f.mu.Unlock()
	}()
	return nil
}

// source hands the controller's queue to the feed.
func (f *policyFeed) source() source.TypedSource[mcreconcile.Request] {
	return source.TypedFunc[mcreconcile.Request](func(_ context.Context, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) error {
		f.mu.Lock()
		f.queue = q
		f.mu.Unlock()
		return nil
	})
}

// Start runs passes until ctx ends.
func (f *policyFeed) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.kicks:
			f.pass(ctx)
		}
	}
}

func (f *policyFeed) pass(ctx context.Context) {
	f.mu.Lock()
	q := f.queue
	clusters := make(map[multicluster.ClusterName]cluster.Cluster, len(f.clusters))
	for n, cl := range f.clusters {
		clusters[n] = cl
	}
	f.mu.Unlock()
	if q == nil {
		return // the controller has not started; it will list everything itself
	}
	n := 0
	for name, cl := range clusters {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(certificateGVK.GroupVersion().WithKind(certificateGVK.Kind + "List"))
		if err := cl.GetCache().List(ctx, list); err != nil {
			f.log.Error(err, "failed to list Certificates after a policy change", "cluster", name)
			continue
		}
		for _, u := range list.Items {
			q.Add(mcreconcile.Request{ClusterName: name, Request: reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&u)}})
			n++
		}
	}
	f.log.V(1).Info("issuance policies changed; Certificates queued", "certificates", n, "clusters", len(clusters))
}
