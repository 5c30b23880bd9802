// The bound is a long single-goroutine run (~110,000 draws, ~12 s; five
// times that under the race detector, which has nothing to find in it):
// `make test` runs it in its coverage pass, without -race.

//go:build !race

package budget

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// The stored ledger's size does not depend on how many names or tenants
// ask: 100,000 distinct name sets from 1,000 namespaces of 50 clusters,
// one a second under Let's Encrypt's limits (those it remembers asking
// again when told), keep it under 64 KiB while it admits at the orders
// limit, and a set drawn to its limit is
// still refused after 5,000 other sets passed.
func TestLedgerStaysBounded(t *testing.T) {
	lims := map[string]Limit{
		"orders": {Capacity: 300, Period: 3 * time.Hour},
		"domain": {Capacity: 50, Period: 7 * 24 * time.Hour},
		"set":    {Capacity: 5, Period: 7 * 24 * time.Hour},
		"authz":  {Capacity: 5, Period: time.Hour},
	}
	drawsOf := func(set, domain int) []Draw {
		return []Draw{
			{Bucket: "orders", Limit: lims["orders"]},
			{Bucket: fmt.Sprintf("domain:d%04d.example", domain), Limit: lims["domain"]},
			{Bucket: fmt.Sprintf("set:%016x", set), Limit: lims["set"]},
			{Bucket: fmt.Sprintf("authz:s%d.d%04d.example", set, domain), Limit: lims["authz"], Check: true},
		}
	}
	d := emptyLedger()
	now := t0
	admitted, largest := 0, 0
	type retry struct {
		at, due     time.Time
		tenant      Tenant
		set, domain int
	}
	retries := map[string]retry{} // the waiters the ledger remembers ask again when told
	ask := func(key string, r retry) {
		w, _, _ := take(d, now, key, r.tenant, r.due, drawsOf(r.set, r.domain))
		delete(retries, key)
		switch _, kept := d.Waiting[key]; {
		case w == 0:
			admitted++
		case kept:
			r.at = now.Add(w)
			retries[key] = r
		}
	}
	for i := range 100_000 {
		now = now.Add(time.Second)
		for k, r := range retries {
			if !now.Before(r.at) {
				ask(k, r)
			}
		}
		ns := i % 1000
		tenant := Tenant{Cluster: fmt.Sprintf("c%02d", ns%50), Namespace: fmt.Sprintf("ns%03d", ns)}
		ask(fmt.Sprintf("order-%06d", i), retry{due: now.Add(time.Hour), tenant: tenant, set: i, domain: i % 5000})
		if i%100 == 0 || i == 99_999 {
			raw, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			largest = max(largest, len(raw))
		}
	}
	if largest > 64<<10 {
		t.Errorf("the ledger grew to %d bytes, want at most 64 KiB", largest)
	}
	// 300 at once, then one per 36 s over 100,000 s; waiters refused
	// before a token comes lose nothing but time.
	// Every token of the orders limit is used: 300 at once, then one per
	// 36 s (a name set the ledger does not remember asks once only).
	if most := 300 + 100_000/36; admitted > most+1 || admitted < most-5 {
		t.Errorf("%d admitted, want %d (the orders limit)", admitted, most)
	}
	t.Logf("largest ledger %d bytes, %d admitted", largest, admitted)

	// A set used up stays used up while other sets come and go: the
	// fullest are forgotten first.
	hot := drawsOf(-1, 9999)
	now = now.Add(24 * time.Hour) // the waiters above are forgotten
	for i := range 5 {
		now = now.Add(time.Hour) // the orders bucket refills
		if w, refused, _ := take(d, now, fmt.Sprintf("hot-%d", i), Tenant{Cluster: "c", Namespace: "hot"}, now, hot); w != 0 {
			t.Fatalf("a new set, draw %d: refused by %s", i, refused)
		}
	}
	for i := range 5_000 {
		now = now.Add(20 * time.Second)
		take(d, now, fmt.Sprintf("other-%d", i), Tenant{Cluster: "c", Namespace: fmt.Sprintf("o%d", i%100)}, now, drawsOf(200_000+i, i%5000))
	}
	now = now.Add(time.Hour)
	if w, refused, _ := take(d, now, "hot-5", Tenant{Cluster: "c", Namespace: "hot"}, now, hot); w == 0 || refused != hot[2].Bucket {
		t.Errorf("a set used 5 times this week, drawn again after 5,000 others within the week: wait %s, refused %q", w, refused)
	}
}
