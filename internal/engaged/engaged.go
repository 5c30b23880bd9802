package engaged

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// Set is the engaged clusters; its zero value is ready to use.
type Set struct {
	mu       sync.Mutex
	clusters map[multicluster.ClusterName]*engagement
}

// engagement is one engagement of a cluster: the same cluster engaged
// again is another, so the first one's end does not forget it.
type engagement struct{ cl cluster.Cluster }

// Engage remembers cl as name until ctx ends (or name is engaged again).
func (s *Set) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	e := &engagement{cl: cl}
	s.mu.Lock()
	if s.clusters == nil {
		s.clusters = map[multicluster.ClusterName]*engagement{}
	}
	s.clusters[name] = e
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		if s.clusters[name] == e {
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
	if e := s.clusters[name]; e != nil {
		return e.cl
	}
	return nil
}

// All returns the engaged clusters now.
func (s *Set) All() map[multicluster.ClusterName]cluster.Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[multicluster.ClusterName]cluster.Cluster, len(s.clusters))
	for n, e := range s.clusters {
		out[n] = e.cl
	}
	return out
}

// Forget drops name (a test's way to take a cluster away).
func (s *Set) Forget(name multicluster.ClusterName) {
	s.mu.Lock()
	delete(s.clusters, name)
	s.mu.Unlock()
}
