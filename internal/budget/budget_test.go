package budget

import (
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func TestAdmit(t *testing.T) {
	hour := t0.Add(time.Hour)
	type ask struct {
		at   time.Duration // clock offset from t0
		key  string
		due  time.Time
		want time.Duration // 0: admitted
	}
	for _, tc := range []struct {
		name  string
		opts  Options
		steps []ask
	}{
		{"no rate admits everything", Options{}, []ask{{0, "a", hour, 0}, {0, "b", hour, 0}, {0, "c", hour, 0}}},
		{"2/s: one at once, the next after 500ms", Options{Rate: 2}, []ask{
			{0, "a", hour, 0}, {0, "b", hour, 500 * time.Millisecond}, {500 * time.Millisecond, "b", hour, 0}}},
		{"the most urgent waiter gets the token", Options{Rate: 1}, []ask{
			{0, "first", hour, 0},
			{0, "late", t0.Add(10 * time.Hour), time.Second}, {0, "soon", hour, time.Second},
			// a token arrives: "late" asks first but "soon" is ahead of it
			{time.Second, "late", t0.Add(10 * time.Hour), time.Second}, {time.Second, "soon", hour, 0},
			{2 * time.Second, "late", t0.Add(10 * time.Hour), 0}}},
		{"overdue goes first in its namespace, and waits for a token like everyone", Options{Rate: 1}, []ask{
			{0, "a", hour, 0}, {0, "b", hour, time.Second}, {0, "overdue", t0, time.Second},
			{time.Second, "b", hour, time.Second}, {time.Second, "overdue", t0, 0}}},
		{"a half share halves the rate", Options{Rate: 4, Fence: shareOf(0.5)}, []ask{
			{0, "a", hour, 0}, {0, "b", hour, 500 * time.Millisecond}}},
		{"no share: waits the longest", Options{Rate: 4, Fence: shareOf(0)}, []ask{
			{0, "a", hour, 0}, {0, "b", hour, MaxWait}}},
		{"a wait never passes the due time", Options{Rate: 0.01}, []ask{
			{0, "a", hour, 0}, {0, "b", t0.Add(3 * time.Second), 3 * time.Second}}},
		{"a waiter that stopped asking is forgotten", Options{Rate: 1}, []ask{
			{0, "a", hour, 0}, {0, "gone", t0.Add(time.Minute), time.Second},
			{StaleAfter + time.Second, "b", hour, 0}}},
		{"a full waiting list tells a later waiter to ask again once the list could be served", Options{Rate: 0.1, MaxTenantWaiters: 2}, []ask{
			{0, "a", hour, 0}, {0, "b", hour, MaxWait}, {0, "c", hour, MaxWait},
			{0, "d", hour, 20 * time.Second},            // not remembered: 2 ahead at 0.1/s
			{0, "e", t0.Add(15 * time.Second), MaxWait}, // nearer due: takes c's place
			{0, "c", hour, 20 * time.Second}}},
		{"an overflow wait is at least MaxWait and at most MaxOverflowWait", Options{Rate: 0.001, MaxTenantWaiters: 1}, []ask{
			{0, "a", hour, 0}, {0, "b", hour, MaxWait}, {0, "c", t0.Add(2 * time.Hour), MaxOverflowWait}}},
		{"a nearer due takes the place of the tenant's last waiter", Options{Rate: 1, MaxTenantWaiters: 2}, []ask{
			{0, "a", hour, 0}, {0, "b", hour, time.Second}, {0, "c", hour, 2 * time.Second},
			{0, "soon", t0.Add(time.Minute), time.Second},
			// c was forgotten: it asks again behind b and soon (2 ahead at 1/s)
			{time.Second, "c", hour, MaxWait}, {time.Second, "soon", t0.Add(time.Minute), 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			tc.opts.Clock = clk
			b := mustNew(t, tc.opts)
			for i, s := range tc.steps {
				clk.SetTime(t0.Add(s.at))
				if got := b.Admit(s.key, Tenant{Cluster: "east", Namespace: "shop"}, s.due, Routine); got != s.want {
					t.Fatalf("step %d (%s at +%s): wait %s, want %s", i, s.key, s.at, got, s.want)
				}
			}
		})
	}
}

// 100 waiters asking again after each returned wait: over a simulated
// minute, the admissions follow the rate, nearest due first.
func TestAdmitFollowsTheRateInOrderOfUrgency(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := mustNew(t, Options{Rate: 5, Clock: clk})
	next := map[string]time.Time{}
	due := map[string]time.Time{}
	for i := range 100 {
		k := fmt.Sprintf("c%03d", i)
		next[k], due[k] = t0, t0.Add(time.Hour+time.Duration(i)*time.Minute)
	}
	var order []string
	for now := t0; now.Before(t0.Add(10 * time.Second)); now = now.Add(10 * time.Millisecond) {
		clk.SetTime(now)
		for k, at := range next {
			if now.Before(at) {
				continue
			}
			if w := b.Admit(k, Tenant{Cluster: "east", Namespace: "shop"}, due[k], Routine); w == 0 {
				order = append(order, k)
				delete(next, k)
			} else {
				next[k] = now.Add(w)
			}
		}
	}
	// 1 (the full bucket) + 5/s × 10 s, give or take the last token.
	if n := len(order); n < 49 || n > 51 {
		t.Errorf("%d admitted in 10 s at 5/s", n)
	}
	// The first asker takes the full bucket (nobody waits yet); from then
	// on the most urgent of the rest go first.
	var rest []string
	for i := range 100 {
		if k := fmt.Sprintf("c%03d", i); k != order[0] {
			rest = append(rest, k)
		}
	}
	for i, k := range order[1:] {
		if k != rest[i] {
			t.Fatalf("admission %d went to %s, want %s (nearest due first): %v", i+1, k, rest[i], order[:i+2])
		}
	}
}

// At a low rate (a replica's share of a few per second: a bucket of one
// token or little more) the reserve never starves a backlog: it is
// admitted at the rate.
func TestReserveLeavesALowRateBacklogItsRate(t *testing.T) {
	for _, rate := range []float64{0.5, 1, 1.33, 2} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			b := mustNew(t, Options{Rate: rate, Reserve: 0.5, Clock: clk})
			next := map[string]time.Time{}
			for i := range 50 {
				next[fmt.Sprintf("c%02d", i)] = t0
			}
			admitted := 0
			for now := t0; now.Before(t0.Add(20 * time.Second)); now = now.Add(10 * time.Millisecond) {
				clk.SetTime(now)
				for k, at := range next {
					if now.Before(at) {
						continue
					}
					if w := b.Admit(k, Tenant{Cluster: "east", Namespace: "budget"}, t0.Add(time.Hour), Routine); w == 0 {
						admitted++
						delete(next, k)
					} else {
						next[k] = now.Add(w)
					}
				}
			}
			// The first token, then the rate over 20 s, less what the reserve keeps.
			if want := int(rate*20) - 1; admitted < want {
				t.Errorf("%d admitted in 20 s at %v/s, want at least %d", admitted, rate, want)
			}
		})
	}
}

