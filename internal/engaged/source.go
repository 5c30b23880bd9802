package engaged

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
	mcsource "sigs.k8s.io/multicluster-runtime/pkg/source"
)

// Queue is a multicluster controller's queue.
type Queue = workqueue.TypedRateLimitingInterface[mcreconcile.Request]

// Source feeds a controller's queue from src in every engaged cluster, for
// as long as the cluster is engaged: a controller watches it
// (WatchesRawSource) and the manager engages it (NewSource adds it).
//
// It stands in for the builder's For and Watches, whose per-cluster
// sources (multicluster-runtime v0.24.1's startWithinContext) each leave a
// goroutine waiting for the controller's end when the cluster is
// disengaged: a replica whose clusters move (replicas joining, a fence
// lost) kept 24 of them per owned cluster at 10,000 clusters
// (docs/benchmarks.md, "the fleet at scale"). Here a cluster's source
// runs on its engagement's context alone and leaves nothing behind.
type Source struct {
	src mcsource.TypedSource[client.Object, mcreconcile.Request]

	// starting is held while a cluster's watch starts: one cluster at a
	// time per Source, as multicluster-runtime's controller starts them
	// (its Watch holds the controller's lock), so a replica engaging
	// hundreds of clusters does not register and replay every handler at
	// once. Measured at 1,000 clusters, one run each: all Ready after 122
	// and 166 s with every cluster at once, 95 and 81 s one at a time,
	// 67–77 s before Source (three runs); this bed's spread is wide.
	starting sync.Mutex

	mu sync.Mutex
	// queue is the controller's, once it has started.
	queue Queue
	// pending are the clusters engaged before the controller started.
	pending map[multicluster.ClusterName]pendingCluster
}

type pendingCluster struct {
	ctx context.Context
	cl  cluster.Cluster
}

var (
	_ source.TypedSource[mcreconcile.Request] = &Source{}
	_ multicluster.Aware                      = &Source{}
)

// NewSource returns src as a Source, engaged by mgr.
func NewSource(mgr mcmanager.Manager, src mcsource.TypedSource[client.Object, mcreconcile.Request]) (*Source, error) {
	s := &Source{src: src, pending: map[multicluster.ClusterName]pendingCluster{}}
	if err := mgr.Add(engager{s}); err != nil {
		return nil, fmt.Errorf("failed to add the source to the manager: %w", err)
	}
	return s, nil
}

// Kind is NewSource of obj's events in every engaged cluster that filter
// accepts (nil: every one), through h and preds: the builder's
// For(obj) is Kind(mgr, obj, mchandler.EnqueueRequestForObject, …), its
// Watches(obj, h) is Kind(mgr, obj, h, …).
func Kind(mgr mcmanager.Manager, obj client.Object, h mchandler.TypedEventHandlerFunc[client.Object, mcreconcile.Request],
	filter mcsource.ClusterFilterFunc, preds ...predicate.Predicate) (*Source, error) {
	src := mcsource.Kind(obj, h, preds...)
	if filter != nil {
		src = src.WithClusterFilter(filter)
	}
	return NewSource(mgr, src)
}

// Start is the controller's start: the clusters engaged before it start
// now (each in its own goroutine, since a cluster's start waits for its
// cache), the later ones when they are engaged.
func (s *Source) Start(_ context.Context, q Queue) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = q
	for name, p := range s.pending {
		if p.ctx.Err() == nil {
			go func() { _ = s.startIn(p.ctx, name, p.cl, q) }()
		}
	}
	s.pending = nil
	return nil
}

// Engage starts src in cl until ctx ends; before the controller has
// started, it remembers cl for Start.
func (s *Source) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	s.mu.Lock()
	q := s.queue
	if q == nil {
		s.pending[name] = pendingCluster{ctx: ctx, cl: cl}
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	return s.startIn(ctx, name, cl, q)
}

// startIn starts src's source for cl on ctx; it waits for cl's cache.
func (s *Source) startIn(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, q Queue) error {
	src, ok, err := s.src.ForCluster(name, cl)
	if err != nil {
		return fmt.Errorf("failed to engage the source in cluster %q: %w", name, err)
	}
	if !ok {
		return nil // the source's cluster filter said no
	}
	s.starting.Lock()
	defer s.starting.Unlock()
	if ctx.Err() != nil {
		return nil // disengaged while waiting for its turn
	}
	if err := src.Start(ctx, q); err != nil && ctx.Err() == nil {
		return fmt.Errorf("failed to start the source in cluster %q: %w", name, err)
	}
	return nil
}

// engager is the Source as the manager's runnable: the manager engages
// every cluster with it.
type engager struct{ *Source }

func (engager) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// NeedLeaderElection is false: every replica is active.
func (engager) NeedLeaderElection() bool { return false }
