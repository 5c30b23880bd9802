package budget

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/certhub/certhub/internal/fence"
)

const (
	// DefaultReserve is the hub's --issuance-reserve.
	DefaultReserve = 0.5
	// MaxWait bounds the wait Admit returns, so waiters ask again and their
	// order is refreshed.
	MaxWait = 10 * time.Second
	// MaxOverflowWait bounds the wait of a waiter its tenant's full list
	// leaves out (Options.MaxTenantWaiters).
	MaxOverflowWait = 5 * time.Minute
	// StaleAfter forgets a waiter that has not asked for this long.
	StaleAfter = 3 * MaxWait
	// minWait is the shortest wait Admit returns.
	minWait = 50 * time.Millisecond
)

// Options configure a Budget.
type Options struct {
	// Rate is issuances per second for the whole hub; 0 admits everything.
	Rate float64
	// Burst is how many tokens the bucket starts with, and at least how many
	// may accumulate (at most a second's worth of the replica's rate, if more).
	// Defaults to 1.
	Burst float64
	// Fence is this replica's fence: when it is a fence.Sharer, the replica
	// takes its Share of Rate (in [0, 1]), so the replicas together keep
	// the hub-wide rate. Nil, or not a Sharer: all of Rate.
	Fence fence.Fence
	// Weight returns a cluster's weight (WeightLabel) for tenants that
	// bring none; nil: every cluster weighs 1.
	Weight func(cluster string) float64
	// Reserve is the fraction of the bucket's capacity (the larger of Burst
	// and a second of the rate) kept for tenants with nothing else waiting:
	// a tenant with a backlog takes only the tokens above it, so a quiet
	// tenant's first few issuances are admitted at once instead of queued
	// behind the backlog. The rate over time is the same (the bucket
	// refills the reserve, then the backlog takes every new token). 0: no
	// reserve; at most 0.9.
	Reserve float64
	// MaxTenantWaiters is how many waiters are remembered per tenant; a
	// waiter of a tenant that has this many, all served before it, is told
	// to ask again once they could have been served (overflowWait).
	// Defaults to DefaultMaxTenantWaiters.
	MaxTenantWaiters int
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
}

// Budget is one replica's token bucket with a fair waiting room: clusters
// share it by weight, a cluster's namespaces equally, and a namespace's
// waiters go nearest due first (Fairness).
type Budget struct {
	opts   Options
	mu     sync.Mutex
	tokens float64
	last   time.Time
	room   *room
	fair   Fairness
}

// Lane is how pressing an ask is. Every Urgent waiter is served before
// any Routine one; within a lane, tenants share fairly. A Routine waiter
// whose due time has passed is served as Urgent, so no flood of urgent
// asks (a tenant can always make its own urgent, by deleting its Secrets)
// holds another's renewals past their due time.
type Lane int

const (
	// Routine is a certificate that still serves (a renewal, a spec change).
	Routine Lane = iota
	// Urgent is one with nothing valid served — the Secret missing, its
	// certificate expired or unusable (a new or replacement cluster, a
	// restore, a revocation).
	Urgent
)

