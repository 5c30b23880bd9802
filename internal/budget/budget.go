package budget

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/certhub/certhub/internal/fence"
)

const (
	// MaxWait bounds the wait Admit returns, so waiters ask again and their
	// order is refreshed.
	MaxWait = 10 * time.Second
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
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
}

// Budget is one replica's token bucket with an urgency-ordered waiting room.
type Budget struct {
	opts    Options
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	waiting map[string]waiter
}

type waiter struct {
	due, seen time.Time
}

// New returns a Budget; its bucket starts full.
func New(opts Options) *Budget {
	if opts.Burst <= 0 {
		opts.Burst = 1
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Budget{opts: opts, tokens: opts.Burst, last: opts.Clock.Now(), waiting: map[string]waiter{}}
}

// rate is this replica's rate now.
func (b *Budget) rate() float64 {
	share := 1.0
	if s, ok := b.opts.Fence.(fence.Sharer); ok {
		share = min(max(s.Share(), 0), 1)
	}
	return b.opts.Rate * share
}

// Admit asks for one issuance of key, which must be done by due. It
// returns 0 when admitted (a token is taken), else how long to wait before
// asking again.
func (b *Budget) Admit(key string, due time.Time) time.Duration {
	if b.opts.Rate <= 0 {
		return 0
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
	ahead := 0 // waiters more urgent than key
	for k, w := range b.waiting {
		switch {
		case k == key:
		case now.Sub(w.seen) > StaleAfter:
			delete(b.waiting, k)
		case w.due.Before(due) || (w.due.Equal(due) && k < key):
			ahead++
		}
	}
	overdue := !due.After(now)
	if overdue || (ahead == 0 && b.tokens >= 1) || (ahead > 0 && b.tokens >= float64(ahead+1)) {
		b.tokens-- // overdue: may go negative, and the others wait for it to recover
		delete(b.waiting, key)
		return 0
	}
	b.waiting[key] = waiter{due: due, seen: now}
	if rate <= 0 {
		return MaxWait
	}
	need := float64(ahead+1) - b.tokens
	wait := time.Duration(need / rate * float64(time.Second))
	return min(max(wait, minWait), MaxWait, due.Sub(now))
}

// Forget drops key from the waiting room (it no longer needs an issuance).
func (b *Budget) Forget(key string) {
	b.mu.Lock()
	delete(b.waiting, key)
	b.mu.Unlock()
}

// Waiting is how many keys wait.
func (b *Budget) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiting)
}
