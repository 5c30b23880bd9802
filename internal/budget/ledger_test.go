package budget

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

var (
	key      = types.NamespacedName{Namespace: "certhub", Name: "budget"}
	perHour3 = Limit{Capacity: 3, Period: time.Hour} // one token per 20 minutes
	orders   = Draw{Bucket: "orders", Limit: perHour3}
)

func newTestLedger(t *testing.T) (*Ledger, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	c := fake.NewClientBuilder().Build()
	return NewLedger(c, c, key, clk), clk
}

func TestLedger(t *testing.T) {
	ctx := context.Background()
	type step struct {
		advance time.Duration
		key     string
		due     time.Duration // from now; 0 means in a week
		draws   []Draw
		pause   time.Duration // instead of Take: pause orders for this long
		give    bool          // instead of Take: give a token back to draws
		spend   bool          // instead of Take: spend a token of draws (a failure happened)
		// want
		admitted bool
		refused  string
		wait     time.Duration // when refused, at least this long
	}
	other := Draw{Bucket: "set:abc", Limit: Limit{Capacity: 1, Period: time.Hour}}
	failures := Draw{Bucket: "authz-failures:a", Limit: Limit{Capacity: 2, Period: time.Hour}, Check: true}
	week := 7 * 24 * time.Hour
	cases := []struct {
		name string
		// stored, when set, is the ledger's JSON stored before the first step.
		stored func(now time.Time) string
		steps  []step
	}{
		{name: "a full bucket admits its capacity, then says when the next token comes", steps: []step{
			{key: "a", draws: []Draw{orders}, admitted: true},
			{key: "b", draws: []Draw{orders}, admitted: true},
			{key: "c", draws: []Draw{orders}, admitted: true},
			{key: "d", draws: []Draw{orders}, refused: "orders", wait: 20 * time.Minute},
			{advance: 20 * time.Minute, key: "d", draws: []Draw{orders}, admitted: true},
		}},
		{name: "all or none: an empty bucket leaves the others untouched", steps: []step{
			{key: "a", draws: []Draw{orders, other}, admitted: true},
			{key: "b", draws: []Draw{orders, other}, refused: "set:abc", wait: time.Hour},
			{key: "c", draws: []Draw{orders}, admitted: true},
			{key: "d", draws: []Draw{orders}, admitted: true},
			{key: "e", draws: []Draw{orders}, refused: "orders"},
		}},
		{name: "the nearest due goes first", steps: []step{
			{key: "a", draws: []Draw{orders}, admitted: true},
			{key: "b", draws: []Draw{orders}, admitted: true},
			{key: "c", draws: []Draw{orders}, admitted: true},
			{key: "late", due: 2 * week, draws: []Draw{orders}, refused: "orders"},
			{key: "soon", due: week, draws: []Draw{orders}, refused: "orders"},
			{advance: 20 * time.Minute, key: "late", due: 2 * week, draws: []Draw{orders}, refused: "orders"}, // one token, "soon" is ahead
			{key: "soon", due: week, draws: []Draw{orders}, admitted: true},
			{advance: 20 * time.Minute, key: "late", due: 2 * week, draws: []Draw{orders}, admitted: true},
		}},
		{name: "an overdue caller goes first in its namespace", steps: []step{
			{key: "a", draws: []Draw{orders}, admitted: true},
			{key: "b", draws: []Draw{orders}, admitted: true},
			{key: "c", draws: []Draw{orders}, admitted: true},
			{key: "later", due: week, draws: []Draw{orders}, refused: "orders"},
			{advance: 20 * time.Minute, key: "overdue", due: -time.Second, draws: []Draw{orders}, admitted: true},
			{key: "later", due: week, draws: []Draw{orders}, refused: "orders"},
		}},
		{name: "a waiter that stops asking is forgotten after twice its wait and StaleAfter", steps: []step{
			{key: "a", draws: []Draw{orders}, admitted: true},
			{key: "b", draws: []Draw{orders}, admitted: true},
			{key: "c", draws: []Draw{orders}, admitted: true},
			{key: "gone", due: time.Hour, draws: []Draw{orders}, refused: "orders"},
			{advance: 20 * time.Minute, key: "late", due: 2 * week, draws: []Draw{orders}, refused: "orders"}, // "gone" is still expected back
			{advance: 20*time.Minute + StaleAfter + time.Second, key: "late", due: 2 * week, draws: []Draw{orders}, admitted: true},
		}},
		{name: "a pause (429 Retry-After) stops the bucket for everyone, full or not", steps: []step{
			{pause: 10 * time.Minute},
			{key: "a", draws: []Draw{orders}, refused: "orders", wait: 10 * time.Minute},
			{advance: 10 * time.Minute, key: "a", draws: []Draw{orders}, admitted: true},
		}},
		{name: "a checked bucket must hold a token and gives none; refused, nothing is drawn", steps: []step{
			{key: "a", draws: []Draw{orders, failures}, admitted: true},
			{key: "b", draws: []Draw{orders, failures}, admitted: true},
			{spend: true, draws: []Draw{failures}},
			{spend: true, draws: []Draw{failures}},
			{key: "c", draws: []Draw{orders, failures}, refused: "authz-failures:a", wait: 30 * time.Minute},
			{key: "d", draws: []Draw{orders}, admitted: true},
			{key: "e", draws: []Draw{orders}, refused: "orders"},
		}},
		{name: "a token given back is there again, never above capacity", steps: []step{
			{key: "a", draws: []Draw{orders}, admitted: true},
			{give: true, draws: []Draw{orders}},
			{give: true, draws: []Draw{orders}},
			{key: "b", draws: []Draw{orders}, admitted: true},
			{key: "c", draws: []Draw{orders}, admitted: true},
			{key: "d", draws: []Draw{orders}, admitted: true},
			{key: "e", draws: []Draw{orders}, refused: "orders"},
		}},
		{name: "an unreadable ledger is taken as emptied now, never as full", stored: func(time.Time) string { return "{not json" }, steps: []step{
			{key: "a", draws: []Draw{orders}, refused: "orders", wait: 20 * time.Minute},
			{advance: 20 * time.Minute, key: "a", draws: []Draw{orders}, admitted: true},
			{key: "b", draws: []Draw{orders}, refused: "orders"},
		}},
		{name: "a ledger rebuilt at since refills from empty since then", stored: func(now time.Time) string {
			return `{"since":"` + now.Add(-40*time.Minute).Format(time.RFC3339) + `"}`
		}, steps: []step{
			{key: "a", draws: []Draw{orders}, admitted: true}, // 40 minutes refilled 2 of 3
			{key: "b", draws: []Draw{orders}, admitted: true},
			{key: "c", draws: []Draw{orders}, refused: "orders", wait: 20 * time.Minute},
			{advance: 3 * time.Hour, key: "c", draws: []Draw{orders, other}, admitted: true}, // a Period on: as remembered, or full
			{key: "d", draws: []Draw{other}, refused: "set:abc"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, clk := newTestLedger(t)
			if tc.stored != nil {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: map[string]string{LedgerKey: tc.stored(clk.Now())}}
				if err := l.c.Create(ctx, cm); err != nil {
					t.Fatal(err)
				}
			}
			for i, s := range tc.steps {
				clk.Step(s.advance)
				switch {
				case s.pause > 0:
					if err := l.Pause(ctx, orders, clk.Now().Add(s.pause)); err != nil {
						t.Fatal(err)
					}
					continue
				case s.give:
					if err := l.Give(ctx, s.draws); err != nil {
						t.Fatal(err)
					}
					continue
				case s.spend:
					if err := l.Spend(ctx, s.draws); err != nil {
						t.Fatal(err)
					}
					continue
				}
				due := s.due
				if due == 0 {
					due = week
				}
				wait, refused, _, err := l.Take(ctx, s.key, Tenant{Cluster: "east", Namespace: "shop"}, clk.Now().Add(due), s.draws)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if s.admitted != (wait == 0) || refused != s.refused {
					t.Fatalf("step %d (%s): wait %s refused %q; want admitted %v refused %q", i, s.key, wait, refused, s.admitted, s.refused)
				}
				if !s.admitted && wait < s.wait {
					t.Errorf("step %d (%s): wait %s, want at least %s", i, s.key, wait, s.wait)
				}
			}
		})
	}
}

