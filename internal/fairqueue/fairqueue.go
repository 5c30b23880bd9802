// Package fairqueue is the work queue of the per-cluster reconcilers: the
// shared workers take requests cluster by cluster, in turn, and within a
// cluster namespace by namespace, each cluster in at most a bounded number
// of workers at once (New). It replaces only the storage of client-go's
// workqueue; de-duplication, delays and rate limiting stay client-go's.
package fairqueue

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// The shared workers take Certificates cluster by cluster, in turn, and
// within a cluster namespace by namespace, in turn: one cluster's or one
// namespace's backlog (thousands of Certificates, or a slow API server that
// makes each take seconds) waits behind one item of every other cluster or
// namespace with work, never in front of all of it (the issuance budget
// queues fairly the same way; a FIFO in front of it would undo that). Measured before this queue, with
// 4 workers and one slow cluster's 19-Certificate backlog: a neighbour in a
// healthy cluster waited 7.6 s instead of 31 ms
// (test/integration/adversarial TestHungAndSlowClustersStarveNobody).
//
// Turns alone do not stop a cluster whose API server hangs mid-response from
// holding every worker: when nobody else has work queued, each free worker
// takes its next item and hangs too, and the neighbour's next Certificate
// finds no worker until a request timeout frees one. So one cluster occupies
// at most perCluster workers at once (Options.MaxConcurrentReconcilesPerCluster,
// default half of them): its further items wait in the queue, not in a worker.
//
// Only the storage of client-go's workqueue is replaced (its Queue
// interface); de-duplication, the processing set, delays and rate limiting
// stay client-go's. It replaces controller-runtime's default priority
// queue, whose priorities are per item, not per cluster.

// wakeCluster names the sentinel requests that wake a waiting worker when a
// cluster at its cap frees a worker (client-go signals only on Add). No
// cluster can be named so: the inventory refuses names with control
// characters.
const wakeCluster multicluster.ClusterName = "\x00wake"

// NewQueue returns a controller's NewQueue: clusters take turns, each in at
// most perCluster workers at once (0: no bound).
func NewQueue(perCluster int) func(string, workqueue.TypedRateLimiter[mcreconcile.Request]) workqueue.TypedRateLimitingInterface[mcreconcile.Request] {
	return func(name string, rl workqueue.TypedRateLimiter[mcreconcile.Request]) workqueue.TypedRateLimitingInterface[mcreconcile.Request] {
		rr := &roundRobin{byCluster: map[multicluster.ClusterName]*namespaces{}, busy: map[multicluster.ClusterName]int{}, perCluster: perCluster}
		q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[mcreconcile.Request]{Name: name, Queue: rr})
		d := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[mcreconcile.Request]{Name: name, Queue: q})
		return &fairQueue{TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[mcreconcile.Request]{Name: name, DelayingQueue: d}), rr: rr}
	}
}

// fairQueue tells the storage when a worker is done with a cluster's item,
// and hides the wake sentinels from the workers.
type fairQueue struct {
	workqueue.TypedRateLimitingInterface[mcreconcile.Request]
	rr    *roundRobin
	wakes atomic.Uint64
}

func (q *fairQueue) Get() (mcreconcile.Request, bool) {
	for {
		r, shutdown := q.TypedRateLimitingInterface.Get()
		if shutdown || r.ClusterName != wakeCluster {
			return r, shutdown
		}
		q.TypedRateLimitingInterface.Done(r)
	}
}

func (q *fairQueue) Done(r mcreconcile.Request) {
	if q.rr.release(r.ClusterName) {
		// A distinct sentinel each time: Add of one already queued signals nobody.
		w := mcreconcile.Request{ClusterName: wakeCluster}
		w.Name = strconv.FormatUint(q.wakes.Add(1), 10)
		q.Add(w)
	}
	q.TypedRateLimitingInterface.Done(r)
}

// namespaces is one cluster's queued items: a FIFO per namespace, popped
// one namespace at a time in turn.
type namespaces struct {
	byNamespace map[string][]mcreconcile.Request
	turns       []string
	n           int
}

