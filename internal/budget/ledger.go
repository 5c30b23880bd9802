package budget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Limit is a token bucket: Capacity tokens, refilled continuously at
// Capacity per Period (Let's Encrypt's model: 300 new orders per 3 hours
// refill one every 36 s).
type Limit struct {
	Capacity float64
	Period   time.Duration
}

// rate is tokens per second.
func (l Limit) rate() float64 { return l.Capacity / l.Period.Seconds() }

// Draw asks for one token of a bucket.
type Draw struct {
	// Bucket names the bucket, e.g. "orders" or "domain:example.com".
	Bucket string
	Limit  Limit
	// Check only looks: the bucket must hold a token, none is taken (a
	// bucket that counts failures, drawn from by Spend when they happen).
	Check bool
}

// LedgerData is the state of a Ledger's ConfigMap key LedgerKey.
type LedgerData struct {
	Buckets map[string]*Bucket `json:"buckets"`
	// Waiting are the callers refused for want of tokens, by key: the
	// nearest due goes first.
	Waiting map[string]Waiter `json:"waiting,omitempty"`
}

// Bucket is one bucket's state.
type Bucket struct {
	Tokens float64   `json:"tokens"`
	Last   time.Time `json:"last"`
	// PausedUntil stops the bucket for everyone (a CA's 429 Retry-After).
	PausedUntil *time.Time `json:"pausedUntil,omitempty"`
}

// Waiter is a refused caller.
type Waiter struct {
	Due time.Time `json:"due"`
	// Expires is when it is forgotten unless it asks again: the wait it
	// was told plus StaleAfter.
	Expires time.Time `json:"expires"`
	// Buckets are the buckets that refused it (sorted).
	Buckets []string `json:"buckets"`
}

// LedgerKey is the ConfigMap key holding LedgerData.
const LedgerKey = "ledger.json"

// Ledger is a set of token buckets shared by every replica: its state is
// one ConfigMap in the hub, read from the API server and written with
// optimistic concurrency, so the replicas together never take more tokens
// than the buckets hold — no share is guessed.
//
// Contract: Take never blocks on the budget (only on the API server); it
// takes one token from each of the draws' buckets, all or none, and returns
// 0, or how long to wait and the bucket that refused. A caller refused is
// remembered (by key, with its due time) so that tokens go to the nearest
// due first across replicas (it holds back only the buckets that refused
// it); it must ask again within the wait it was told plus StaleAfter or is
// forgotten. A caller whose due time has passed is not held behind others.
type Ledger struct {
	c     client.Client
	r     client.Reader // the API server, not a cache: the decision needs the latest state
	key   client.ObjectKey
	clock clock.PassiveClock
}

// NewLedger returns the Ledger kept in ConfigMap key (created on first use).
func NewLedger(c client.Client, live client.Reader, key client.ObjectKey, clk clock.PassiveClock) *Ledger {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Ledger{c: c, r: live, key: key, clock: clk}
}

// ErrContended is returned when the ConfigMap kept changing under Take.
var ErrContended = errors.New("budget ledger: too many concurrent updates")

// Take takes one token from every draw's bucket, or none; see Ledger. It
// also returns the tokens left in the draws' buckets (those the ledger
// holds), so one read-modify-write serves the decision and the metrics.
func (l *Ledger) Take(ctx context.Context, key string, due time.Time, draws []Draw) (wait time.Duration, refused string, remaining map[string]float64, err error) {
	err = l.update(ctx, func(d *LedgerData, now time.Time) bool {
		wait, refused = take(d, now, key, due, draws)
		remaining = map[string]float64{}
		for _, dr := range draws {
			if b, ok := d.Buckets[dr.Bucket]; ok {
				remaining[dr.Bucket] = b.Tokens
			}
		}
		return true
	})
	return wait, refused, remaining, err
}

// Give returns one token to each named bucket (an order refused by the CA
// before it counted), capped at its capacity.
func (l *Ledger) Give(ctx context.Context, draws []Draw) error {
	return l.update(ctx, func(d *LedgerData, now time.Time) bool {
		for _, dr := range draws {
			b := bucket(d, dr, now)
			b.Tokens = math.Min(b.Tokens+1, dr.Limit.Capacity)
		}
		return true
	})
}

// Spend takes one token from each bucket whatever it holds (down to minus
// its capacity): what happened at the CA counts (an authorization failure).
func (l *Ledger) Spend(ctx context.Context, draws []Draw) error {
	return l.update(ctx, func(d *LedgerData, now time.Time) bool {
		for _, dr := range draws {
			b := bucket(d, dr, now)
			b.Tokens = math.Max(b.Tokens-1, -dr.Limit.Capacity)
		}
		return true
	})
}

// Pause stops bucket for everyone until until (a 429 with Retry-After).
func (l *Ledger) Pause(ctx context.Context, draw Draw, until time.Time) error {
	return l.update(ctx, func(d *LedgerData, now time.Time) bool {
		b := bucket(d, draw, now)
		if b.PausedUntil != nil && !b.PausedUntil.Before(until) {
			return false
		}
		u := until.UTC()
		b.PausedUntil = &u
		return true
	})
}

// Snapshot returns the ledger as it is now, each bucket refilled by its
// limit (limit reports none: as stored). For reports such as `certhub
// status`; decisions use Take.
func (l *Ledger) Snapshot(ctx context.Context, limit func(bucket string) (Limit, bool)) (*LedgerData, error) {
	d, _, err := l.read(ctx)
	if err != nil {
		return nil, err
	}
	now := l.clock.Now()
	for name, b := range d.Buckets {
		if lim, ok := limit(name); ok {
			refill(b, lim, now)
		}
	}
	return d, nil
}

