package certsync

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/certmetrics"
	"github.com/certhub/certhub/internal/secretcache"
)

// metricsJanitor is engaged with every owned cluster and forgets its series
// and its Secrets when the engagement ends.
type metricsJanitor struct {
	m       *certmetrics.Metrics
	secrets *secretcache.Store
}

func (j metricsJanitor) Engage(ctx context.Context, name multicluster.ClusterName, _ cluster.Cluster) error {
	context.AfterFunc(ctx, func() {
		j.m.ForgetCluster(name)
		j.secrets.Drop(name)
	})
	return nil
}

// Start blocks until ctx is done; the janitor has no loop of its own.
func (j metricsJanitor) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