// New returns a Budget; its bucket starts full. Rate 0 admits everything;
// a negative or non-finite Rate is refused.
func New(opts Options) (*Budget, error) {
	if opts.Rate < 0 || math.IsNaN(opts.Rate) || math.IsInf(opts.Rate, 0) {
		return nil, fmt.Errorf("budget: Rate %v must be a finite number, 0 or more", opts.Rate)
	}
	if opts.Burst <= 0 {
		opts.Burst = 1
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxTenantWaiters <= 0 {
		opts.MaxTenantWaiters = DefaultMaxTenantWaiters
	}
	b := &Budget{opts: opts, tokens: opts.Burst, last: opts.Clock.Now()}
	b.room = newRoom(opts.MaxTenantWaiters, &b.fair)
	return b, nil
}

// rate is this replica's rate now.
func (b *Budget) rate() float64 {
	share := 1.0
	if s, ok := b.opts.Fence.(fence.Sharer); ok {
		share = min(max(s.Share(), 0), 1)
	}
	return b.opts.Rate * share
}

// Admit asks for one issuance of key, for tenant, which must be done by
// due, in lane. It returns 0 when admitted (a token is taken), else how
// long to wait before asking again.
func (b *Budget) Admit(key string, tenant Tenant, due time.Time, lane Lane) time.Duration {
	if b.opts.Rate <= 0 {
		return 0
	}
	if tenant.Weight == 0 && b.opts.Weight != nil {
		tenant.Weight = b.opts.Weight(tenant.Cluster)
	}
	now := b.opts.Clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	rate := b.rate()
	if el := now.Sub(b.last).Seconds(); el > 0 {
		// Up to a second's worth accrues: a waiter's retry comes back a
		// little late (queue, workers), and its token must still be there.
		b.tokens = min(b.tokens+el*rate, max(b.opts.Burst, rate))
	}
	b.last = now
	b.room.expire(now, key)
	e, ok := b.room.put(key, tenant, due, lane, now)
	if !ok {
		return b.overflowWait(tenant, due, now, rate)
	}
	// A tenant with nothing else waiting may take the reserve, behind the
	// other such tenants only.
	quiet := e.tenant.len() == 1
	usable := b.tokens - b.reserve(rate)
	if quiet {
		usable = b.tokens
	}
	// Past this many ahead, the wait is MaxWait whatever the count.
	limit := int(min(max(usable, 0)+rate*MaxWait.Seconds()+1, 1<<30))
	ahead := b.room.ahead(e, quiet, limit)
	if usable >= float64(ahead+1) {
		b.tokens--
		b.room.served(e)
		return 0
	}
	if rate <= 0 {
		return MaxWait
	}
	need := float64(ahead+1) - usable
	wait := time.Duration(need / rate * float64(time.Second))
	if until := due.Sub(now); until > 0 {
		wait = min(wait, until) // ask again when due: the order may have changed
	}
	return min(max(wait, minWait), MaxWait)
}

// overflowWait is the wait of a waiter its tenant's full list left out:
// every waiter of that list goes first, so it cannot be admitted before
// they are served at the whole rate — it asks again then (at least after
// MaxWait, at most after MaxOverflowWait, and by its due time: a waiter
// due sooner than the list's last takes its place). Tens of thousands of
// a tenant's Certificates thus ask a few times an hour, not every MaxWait.
func (b *Budget) overflowWait(tenant Tenant, due, now time.Time, rate float64) time.Duration {
	if rate <= 0 {
		return MaxWait
	}
	ahead := b.room.tenants[keyOf(tenant)].len()
	wait := min(time.Duration(float64(ahead)/rate*float64(time.Second)), MaxOverflowWait)
	if until := due.Sub(now); until > 0 {
		wait = min(wait, until)
	}
	return max(wait, MaxWait)
}

// reserve is how many tokens a tenant with a backlog leaves in the bucket:
// the Reserve fraction of its capacity, but never so many that less than
// one token is left to take (at a low rate — a replica's share of a few
// per second — a backlog would otherwise never be admitted).
func (b *Budget) reserve(rate float64) float64 {
	capacity := max(b.opts.Burst, rate)
	return max(min(min(max(b.opts.Reserve, 0), 0.9)*capacity, capacity-1), 0)
}

// tenantKey is a tenant without its weight.
type tenantKey struct{ cluster, namespace string }

func keyOf(t Tenant) tenantKey { return tenantKey{t.Cluster, t.Namespace} }

// String is the tenant's key in Fairness.Finish.
func (k tenantKey) String() string { return k.cluster + "/" + k.namespace }

// tenantKeyOf reads a String back (a namespace holds no "/"; a cluster name may).
func tenantKeyOf(s string) tenantKey {
	i := strings.LastIndex(s, "/")
	if i < 0 {
		return tenantKey{cluster: s}
	}
	return tenantKey{s[:i], s[i+1:]}
}

// Forget drops key from the waiting room (it no longer needs an issuance).
func (b *Budget) Forget(key string) {
	b.mu.Lock()
	if e, ok := b.room.byKey[key]; ok {
		b.room.forget(e)
	}
	b.mu.Unlock()
}

// Waiting is how many keys wait.
func (b *Budget) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.room.byKey)
}
