package certsync

import (
	"fmt"
	"strings"
	"testing"

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
	q := newFairQueue("", workqueue.DefaultTypedControllerRateLimiter[mcreconcile.Request]())
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
