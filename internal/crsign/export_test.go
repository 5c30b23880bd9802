package crsign

import (
	"context"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// Reconciler is the signer's reconciler over getCluster, for the external
// tests (they use test/fixture, which imports certsync).
type Reconciler interface {
	Reconcile(context.Context, mcreconcile.Request) (reconcile.Result, error)
}

// NewReconciler defaults opts (with c as the clock) and builds the reconciler.
func NewReconciler(opts Options, c clock.Clock, getCluster func(context.Context, multicluster.ClusterName) (cluster.Cluster, error)) (Reconciler, error) {
	opts.clock = c
	opts.defaults()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &reconciler{opts: opts, metrics: m, getCluster: getCluster}, nil
}
