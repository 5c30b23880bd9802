package engaged

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
	mcsource "sigs.k8s.io/multicluster-runtime/pkg/source"
)

// recordingSource records, per cluster, the context its source was
// started with; clusters named in skip are filtered out.
type recordingSource struct {
	mcsource.TypedSource[client.Object, mcreconcile.Request]
	skip map[multicluster.ClusterName]bool

	mu      sync.Mutex
	started map[multicluster.ClusterName]context.Context
}

func (r *recordingSource) ForCluster(name multicluster.ClusterName, _ cluster.Cluster) (crsource.TypedSource[mcreconcile.Request], bool, error) {
	if r.skip[name] {
		return nil, false, nil
	}
	return crsource.TypedFunc[mcreconcile.Request](func(ctx context.Context, _ workqueue.TypedRateLimitingInterface[mcreconcile.Request]) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.started[name] = ctx
		return nil
	}), true, nil
}

func (r *recordingSource) startedIn(name multicluster.ClusterName) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started[name]
}

// A cluster's source starts once the controller has its queue — at once
// when engaged later, at the controller's start when engaged before —
// and runs on the engagement's context: it ends when the cluster is
// disengaged, not when the controller stops. Clusters disengaged before
// the start, and those the filter refuses, never start.
func TestSourceStartsInEachEngagement(t *testing.T) {
	rec := &recordingSource{skip: map[multicluster.ClusterName]bool{"filtered": true}, started: map[multicluster.ClusterName]context.Context{}}
	s := &Source{src: rec, pending: map[multicluster.ClusterName]pendingCluster{}}
	ctx := t.Context()

	early, endEarly := context.WithCancel(ctx)
	gone, endGone := context.WithCancel(ctx)
	if err := s.Engage(early, "early", &fakeCluster{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Engage(gone, "gone", &fakeCluster{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Engage(ctx, "filtered", &fakeCluster{}); err != nil {
		t.Fatal(err)
	}
	endGone()
	if rec.startedIn("early") != nil {
		t.Fatal("a source started before the controller had a queue")
	}

	ctlCtx, stopController := context.WithCancel(ctx)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
	t.Cleanup(q.ShutDown)
	if err := s.Start(ctlCtx, q); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return rec.startedIn("early") != nil, nil
	}); err != nil {
		t.Fatal("the cluster engaged before the start did not start with it")
	}

	late, endLate := context.WithCancel(ctx)
	if err := s.Engage(late, "late", &fakeCluster{}); err != nil {
		t.Fatal(err)
	}
	if rec.startedIn("late") == nil {
		t.Fatal("a cluster engaged after the start did not start in Engage")
	}
	if rec.startedIn("gone") != nil || rec.startedIn("filtered") != nil {
		t.Errorf("started in a cluster disengaged before the start, or filtered out: %v", rec.started)
	}

	stopController()
	if rec.startedIn("late").Err() != nil {
		t.Error("a cluster's source ended with the controller's context, not its engagement's")
	}
	endEarly()
	endLate()
	for _, name := range []multicluster.ClusterName{"early", "late"} {
		if rec.startedIn(name).Err() == nil {
			t.Errorf("%s's source still runs after the cluster was disengaged", name)
		}
	}
}
