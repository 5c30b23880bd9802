package engaged

import (
	"context"
	"maps"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// Set is the engaged clusters; its zero value is ready to use.
type Set struct {
	mu       sync.Mutex
	clusters map[multicluster.ClusterName]cluster.Cluster
}

// Engage remembers cl as name until ctx ends (or name is engaged again).
func (s *Set) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	s.mu.Lock()
	if s.clusters == nil {
		s.clusters = map[multicluster.ClusterName]cluster.Cluster{}
	}
	s.clusters[name] = cl
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		if s.clusters[name] == cl {
			delete(s.clusters, name)
		}
		s.mu.Unlock()
	})
	return nil
}

// Get returns the engaged cluster name, or nil.
func (s *Set) Get(name multicluster.ClusterName) cluster.Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clusters[name]
}

// All returns the engaged clusters now.
func (s *Set) All() map[multicluster.ClusterName]cluster.Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.clusters)
}

// Forget drops name (a test's way to take a cluster away).
func (s *Set) Forget(name multicluster.ClusterName) {
	s.mu.Lock()
	delete(s.clusters, name)
	s.mu.Unlock()
}
