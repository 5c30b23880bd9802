package shard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mccontroller "sigs.k8s.io/multicluster-runtime/pkg/controller"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcsource "sigs.k8s.io/multicluster-runtime/pkg/source"
)

// stallingCache is the cache of a cluster whose API server does not
// answer the list: GetInformer waits until its context ends.
type stallingCache struct {
	*informertest.FakeInformers
	once    sync.Once
	entered chan struct{} // closed once GetInformer waits
}

func (c *stallingCache) GetInformer(ctx context.Context, _ client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	c.once.Do(func() { close(c.entered) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// kindController is a started multicluster controller with a kind source
// for Secrets, engaged once (as "first") so its sources have started with
// it: from then on, Engage starts each cluster's source at once.
func kindController(t *testing.T, adds, removes *atomic.Int64) (mccontroller.Controller, context.Context) {
	t.Helper()
	ctrl := noopController(t, "kind")
	if err := ctrl.MultiClusterWatch(mcsource.Kind(&corev1.Secret{}, mchandler.TypedEnqueueRequestForObject[*corev1.Secret]())); err != nil {
		t.Fatal(err)
	}
	ctx := startController(t, ctrl)
	if err := ctrl.Engage(ctx, "first", newCacheCluster(adds, removes)); err != nil {
		t.Fatal(err)
	}
	pollUntil(ctx, t, "the first engagement's handler added", func() bool { return adds.Load() == 1 })
	return ctrl, ctx
}

// A cluster whose informer cannot sync must not hold up the engagement of
// any other cluster with the same controller. multicluster-runtime
// v0.24.1 held the controller's lock while a kind source waited for its
// cluster's informer, so after a failover at 10,000 clusters a survivor
// engaged its new clusters one after the other, and one unanswering API
// server stopped them all (docs/benchmarks.md). The patched copy in
// third_party/ waits outside the lock.
func TestASlowClusterHoldsUpNoOtherEngagement(t *testing.T) {
	var adds, removes atomic.Int64
	ctrl, ctx := kindController(t, &adds, &removes)

	slowCtx, endSlow := context.WithCancel(ctx)
	defer endSlow()
	stalled := &stallingCache{FakeInformers: &informertest.FakeInformers{}, entered: make(chan struct{})}
	slowDone := make(chan error, 1)
	go func() { slowDone <- ctrl.Engage(slowCtx, "slow", cacheCluster{cache: stalled}) }()
	select {
	case <-stalled.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow cluster's engagement never asked for its informer")
	}

	fastDone := make(chan error, 1)
	go func() { fastDone <- ctrl.Engage(ctx, "fast", newCacheCluster(&adds, &removes)) }()
	select {
	case err := <-fastDone:
		if err != nil {
			t.Fatalf("engaging a healthy cluster: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("engaging a healthy cluster waited for another cluster's informer to sync")
	}
	pollUntil(ctx, t, "the healthy cluster's handler added", func() bool { return adds.Load() == 2 })

	endSlow()
	if err := <-slowDone; err == nil {
		t.Fatal("the slow cluster's engagement ended before its informer synced, without an error")
	}
}

// A kind source waits for its own informer only. v0.24.1 waited for the
// whole cluster cache, under the controller's lock: an informer another
// controller started in the cluster (a kind whose CRD is broken, a slow
// list) held up this controller in every cluster, and when that wait
// failed the source dropped its handler and reported no error, leaving
// the cluster engaged but unwatched.
func TestASourceWaitsOnlyForItsOwnInformer(t *testing.T) {
	var adds, removes atomic.Int64
	ctrl, ctx := kindController(t, &adds, &removes)

	cl := newCacheCluster(&adds, &removes)
	fake, ok := cl.cache.(*informertest.FakeInformers)
	if !ok {
		t.Fatalf("the cluster's cache is a %T", cl.cache)
	}
	fake.Synced = ptr.To(false) // another informer of the cluster has not synced
	if err := ctrl.Engage(ctx, "busy", cl); err != nil {
		t.Fatal(err)
	}
	pollUntil(ctx, t, "the handler added", func() bool { return adds.Load() == 2 })
	if n := removes.Load(); n != 0 {
		t.Fatalf("the source removed its handler %d times: it waited for the whole cache, not its informer", n)
	}
}