// take is Take's decision on d, pure but for d.
func take(d *LedgerData, now time.Time, key string, due time.Time, draws []Draw) (time.Duration, string) {
	for k, w := range d.Waiting {
		if now.After(w.Expires) {
			delete(d.Waiting, k)
		}
	}
	overdue := !due.After(now)
	var worst time.Duration
	refused := ""
	var refusing []string
	for _, dr := range draws {
		if dr.Check {
			b, ok := d.Buckets[dr.Bucket] // an absent bucket is full: nothing to keep
			if !ok {
				continue
			}
			refill(b, dr.Limit, now)
			if b.Tokens < 1 {
				refusing = append(refusing, dr.Bucket)
				if w := time.Duration((1 - b.Tokens) / dr.Limit.rate() * float64(time.Second)); w > worst || refused == "" {
					worst, refused = w, dr.Bucket
				}
			}
			continue
		}
		b := bucket(d, dr, now)
		if b.PausedUntil != nil && now.Before(*b.PausedUntil) {
			refusing = append(refusing, dr.Bucket)
			if w := b.PausedUntil.Sub(now); w > worst || refused == "" {
				worst, refused = w, dr.Bucket
			}
			continue
		}
		need := 1.0
		if !overdue {
			need += float64(ahead(d, key, due, dr.Bucket))
		}
		if b.Tokens < need {
			refusing = append(refusing, dr.Bucket)
			w := time.Duration((need - b.Tokens) / dr.Limit.rate() * float64(time.Second))
			if w > worst || refused == "" {
				worst, refused = w, dr.Bucket
			}
		}
	}
	if refused != "" {
		sort.Strings(refusing)
		worst = max(worst, minWait)
		d.Waiting[key] = Waiter{Due: due.UTC(), Expires: now.Add(worst + StaleAfter).UTC(), Buckets: refusing}
		return worst, refused
	}
	for _, dr := range draws {
		if !dr.Check {
			d.Buckets[dr.Bucket].Tokens--
		}
	}
	delete(d.Waiting, key)
	return 0, ""
}

// ahead counts the waiters for bucket due before key.
func ahead(d *LedgerData, key string, due time.Time, bucket string) int {
	n := 0
	for k, w := range d.Waiting {
		if k == key || !contains(w.Buckets, bucket) {
			continue
		}
		if w.Due.Before(due) || (w.Due.Equal(due) && k < key) {
			n++
		}
	}
	return n
}

func contains(list []string, s string) bool {
	i := sort.SearchStrings(list, s)
	return i < len(list) && list[i] == s
}

// bucket returns draw's bucket in d, refilled to now (new buckets start full).
func bucket(d *LedgerData, draw Draw, now time.Time) *Bucket {
	b, ok := d.Buckets[draw.Bucket]
	if !ok {
		b = &Bucket{Tokens: draw.Limit.Capacity, Last: now.UTC()}
		d.Buckets[draw.Bucket] = b
	}
	refill(b, draw.Limit, now)
	return b
}

func refill(b *Bucket, lim Limit, now time.Time) {
	if el := now.Sub(b.Last).Seconds(); el > 0 {
		b.Tokens = math.Min(b.Tokens+el*lim.rate(), lim.Capacity)
		b.Last = now.UTC()
	}
}

// update applies mutate to the latest state and writes it, retrying on
// conflicts; mutate returns false when nothing changed.
func (l *Ledger) update(ctx context.Context, mutate func(*LedgerData, time.Time) bool) error {
	for range 20 {
		d, cm, err := l.read(ctx)
		if err != nil {
			return err
		}
		if !mutate(d, l.clock.Now()) {
			return nil
		}
		raw, err := json.Marshal(d)
		if err != nil {
			return err
		}
		if cm == nil {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: l.key.Namespace, Name: l.key.Name,
				Labels: map[string]string{"app.kubernetes.io/part-of": "certhub", "certhub.io/budget": "ledger"}},
				Data: map[string]string{LedgerKey: string(raw)}}
			err = l.c.Create(ctx, cm)
		} else {
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[LedgerKey] = string(raw)
			err = l.c.Update(ctx, cm) // carries the resourceVersion read: a concurrent write conflicts
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("failed to write budget ledger %s: %w", l.key, err)
		}
		return nil
	}
	return ErrContended
}

func (l *Ledger) read(ctx context.Context) (*LedgerData, *corev1.ConfigMap, error) {
	d := &LedgerData{Buckets: map[string]*Bucket{}, Waiting: map[string]Waiter{}}
	cm := &corev1.ConfigMap{}
	if err := l.r.Get(ctx, l.key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return d, nil, nil
		}
		return nil, nil, fmt.Errorf("failed to read budget ledger %s: %w", l.key, err)
	}
	if raw := cm.Data[LedgerKey]; raw != "" {
		if err := json.Unmarshal([]byte(raw), d); err != nil {
			// A ledger nobody can read would stop issuance: start again from full buckets.
			d = &LedgerData{}
		}
	}
	if d.Buckets == nil {
		d.Buckets = map[string]*Bucket{}
	}
	if d.Waiting == nil {
		d.Waiting = map[string]Waiter{}
	}
	return d, cm, nil
}
