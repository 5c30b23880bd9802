package budget

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// aheadByHand counts the waiters served before e by going through every
// one of them, as fair queuing states it: a more pressing lane first; in
// e's lane, a smaller start tag first, equal starts in the index's order
// (and a tenant's own waiters nearest due first).
func aheadByHand(r *room, e *entry, quiet bool) int {
	startOf := func(t *tenantQueue, j int) float64 {
		return max(r.fair.Virtual, t.tag) + float64(j)*r.cost(t)
	}
	mine := startOf(e.tenant, e.tenant.index(e))
	n := 0
	for _, t := range r.tenants {
		if quiet && t.len() != 1 {
			continue
		}
		for l, ws := range t.lanes {
			for j, w := range ws {
				switch {
				case w == e:
				case Lane(l) > e.lane:
					n++
				case Lane(l) < e.lane:
				case t == e.tenant:
					if w.before(e) {
						n++
					}
				case startOf(t, j) < mine || (startOf(t, j) == mine && byTag(t, e.tenant)):
					n++
				}
			}
		}
	}
	return n
}

// The room's walk over tenants counts exactly the waiters a pass over
// every waiter counts, for random waiting rooms (tenants of several
// clusters and weights, both lanes, overdue routine asks, tags ahead of
// virtual time).
func TestRoomCountsWhatEveryWaiterWouldSay(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		f := &Fairness{Virtual: float64(rng.IntN(4))}
		r := newRoom(DefaultMaxTenantWaiters, f)
		now := t0
		for i := range 1 + rng.IntN(60) {
			tenant := Tenant{Cluster: fmt.Sprintf("c%d", rng.IntN(4)), Namespace: fmt.Sprintf("n%d", rng.IntN(3)), Weight: float64(1 + rng.IntN(3))}
			if rng.IntN(3) == 0 {
				f.Finish = map[string]float64{keyOf(tenant).String(): f.Virtual + float64(rng.IntN(6))/2}
			}
			due := now.Add(time.Duration(rng.IntN(20)-5) * time.Second)
			r.put(fmt.Sprintf("w%d", i), tenant, due, Lane(rng.IntN(2)), now)
		}
		for _, e := range r.byKey { // a few served, as Admit does: tags move ahead of virtual time
			if rng.IntN(4) == 0 {
				r.served(e)
			}
		}
		for _, e := range r.byKey {
			quiet := e.tenant.len() == 1
			if got, want := r.ahead(e, quiet, 1<<30), aheadByHand(r, e, quiet); got != want {
				t.Fatalf("round %d: %s (tenant %s, lane %d, quiet %v): room counts %d ahead, every waiter %d", round, e.key, e.tenant.id, e.lane, quiet, got, want)
			}
		}
	}
}
