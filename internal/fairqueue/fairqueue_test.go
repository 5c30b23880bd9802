package fairqueue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

func req(cluster, name string) mcreconcile.Request {
	return mcreconcile.Request{ClusterName: multicluster.ClusterName(cluster), Request: reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}}
}

// A cluster with a backlog does not go first: the others get every other turn.
func TestFairQueueTakesClustersInTurn(t *testing.T) {
	q := NewQueue(0)("", workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
	defer q.ShutDown()
	for i := range 5 {
		q.Add(req("busy", fmt.Sprintf("b%d", i)))
	}
	q.Add(req("quiet", "q0"))
	q.Add(req("other", "o0"))
	q.Add(req("quiet", "q1"))
	q.Add(req("busy", "b0")) // a duplicate: de-duplicated by the workqueue
	var got []string
	for q.Len() > 0 {
		r, _ := q.Get()
		got = append(got, r.Name)
		q.Done(r)
	}
	if want := "b0 q0 o0 b1 q1 b2 b3 b4"; strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
}

// Within a cluster, a namespace with a backlog does not go first either.
func TestFairQueueTakesNamespacesInTurn(t *testing.T) {
	q := NewQueue(0)("", workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
	defer q.ShutDown()
	in := func(ns, name string) mcreconcile.Request {
		r := req("east", name)
		r.Namespace = ns
		return r
	}
	for i := range 4 {
		q.Add(in("flood", fmt.Sprintf("f%d", i)))
	}
	q.Add(in("quiet", "q0"))
	q.Add(in("quiet", "q1"))
	var got []string
	for q.Len() > 0 {
		r, _ := q.Get()
		got = append(got, r.Name)
		q.Done(r)
	}
	if want := "f0 q0 f1 q1 f2 f3"; strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
}

// A cluster holding its cap of workers (here a hung one: its items are never
// Done) gets no further worker; a neighbour's item added later is taken at
// once; when one of its items is Done, a waiting worker takes its next one.
func TestFairQueueBoundsWorkersPerCluster(t *testing.T) {
	q := NewQueue(2)("", workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
	defer q.ShutDown()
	for i := range 5 {
		q.Add(req("hung", fmt.Sprintf("h%d", i)))
	}
	h0, _ := q.Get()
	h1, _ := q.Get()
	if h0.Name != "h0" || h1.Name != "h1" {
		t.Fatalf("got %s %s, want h0 h1", h0.Name, h1.Name)
	}
	if q.Len() != 0 {
		t.Errorf("Len %d with the only cluster at its cap, want 0", q.Len())
	}
	waiting := make(chan string)
	go func() {
		r, _ := q.Get() // blocks: nothing a worker may take
		waiting <- r.Name
	}()
	q.Add(req("quiet", "q0"))
	if got := <-waiting; got != "q0" {
		t.Fatalf("the waiting worker took %s, want the neighbour's q0", got)
	}
	go func() {
		r, _ := q.Get()
		waiting <- r.Name
	}()
	q.Done(h0) // frees one of hung's workers: the waiting worker is woken, not by a sentinel it sees
	if got := <-waiting; got != "h2" {
		t.Fatalf("after a hung item was Done the waiting worker took %s, want h2", got)
	}
}

func TestFairQueueWithoutBoundServesOneCluster(t *testing.T) {
	q := NewQueue(0)("", workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
	defer q.ShutDown()
	for i := range 4 {
		q.Add(req("only", fmt.Sprintf("o%d", i)))
	}
	for i := range 4 {
		if r, _ := q.Get(); r.Name != fmt.Sprintf("o%d", i) {
			t.Fatalf("got %s, want o%d", r.Name, i)
		}
	}
}

// A Certificate whose reconciles keep failing waits at most 30 s for its
// next try, and its failures never delay another cluster's retry (as
// controller-runtime's shared 10-a-second token bucket would).
func TestRetryBackoffIsPerCertificateAndCapped(t *testing.T) {
	rl := RetryBackoff()
	failing, other := req("east", "a"), req("west", "b")
	for i := range 1000 {
		if d := rl.When(failing); d > 30*time.Second {
			t.Fatalf("failure %d waits %s, want at most 30s", i+1, d)
		}
	}
	if d := rl.When(failing); d != 30*time.Second {
		t.Errorf("after 1,000 failures the wait is %s, want the 30s ceiling", d)
	}
	if d := rl.When(other); d != 5*time.Millisecond {
		t.Errorf("another cluster's first retry waits %s, want 5ms", d)
	}
	rl.Forget(failing)
	if d := rl.When(failing); d != 5*time.Millisecond {
		t.Errorf("after a success the wait is %s, want 5ms again", d)
	}
}
