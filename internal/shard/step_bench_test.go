package shard

import (
	"context"
	"strconv"
	"testing"

	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// BenchmarkStep measures one pass of the decision loop at steady state for
// one of 5 replicas: every cluster registered, this replica's share
// connected and engaged, no fence due for renewal (the clock stands still).
// Lease events kick the loop up to 1/minStepGap times a second, so at
// 10,000 clusters this cost is paid ~40 times a second.
func BenchmarkStep(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(strconv.Itoa(n)+"-clusters", func(b *testing.B) {
			h := newHarness(b, "r0", func(o *Options) { o.Buckets = DefaultBuckets })
			for i := 1; i < 5; i++ {
				h.peer("r" + strconv.Itoa(i))
			}
			for i := range n {
				h.c.Register(multicluster.ClusterName("cluster-" + strconv.Itoa(i)))
			}
			h.c.step(h.ctx) // assign and acquire this replica's fences
			for i := range n {
				name := multicluster.ClusterName("cluster-" + strconv.Itoa(i))
				if h.c.Wanted(name) {
					if err := h.c.Engage(context.Background(), name, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			h.c.step(h.ctx) // engage them
			if h.c.Share() == 0 {
				b.Fatal("the replica holds no fence")
			}
			b.ReportAllocs()
			for b.Loop() {
				h.c.step(h.ctx)
			}
		})
	}
}