// shareOf is a fence owning every cluster and the given share of them.
type shareOf float64

func (shareOf) Owns(multicluster.ClusterName) (string, bool) { return "r", true }
func (shareOf) BeginWrite(multicluster.ClusterName) (string, time.Time, func(), bool) {
	return "r", time.Time{}, func() {}, true
}
func (s shareOf) Share() float64 { return float64(s) }

// A backlog of 1,000 in one namespace drains the bucket down to its
// reserve; a quiet namespace's 10 arriving later are all admitted at once
// from the reserve (without it, they wait behind the backlog's share);
// over the run the backlog still gets the rate, less the reserve kept in
// the bucket (10 tokens, once).
func TestReserveServesAQuietTenantAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name         string
		reserve      float64
		quietAtOnce  int
		floodAtLeast int // admitted in 10 s at 20/s: 201 tokens, less the quiet's 10 and the reserve left in the bucket
	}{
		{"reserve 0.5", 0.5, 10, 180},
		{"no reserve", 0, 1, 190},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			b := mustNew(t, Options{Rate: 20, Reserve: tc.reserve, Clock: clk})
			flood, quiet := Tenant{Cluster: "east", Namespace: "flood"}, Tenant{Cluster: "east", Namespace: "quiet"}
			due := t0.Add(time.Hour)
			next := map[string]time.Time{}
			for i := range 1000 {
				next[fmt.Sprintf("flood-%04d", i)] = t0
			}
			admitted, quietAtOnce := 0, 0
			for now := t0; now.Before(t0.Add(10 * time.Second)); now = now.Add(10 * time.Millisecond) {
				clk.SetTime(now)
				if now.Equal(t0.Add(2 * time.Second)) {
					for i := range 10 {
						if b.Admit(fmt.Sprintf("quiet-%d", i), quiet, due, Routine) == 0 {
							quietAtOnce++
						}
					}
				}
				for k, at := range next {
					if now.Before(at) {
						continue
					}
					if w := b.Admit(k, flood, due, Routine); w == 0 {
						admitted++
						delete(next, k)
					} else {
						next[k] = now.Add(w)
					}
				}
			}
			if quietAtOnce != tc.quietAtOnce {
				t.Errorf("the quiet namespace got %d of its 10 at once, want %d", quietAtOnce, tc.quietAtOnce)
			}
			if admitted < tc.floodAtLeast {
				t.Errorf("the backlog got %d in 10 s at 20/s, want at least %d", admitted, tc.floodAtLeast)
			}
		})
	}
}

// BenchmarkAdmit is one ask among 30,000 remembered waiters: all in one
// namespace (one tenant's flood; at most MaxTenantWaiters are kept), and
// spread over 10,000 tenants (3 each).
func BenchmarkAdmit(b *testing.B) {
	for _, bc := range []struct {
		name    string
		tenants int
	}{{"30000-waiters-one-namespace", 1}, {"30000-waiters-10000-namespaces", 10000}} {
		b.Run(bc.name, func(b *testing.B) {
			clk := clocktesting.NewFakePassiveClock(t0)
			bg := mustNew(b, Options{Rate: 1e-9, Burst: 1, Clock: clk, MaxTenantWaiters: 30000})
			bg.Admit("first", Tenant{Cluster: "c", Namespace: "n"}, t0, Urgent) // takes the only token
			tenant := func(i int) Tenant {
				return Tenant{Cluster: fmt.Sprintf("cluster-%d", i%bc.tenants/10), Namespace: fmt.Sprintf("ns-%d", i%bc.tenants)}
			}
			for i := range 30000 {
				bg.Admit(fmt.Sprintf("w-%d", i), tenant(i), t0.Add(time.Duration(i)*time.Second), Routine)
			}
			if n := bg.Waiting(); n != 30000 {
				b.Fatalf("%d waiting, want 30000", n)
			}
			b.ResetTimer()
			for i := range b.N {
				k := i % 30000
				bg.Admit(fmt.Sprintf("w-%d", k), tenant(k), t0.Add(time.Duration(k)*time.Second), Routine)
			}
		})
	}
}

// mustNew is New for a test's valid options.
func mustNew(tb testing.TB, opts Options) *Budget {
	tb.Helper()
	b, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
