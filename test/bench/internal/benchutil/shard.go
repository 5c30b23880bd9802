package benchutil

import (
	"context"
	"strings"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/test/fixture/fleet"
)

// SumMetric adds up metric over the replicas' /metrics, scraped at once
// and filtered to that metric (unreachable ones count 0).
func SumMetric(ctx context.Context, procs map[string]*fleet.Replica, metric string) float64 {
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		total float64
	)
	for _, p := range procs {
		wg.Go(func() {
			if m, err := p.Metrics(ctx, metric); err == nil {
				mu.Lock()
				total += m.Sum(metric, nil)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return total
}

// Owned is how many clusters the running replicas own and have engaged
// (fence held and connected) in all: their certhub_shard_owned_clusters.
func Owned(ctx context.Context, procs map[string]*fleet.Replica) int {
	return int(SumMetric(ctx, procs, "certhub_shard_owned_clusters"))
}

// FenceHolders maps each fence Lease in ns whose name starts with prefix
// (name without prefix) to its holder ("" if released).
func FenceHolders(ctx context.Context, c client.Client, ns, prefix string) (map[string]string, error) {
	list := &coordinationv1.LeaseList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range list.Items {
		if !strings.HasPrefix(l.Name, prefix) {
			continue
		}
		who := ""
		if l.Spec.HolderIdentity != nil {
			who = *l.Spec.HolderIdentity
		}
		out[strings.TrimPrefix(l.Name, prefix)] = who
	}
	return out, nil
}

// FenceTransitions sums leaseTransitions over the fence Leases (name
// prefix) in ns: how many times fences changed hands so far.
func FenceTransitions(ctx context.Context, c client.Client, ns, prefix string) (int64, error) {
	list := &coordinationv1.LeaseList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	var n int64
	for _, l := range list.Items {
		if strings.HasPrefix(l.Name, prefix) && l.Spec.LeaseTransitions != nil {
			n += int64(*l.Spec.LeaseTransitions)
		}
	}
	return n, nil
}

// Busiest is the live replica among ids holding the most fences in h (the
// first of ids on a tie).
func Busiest(h map[string]string, live map[string]bool, ids []string) string {
	n := map[string]int{}
	for _, who := range h {
		if live[who] {
			n[who]++
		}
	}
	best, bestN := "", -1
	for _, id := range ids {
		if live[id] && n[id] > bestN {
			best, bestN = id, n[id]
		}
	}
	return best
}
