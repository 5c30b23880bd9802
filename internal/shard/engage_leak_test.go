package shard

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mccontroller "sigs.k8s.io/multicluster-runtime/pkg/controller"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
	mcsource "sigs.k8s.io/multicluster-runtime/pkg/source"
)

// idleSource is a per-cluster source that starts nothing of its own, so
// every goroutine left after an engagement ends is the controller's. It
// counts its starts.
type idleSource struct{ starts *atomic.Int64 }

func (s idleSource) ForCluster(multicluster.ClusterName, cluster.Cluster) (source.TypedSource[mcreconcile.Request], bool, error) {
	return source.TypedFunc[mcreconcile.Request](func(context.Context, workqueue.TypedRateLimitingInterface[mcreconcile.Request]) error {
		s.starts.Add(1)
		return nil
	}), true, nil
}

var _ mcsource.TypedSource[client.Object, mcreconcile.Request] = idleSource{}

// Every lost fence ends an engagement while the controllers keep running.
// multicluster-runtime v0.24.1 kept one goroutine per source for each such
// engagement until the process exited — 27 % of a 10,000-cluster replica's
// goroutines (docs/benchmarks.md). The patched copy in third_party/ lets
// them end with the engagement.
func TestEndedEngagementsLeaveNoGoroutines(t *testing.T) {
	const engagements, sources = 200, 3
	ctrl, err := mccontroller.NewUnmanaged("leak", nil, mccontroller.Options{
		Reconciler: mcreconcile.Func(func(context.Context, mcreconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, nil
		}),
		SkipNameValidation: ptr.To(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	var starts atomic.Int64
	for range sources {
		if err := ctrl.MultiClusterWatch(idleSource{&starts}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ctrl.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	engageOnce := func() {
		eng, end := context.WithCancel(ctx)
		if err := ctrl.Engage(eng, "east", nil); err != nil {
			t.Fatal(err)
		}
		end()
	}
	// The first engagement's sources start with the controller; once they
	// have, Watch starts each later one at once.
	engageOnce()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return starts.Load() == sources, nil
	}); err != nil {
		t.Fatalf("the controller started %d of %d sources: %v", starts.Load(), sources, err)
	}
	base := runtime.NumGoroutine()
	for range engagements {
		engageOnce()
	}
	if got := starts.Load(); got != (engagements+1)*sources {
		t.Fatalf("sources started %d times, want %d", got, (engagements+1)*sources)
	}
	var n int
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n = runtime.NumGoroutine()
		return n <= base+sources, nil
	}); err != nil {
		t.Fatalf("%d engagements ended, goroutines %d → %d (a leak keeps %d)", engagements, base, n, engagements*sources)
	}
}