// Replicas taking from one ledger at once never take more than it holds.
func TestLedgerIsSharedByConcurrentReplicas(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	c := fake.NewClientBuilder().Build()
	limit := Draw{Bucket: "orders", Limit: Limit{Capacity: 10, Period: 1000 * time.Hour}}
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for r := range 4 {
		l := NewLedger(c, c, key, clk) // one per replica
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				wait, _, _, err := l.Take(ctx, string(rune('a'+r))+string(rune('0'+i)), Tenant{Cluster: "east", Namespace: "shop"}, clk.Now().Add(-time.Second), []Draw{limit})
				if err != nil {
					t.Error(err)
					return
				}
				if wait == 0 {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if admitted != 10 {
		t.Errorf("4 replicas × 10 takes from a 10-token bucket admitted %d, want 10", admitted)
	}
	d, err := NewLedger(c, c, key, clk).Snapshot(ctx, func(string) (Limit, bool) { return limit.Limit, true })
	if err != nil || d.Buckets["orders"] == nil || d.Buckets["orders"].Tokens > 0.01 {
		t.Errorf("ledger %+v (%v), want the orders bucket empty", d, err)
	}
}

// A ledger started with its history unknown (a rebuilt hub whose account
// the CA already knows) admits nothing until a token has refilled, and
// StartUnknown never touches a ledger that exists.
func TestStartUnknown(t *testing.T) {
	ctx := context.Background()
	l, clk := newTestLedger(t)
	created, err := l.StartUnknown(ctx)
	if err != nil || !created {
		t.Fatalf("StartUnknown on no ledger: created %v, %v", created, err)
	}
	if wait, refused, _, err := l.Take(ctx, "a", Tenant{}, clk.Now().Add(time.Hour), []Draw{orders}); err != nil || refused != "orders" || wait < 19*time.Minute {
		t.Fatalf("right after: wait %s refused %q (%v), want orders refused for ~20m", wait, refused, err)
	}
	clk.Step(20 * time.Minute)
	if _, refused, _, err := l.Take(ctx, "a", Tenant{}, clk.Now().Add(time.Hour), []Draw{orders}); err != nil || refused != "" {
		t.Fatalf("a token later: refused %q (%v)", refused, err)
	}
	if created, err := l.StartUnknown(ctx); err != nil || created {
		t.Fatalf("StartUnknown on an existing ledger: created %v, %v", created, err)
	}
	if _, refused, _, err := l.Take(ctx, "b", Tenant{}, clk.Now().Add(time.Hour), []Draw{orders}); err != nil || refused != "orders" {
		t.Fatalf("the existing ledger was reset: refused %q (%v)", refused, err)
	}
}
