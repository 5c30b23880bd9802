package certsync

import (
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// The shared workers take Certificates cluster by cluster, in turn: one
// cluster's backlog (thousands of Certificates, or a slow API server that
// makes each take seconds) waits behind one item of every other cluster
// with work, never in front of all of it. Measured before this queue, with
// 4 workers and one slow cluster's 19-Certificate backlog: a neighbour in a
// healthy cluster waited 7.6 s instead of 31 ms
// (test/integration/adversarial TestHungAndSlowClustersStarveNobody).
//
// Only the storage of client-go's workqueue is replaced (its Queue
// interface); de-duplication, the processing set, delays and rate limiting
// stay client-go's. It replaces controller-runtime's default priority
// queue, whose priorities are per item, not per cluster.

// newFairQueue is the controller's NewQueue.
func newFairQueue(name string, rl workqueue.TypedRateLimiter[mcreconcile.Request]) workqueue.TypedRateLimitingInterface[mcreconcile.Request] {
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[mcreconcile.Request]{Name: name, Queue: &roundRobin{byCluster: map[multicluster.ClusterName][]mcreconcile.Request{}}})
	d := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[mcreconcile.Request]{Name: name, Queue: q})
	return workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[mcreconcile.Request]{Name: name, DelayingQueue: d})
}

// roundRobin is a FIFO per cluster, popped one cluster at a time in turn.
// The workqueue calls it under its own lock.
type roundRobin struct {
	byCluster map[multicluster.ClusterName][]mcreconcile.Request
	turns     []multicluster.ClusterName // clusters with items, next first
	n         int
}

var _ workqueue.Queue[mcreconcile.Request] = &roundRobin{}

func (q *roundRobin) Touch(mcreconcile.Request) {}

func (q *roundRobin) Push(r mcreconcile.Request) {
	items := q.byCluster[r.ClusterName]
	if len(items) == 0 {
		q.turns = append(q.turns, r.ClusterName)
	}
	q.byCluster[r.ClusterName] = append(items, r)
	q.n++
}

func (q *roundRobin) Len() int { return q.n }

func (q *roundRobin) Pop() mcreconcile.Request {
	c := q.turns[0]
	q.turns[0] = "" // let the backing array forget it
	q.turns = q.turns[1:]
	items := q.byCluster[c]
	r := items[0]
	items[0] = mcreconcile.Request{}
	if items = items[1:]; len(items) > 0 {
		q.byCluster[c] = items
		q.turns = append(q.turns, c) // its next item waits for everyone else's turn
	} else {
		delete(q.byCluster, c)
	}
	q.n--
	return r
}
