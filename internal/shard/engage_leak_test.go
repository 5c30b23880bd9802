package shard

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
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

// idleController is a started multicluster controller watching that many
// idle sources, engaged once (as "first") so its sources have started with
// it: from then on, Watch starts each engagement's sources at once.
func idleController(t *testing.T, sources int) (mccontroller.Controller, context.Context, *atomic.Int64) {
	t.Helper()
	ctrl := noopController(t, "leak")
	starts := &atomic.Int64{}
	for range sources {
		if err := ctrl.MultiClusterWatch(idleSource{starts}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := startController(t, ctrl)
	if err := ctrl.Engage(ctx, "first", nil); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return starts.Load() == int64(sources), nil
	}); err != nil {
		t.Fatalf("the controller started %d of %d sources: %v", starts.Load(), sources, err)
	}
	return ctrl, ctx, starts
}

// noopController is an unstarted multicluster controller whose reconciler
// does nothing: the tests here count what engaging it costs.
func noopController(t *testing.T, name string) mccontroller.Controller {
	t.Helper()
	ctrl, err := mccontroller.NewUnmanaged(name, nil, mccontroller.Options{
		Reconciler: mcreconcile.Func(func(context.Context, mcreconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, nil
		}),
		SkipNameValidation: ptr.To(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return ctrl
}

// startController runs ctrl until the test ends, and returns the context
// it runs under.
func startController(t *testing.T, ctrl mccontroller.Controller) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ctrl.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	return ctx
}

// pollUntil fails the test unless cond holds within 30 seconds; what says
// what was awaited.
func pollUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// goroutinesSettle waits until at most limit goroutines run (goroutines of
// callbacks that just ran take a moment to end) and reports how many do.
func goroutinesSettle(ctx context.Context, limit int) (int, bool) {
	var n int
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n = runtime.NumGoroutine()
		return n <= limit, nil
	})
	return n, err == nil
}

// Every lost fence ends an engagement while the controllers keep running.
// multicluster-runtime v0.24.1 kept one goroutine per source for each such
// engagement until the process exited — 27 % of a 10,000-cluster replica's
// goroutines (docs/benchmarks.md). The patched copy in third_party/ lets
// them end with the engagement.
func TestEndedEngagementsLeaveNoGoroutines(t *testing.T) {
	const engagements, sources = 200, 3
	ctrl, ctx, starts := idleController(t, sources)
	base := runtime.NumGoroutine()
	for range engagements {
		eng, end := context.WithCancel(ctx)
		if err := ctrl.Engage(eng, "east", nil); err != nil {
			t.Fatal(err)
		}
		end()
	}
	if got := starts.Load(); got != (engagements+1)*sources {
		t.Fatalf("sources started %d times, want %d", got, (engagements+1)*sources)
	}
	if n, ok := goroutinesSettle(ctx, base+sources); !ok {
		t.Fatalf("%d engagements ended, goroutines %d → %d (a leak keeps %d)", engagements, base, n, engagements*sources)
	}
}

// countingInformer counts the handlers added to and removed from it.
type countingInformer struct {
	*controllertest.FakeInformer
	adds, removes *atomic.Int64
}

func (f countingInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, d time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	f.adds.Add(1)
	return f.FakeInformer.AddEventHandlerWithResyncPeriod(h, d)
}

func (f countingInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	f.removes.Add(1)
	return f.FakeInformer.RemoveEventHandler(r)
}

// cacheCluster is a cluster with only a cache: a synced fake one whose
// Secret informer counts handlers.
type cacheCluster struct {
	cluster.Cluster
	cache cache.Cache
}

func (c cacheCluster) GetCache() cache.Cache { return c.cache }

func newCacheCluster(adds, removes *atomic.Int64) cacheCluster {
	inf := countingInformer{FakeInformer: controllertest.NewFakeInformer(controllertest.Synced), adds: adds, removes: removes}
	gvk := corev1.SchemeGroupVersion.WithKind("Secret")
	return cacheCluster{cache: &informertest.FakeInformers{InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{gvk: inf}}}
}

// A live engagement costs no goroutine that only waits for it to end:
// v0.24.1 kept one per controller and two per kind source (its
// startWithinContext, and the removal of its handler), 15 per cluster with
// certhub's controllers. The patched copy registers that work with
// context.AfterFunc instead, and it still runs when the engagement ends.
func TestLiveEngagementsWaitWithoutGoroutines(t *testing.T) {
	const clusters = 200
	var adds, removes atomic.Int64
	ctrl, ctx := kindController(t, &adds, &removes)
	poll := func(what string, cond func() bool) { t.Helper(); pollUntil(ctx, t, what, cond) }

	base := runtime.NumGoroutine()
	ends := make([]context.CancelFunc, 0, clusters)
	for i := range clusters {
		eng, end := context.WithCancel(ctx)
		ends = append(ends, end)
		if err := ctrl.Engage(eng, multicluster.ClusterName("cluster-"+strconv.Itoa(i)), newCacheCluster(&adds, &removes)); err != nil {
			t.Fatal(err)
		}
	}
	poll("every engagement's handler added", func() bool { return adds.Load() == clusters+1 })
	if n, ok := goroutinesSettle(ctx, base+1); !ok {
		t.Fatalf("%d live engagements: goroutines %d → %d (waiting goroutines would add %d)", clusters, base, n, 3*clusters)
	}

	for _, end := range ends {
		end()
	}
	poll("every ended engagement's handler removed", func() bool { return removes.Load() == clusters })
	if n, ok := goroutinesSettle(ctx, base+1); !ok {
		t.Fatalf("%d engagements ended: goroutines %d → %d", clusters, base, n)
	}
}