func (ns *namespaces) push(r mcreconcile.Request) {
	items := ns.byNamespace[r.Namespace]
	if len(items) == 0 {
		ns.turns = append(ns.turns, r.Namespace)
	}
	ns.byNamespace[r.Namespace] = append(items, r)
	ns.n++
}

func (ns *namespaces) pop() mcreconcile.Request {
	name := ns.turns[0]
	ns.turns = ns.turns[1:]
	items := ns.byNamespace[name]
	r := items[0]
	items[0] = mcreconcile.Request{}
	if items = items[1:]; len(items) > 0 {
		ns.byNamespace[name] = items
		ns.turns = append(ns.turns, name) // its next item waits for every other namespace's turn
	} else {
		delete(ns.byNamespace, name)
	}
	ns.n--
	return r
}

// roundRobin is a queue per cluster (namespaces in turn), popped one
// cluster at a time in turn, skipping clusters that occupy perCluster
// workers. The workqueue calls Push, Pop and Len under its own lock;
// release comes from fairQueue.Done.
type roundRobin struct {
	mu         sync.Mutex
	byCluster  map[multicluster.ClusterName]*namespaces
	turns      []multicluster.ClusterName // clusters with items, next first
	busy       map[multicluster.ClusterName]int
	perCluster int
	n, blocked int // items queued; of those, items of clusters at their cap
}

var _ workqueue.Queue[mcreconcile.Request] = &roundRobin{}

func (q *roundRobin) Touch(mcreconcile.Request) {}

func (q *roundRobin) atCap(c multicluster.ClusterName) bool {
	return q.perCluster > 0 && c != wakeCluster && q.busy[c] >= q.perCluster
}

func (q *roundRobin) Push(r mcreconcile.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ns := q.byCluster[r.ClusterName]
	if ns == nil {
		ns = &namespaces{byNamespace: map[string][]mcreconcile.Request{}}
		q.byCluster[r.ClusterName] = ns
		q.turns = append(q.turns, r.ClusterName)
	}
	ns.push(r)
	q.n++
	if q.atCap(r.ClusterName) {
		q.blocked++
	}
}

// Len is the number of items a worker may take now.
func (q *roundRobin) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n - q.blocked
}

// Pop takes the next item of the first cluster in turn below its cap; the
// workqueue calls it only when Len > 0.
func (q *roundRobin) Pop() mcreconcile.Request {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := 0
	for i < len(q.turns)-1 && q.atCap(q.turns[i]) {
		i++
	}
	c := q.turns[i]
	q.turns = append(q.turns[:i], q.turns[i+1:]...)
	ns := q.byCluster[c]
	r := ns.pop()
	if ns.n > 0 {
		q.turns = append(q.turns, c) // its next item waits for everyone else's turn
	} else {
		delete(q.byCluster, c)
	}
	q.n--
	if c != wakeCluster {
		q.busy[c]++
		if q.atCap(c) {
			q.blocked += ns.n
		}
	}
	return r
}

// release records that a worker finished an item of c, and reports whether
// that let c's queued items be taken again.
func (q *roundRobin) release(c multicluster.ClusterName) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if c == wakeCluster || q.busy[c] == 0 {
		return false
	}
	wasAtCap := q.atCap(c)
	if q.busy[c]--; q.busy[c] == 0 {
		delete(q.busy, c)
	}
	if !wasAtCap {
		return false
	}
	left := 0
	if ns := q.byCluster[c]; ns != nil {
		left = ns.n
	}
	q.blocked -= left
	return left > 0
}

// RetryBackoff is how long a request (a Certificate) whose reconcile failed waits
// before the next try: 5 ms doubling per failure, at most 30 s —
// cert-manager's ceiling for Certificates (DefaultCertificateRateLimiter).
// controller-runtime's default waits up to 1,000 s, and its token bucket
// (10 retries a second, burst 100) is shared by every cluster: one
// cluster's failures would delay every other cluster's retries, and an API
// server that times out for a while leaves its Certificates waiting
// minutes after it recovered.
func RetryBackoff() workqueue.TypedRateLimiter[mcreconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[mcreconcile.Request](5*time.Millisecond, 30*time.Second)
}
