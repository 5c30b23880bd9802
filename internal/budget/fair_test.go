package budget

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// asker is one Certificate asking a budget again after each wait it is told.
type asker struct {
	key    string
	tenant Tenant
	due    time.Time
	next   time.Time
}

// simulate lets askers ask admit until every one is admitted or limit
// passes, on a fake clock in steps of tick; it returns the admission order.
func simulate(t *testing.T, clk *clocktesting.FakeClock, tick, limit time.Duration, askers []*asker, admit func(a *asker) time.Duration) []*asker {
	t.Helper()
	var order []*asker
	end := clk.Now().Add(limit)
	for len(order) < len(askers) && clk.Now().Before(end) {
		for _, a := range askers { // a fixed order: the flood asks first
			if a.next.IsZero() || clk.Now().Before(a.next) {
				continue
			}
			if w := admit(a); w == 0 {
				order = append(order, a)
				a.next = time.Time{}
			} else {
				a.next = clk.Now().Add(w)
			}
		}
		clk.Step(tick)
	}
	return order
}

// flood is n askers of one tenant, nearest due first; quiet asks later
// than all of them.
func tenants(clk *clocktesting.FakeClock, flood, quiet Tenant, nFlood, nQuiet int) []*asker {
	var as []*asker
	now := clk.Now()
	for i := range nFlood {
		as = append(as, &asker{key: fmt.Sprintf("flood-%03d", i), tenant: flood, due: now.Add(time.Duration(i) * time.Second), next: now})
	}
	for i := range nQuiet {
		as = append(as, &asker{key: fmt.Sprintf("quiet-%02d", i), tenant: quiet, due: now.Add(time.Hour), next: now})
	}
	return as
}

// lastQuiet is the position (1-based) of the quiet tenant's last admission.
func lastQuiet(order []*asker, quiet Tenant) int {
	last := 0
	for i, a := range order {
		if a.tenant == quiet {
			last = i + 1
		}
	}
	return last
}

// A namespace's backlog, due earlier than everything else, takes its
// share and no more while another tenant waits: the quiet tenant's 10 are
// all admitted within the first 2×10+1 admissions (3×10/… with a weight),
// the flood is served nearest due first, and once the quiet tenant is
// done the flood takes every token.
func TestBudgetSharesFairly(t *testing.T) {
	cases := []struct {
		name         string
		flood, quiet Tenant
		within       int
	}{
		{"two clusters", Tenant{Cluster: "east", Namespace: "flood"}, Tenant{Cluster: "west", Namespace: "quiet"}, 21},
		{"two namespaces of one cluster", Tenant{Cluster: "east", Namespace: "flood"}, Tenant{Cluster: "east", Namespace: "quiet"}, 21},
		{"a cluster of weight 3", Tenant{Cluster: "east", Namespace: "flood"}, Tenant{Cluster: "west", Namespace: "quiet", Weight: 3}, 14},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			b := mustNew(t, Options{Rate: 5, Clock: clk})
			as := tenants(clk, tc.flood, tc.quiet, 400, 10)
			order := simulate(t, clk, 10*time.Millisecond, time.Minute, as, func(a *asker) time.Duration { return b.Admit(a.key, a.tenant, a.due, Routine) })
			if n := lastQuiet(order, tc.quiet); n == 0 || n > tc.within {
				t.Errorf("the quiet tenant's last admission is #%d, want within the first %d", n, tc.within)
			}
			var flood []string
			for _, a := range order {
				if a.tenant == tc.flood {
					flood = append(flood, a.key)
				}
			}
			if !slices.IsSorted(flood) {
				t.Errorf("the flood was not served nearest due first: %v", flood[:min(20, len(flood))])
			}
			// 1 + 5/s × 60 s, give or take the last token: idle share is lent.
			if n := len(order); n < 295 || n > 302 {
				t.Errorf("%d admitted in a minute at 5/s", n)
			}
		})
	}
}

// The ledger queues the same way across replicas: an ACME account's
// orders go to the quiet tenant within its share.
func TestLedgerSharesFairly(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(t0)
	c := fake.NewClientBuilder().Build()
	l := NewLedger(c, c, key, clk)
	orders := Draw{Bucket: "orders", Limit: Limit{Capacity: 1, Period: time.Second}}
	flood, quiet := Tenant{Cluster: "east", Namespace: "flood"}, Tenant{Cluster: "west", Namespace: "quiet"}
	as := tenants(clk, flood, quiet, 40, 5)
	order := simulate(t, clk, 100*time.Millisecond, time.Minute, as, func(a *asker) time.Duration {
		w, _, _, err := l.Take(ctx, a.key, a.tenant, a.due, []Draw{orders})
		if err != nil {
			t.Fatal(err)
		}
		return w
	})
	if n := lastQuiet(order, quiet); n == 0 || n > 11 {
		t.Errorf("the quiet tenant's last order is #%d of %d, want within the first 11", n, len(order))
	}
}

// Lanes: every urgent ask goes before any routine one, and a routine ask
// past its due time is urgent. A replacement cluster's 10 missing
// certificates are admitted first beside another cluster's backlog of
// renewals; a flood of urgent asks holds a renewal back only until it is
// due, then shares fairly with it.
func TestUrgentLaneGoesFirst(t *testing.T) {
	renewals, replacement := Tenant{Cluster: "east", Namespace: "shop"}, Tenant{Cluster: "west", Namespace: "shop"}
	cases := []struct {
		name                    string
		backlogLane, quietLane  Lane
		backlogDue, quietDue    time.Duration
		quietWithin, quietAfter int // the other tenant's last admission is #quietAfter < n ≤ #quietWithin
	}{
		// The first token goes to the backlog, which asks before the others arrive.
		{"urgent beside routine renewals", Routine, Urgent, time.Hour, time.Hour, 11, 0},
		{"routine beside routine renewals (fair share, the old order)", Routine, Routine, time.Hour, time.Hour, 21, 10},
		{"routine renewals beside an urgent flood wait while not due", Urgent, Routine, time.Hour, time.Hour, 410, 400},
		{"a renewal past due shares fairly with an urgent flood", Urgent, Routine, time.Hour, 2 * time.Second, 40, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			b := mustNew(t, Options{Rate: 5, Clock: clk})
			var as []*asker
			lanes := map[*asker]Lane{}
			for i := range 400 {
				a := &asker{key: fmt.Sprintf("backlog-%03d", i), tenant: renewals, due: t0.Add(tc.backlogDue), next: t0}
				as, lanes[a] = append(as, a), tc.backlogLane
			}
			for i := range 10 {
				a := &asker{key: fmt.Sprintf("quiet-%02d", i), tenant: replacement, due: t0.Add(tc.quietDue), next: t0}
				as, lanes[a] = append(as, a), tc.quietLane
			}
			order := simulate(t, clk, 10*time.Millisecond, 2*time.Minute, as, func(a *asker) time.Duration { return b.Admit(a.key, a.tenant, a.due, lanes[a]) })
			if n := lastQuiet(order, replacement); n <= tc.quietAfter || n > tc.quietWithin {
				t.Errorf("the other tenant's last admission is #%d of %d, want in (%d, %d]", n, len(order), tc.quietAfter, tc.quietWithin)
			}
		})
	}
}
