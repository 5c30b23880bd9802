package budget

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
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

// LedgerData is the state of a Ledger's ConfigMap key LedgerKey. Its
// size is bounded whatever the number of names and tenants: full buckets
// are dropped (an absent bucket is full), at most MaxBuckets are kept, and
// at most MaxWaiters waiters, MaxWaitersPerTenant of each tenant, are
// remembered. Beyond MaxBuckets the fullest per-name buckets (a set or a
// domain used once or twice) are forgotten first: at worst such a name
// gets an order more than the CA allows, and the CA's 429 for it pauses
// that bucket alone (Pause). Account-wide buckets are never forgotten.
type LedgerData struct {
	Buckets map[string]*Bucket `json:"buckets"`
	// Limits are the limits of each kind of bucket, as last drawn with
	// (they refill the stored buckets).
	Limits map[string]Limit `json:"limits,omitempty"`
	// Waiting are the callers refused for want of tokens, by key: fair
	// queuing (Fairness) decides who goes first.
	Waiting map[string]Waiter `json:"waiting,omitempty"`
	// Since, when set, is when the ledger's memory begins: what was spent
	// before is unknown, so a bucket not stored is taken as emptied at
	// Since and refilled from then (full once its Period has passed), never
	// as full. Set when the stored ledger cannot be read; an operator
	// rebuilding a hub sets it by creating the ConfigMap with only
	// {"since": "<RFC 3339 time>"} (docs/operations.md).
	Since *time.Time `json:"since,omitempty"`
	Fairness
}

// Bounds of LedgerData (about 50 KiB of JSON at most).
const (
	MaxBuckets          = 256
	MaxWaiters          = 128
	MaxWaitersPerTenant = 4
)

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
	// Expires is when it is forgotten unless it asks again.
	Expires time.Time `json:"expires"`
	// Buckets are the buckets that refused it (sorted).
	Buckets []string `json:"buckets"`
	// Tenant is who asked.
	Tenant Tenant `json:"tenant,omitempty"`
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
// remembered (by key, with its tenant and due time) so that tokens are
// queued fairly across replicas (Fairness; it holds back only the buckets
// that refused it); it must ask again within twice the wait it was told
// plus StaleAfter or is forgotten. A refused caller's retry writes nothing
// unless its place changed or it is about to be forgotten.
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

// StartUnknown records, when no ledger exists, that what was spent before
// now is unknown: the ledger is created with Since = now, so every bucket
// starts empty and refills at its rate (full once its Period has passed).
// A hub that finds its ACME account already at the CA but keeps no ledger
// (rebuilt after a disaster) calls it: the CA still counts what the lost
// ledger held. It reports whether it created the ledger; an existing one
// is left as it is.
func (l *Ledger) StartUnknown(ctx context.Context) (bool, error) {
	if _, cm, err := l.read(ctx); err != nil || cm != nil {
		return false, err
	}
	since := l.clock.Now().UTC().Truncate(time.Second)
	raw, err := json.Marshal(LedgerData{Since: &since})
	if err != nil {
		return false, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: l.key.Namespace, Name: l.key.Name,
		Labels: map[string]string{"app.kubernetes.io/part-of": "certhub", hubapi.BudgetLabel: "ledger"}},
		Data: map[string]string{LedgerKey: string(raw)}}
	switch err := l.c.Create(ctx, cm); {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("failed to create budget ledger %s: %w", l.key, err)
	}
	return true, nil
}

// ErrContended is returned when the ConfigMap kept changing under Take.
var ErrContended = errors.New("budget ledger: too many concurrent updates")

// Take takes one token from every draw's bucket, or none; see Ledger. It
// also returns the tokens left in the draws' buckets (those the ledger
// holds), so one read-modify-write serves the decision and the metrics.
func (l *Ledger) Take(ctx context.Context, key string, tenant Tenant, due time.Time, draws []Draw) (wait time.Duration, refused string, remaining map[string]float64, err error) {
	err = l.update(ctx, func(d *LedgerData, now time.Time) bool {
		var changed bool
		wait, refused, changed = take(d, now, key, tenant, due, draws)
		remaining = map[string]float64{}
		for _, dr := range draws {
			if !dr.Check {
				remaining[dr.Bucket] = peek(d, dr, now)
			}
		}
		return changed
	})
	return wait, refused, remaining, err
}

// Give returns one token to each named bucket (an order refused by the CA
// before it counted), capped at its capacity.
func (l *Ledger) Give(ctx context.Context, draws []Draw) error {
	return l.update(ctx, func(d *LedgerData, now time.Time) bool {
		for _, dr := range draws {
			d.learn(dr)
			b := bucket(d, dr, now)
			b.Tokens = math.Min(b.Tokens+1, dr.Limit.Capacity)
		}
		compact(d, now)
		return true
	})
}

// Spend takes one token from each bucket whatever it holds (down to minus
// its capacity): what happened at the CA counts (an authorization failure).
func (l *Ledger) Spend(ctx context.Context, draws []Draw) error {
	return l.update(ctx, func(d *LedgerData, now time.Time) bool {
		for _, dr := range draws {
			d.learn(dr)
			b := bucket(d, dr, now)
			b.Tokens = math.Max(b.Tokens-1, -dr.Limit.Capacity)
		}
		compact(d, now)
		return true
	})
}

// Pause stops bucket for everyone until until (a 429 with Retry-After).
func (l *Ledger) Pause(ctx context.Context, draw Draw, until time.Time) error {
	return l.update(ctx, func(d *LedgerData, now time.Time) bool {
		if b, ok := d.Buckets[draw.Bucket]; ok && b.PausedUntil != nil && !b.PausedUntil.Before(until) {
			return false
		}
		d.learn(draw)
		u := until.UTC()
		bucket(d, draw, now).PausedUntil = &u
		compact(d, now)
		return true
	})
}

// Paused returns how long the longest pause (Pause) of the named buckets
// lasts from now; 0 when none is paused.
func (l *Ledger) Paused(ctx context.Context, buckets []string) (time.Duration, error) {
	d, _, err := l.read(ctx)
	if err != nil {
		return 0, err
	}
	now := l.clock.Now()
	var wait time.Duration
	for _, name := range buckets {
		if b, ok := d.Buckets[name]; ok && b.PausedUntil != nil && now.Before(*b.PausedUntil) {
			wait = max(wait, b.PausedUntil.Sub(now))
		}
	}
	return wait, nil
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

// take is Take's decision on d, pure but for d; changed reports whether d
// must be written.
func take(d *LedgerData, now time.Time, key string, tenant Tenant, due time.Time, draws []Draw) (time.Duration, string, bool) {
	for _, dr := range draws {
		if !dr.Check {
			d.learn(dr)
		}
	}
	var worst time.Duration
	refused := ""
	var refusing []string
	refuse := func(bucket string, w time.Duration) {
		refusing = append(refusing, bucket)
		if w > worst || refused == "" {
			worst, refused = w, bucket
		}
	}
	var order map[string]bool // the remembered waiters fair queuing serves before this caller (computed once, when needed)
	for _, dr := range draws {
		if dr.Check { // a bucket drawn from by Spend only: it must hold a token
			if tokens := peek(d, dr, now); tokens < 1 {
				refuse(dr.Bucket, time.Duration((1-tokens)/dr.Limit.rate()*float64(time.Second)))
			}
			continue
		}
		if b, ok := d.Buckets[dr.Bucket]; ok && b.PausedUntil != nil && now.Before(*b.PausedUntil) {
			refuse(dr.Bucket, b.PausedUntil.Sub(now))
			continue
		}
		tokens, need := peek(d, dr, now), 1.0
		if d.queuedFor(now, key, dr.Bucket) { // the queue ahead also sets the wait: waiters ask again about when their turn comes
			if order == nil {
				order = d.before(now, queued{key: key, tenant: tenant, due: due})
			}
			for k := range order {
				if slices.Contains(d.Waiting[k].Buckets, dr.Bucket) {
					need++
				}
			}
		}
		if tokens < need {
			refuse(dr.Bucket, time.Duration((need-tokens)/dr.Limit.rate()*float64(time.Second)))
		}
	}
	if refused != "" {
		sort.Strings(refusing)
		worst = max(worst, minWait)
		w := Waiter{Due: due.UTC(), Expires: now.Add(2*worst + StaleAfter).UTC(), Buckets: refusing, Tenant: tenant}
		if old, ok := d.Waiting[key]; ok && old.Due.Equal(w.Due) && old.Tenant == w.Tenant && slices.Equal(old.Buckets, w.Buckets) &&
			!old.Expires.Before(now.Add(worst+StaleAfter/2)) {
			return worst, refused, false // its place is kept: nothing to write
		}
		if !remembered(d, now, key, w) {
			return worst, refused, false // its tenant's nearest due are remembered: it ranks after them anyway
		}
		d.Waiting[key] = w
		d.trim(tenant)
		compact(d, now)
		return worst, refused, true
	}
	for _, dr := range draws {
		if !dr.Check {
			bucket(d, dr, now).Tokens--
		}
	}
	d.served(d.waiters(now), queued{key: key, tenant: tenant, due: due})
	delete(d.Waiting, key)
	compact(d, now)
	return 0, "", true
}

// remembered reports whether w would be among its tenant's
// MaxWaitersPerTenant nearest due (compact keeps those).
func remembered(d *LedgerData, now time.Time, key string, w Waiter) bool {
	n := 0
	for k, o := range d.Waiting {
		if k != key && now.Before(o.Expires) && o.Tenant.Cluster == w.Tenant.Cluster && o.Tenant.Namespace == w.Tenant.Namespace &&
			(o.Due.Before(w.Due) || (o.Due.Equal(w.Due) && k < key)) {
			n++
		}
	}
	return n < MaxWaitersPerTenant
}

// before is the set of remembered waiters that fair queuing serves before
// q (one order over every waiter of the ledger, whichever buckets refused
// them).
func (d *LedgerData) before(now time.Time, q queued) map[string]bool {
	ws := d.waiters(now)
	out := map[string]bool{}
	for _, k := range d.ahead(ws, q) {
		out[k] = true
	}
	return out
}

// queuedFor reports whether a waiter other than key waits for bucket.
func (d *LedgerData) queuedFor(now time.Time, key, bucket string) bool {
	for k, w := range d.Waiting {
		if k != key && now.Before(w.Expires) && slices.Contains(w.Buckets, bucket) {
			return true
		}
	}
	return false
}

// waiters are the waiters remembered now, as fair queuing sees them.
func (d *LedgerData) waiters(now time.Time) []queued {
	var ws []queued
	for k, w := range d.Waiting {
		if now.Before(w.Expires) {
			ws = append(ws, queued{key: k, tenant: w.Tenant, due: w.Due})
		}
	}
	return ws
}

// learn records the limit of draw's kind of bucket.
func (d *LedgerData) learn(draw Draw) { d.Limits[KindOf(draw.Bucket)] = draw.Limit }

// KindOf is a bucket's kind, the part of its name before ":":
// "domain:example.com" → "domain".
func KindOf(bucket string) string {
	kind, _, _ := strings.Cut(bucket, ":")
	return kind
}

// peek is the tokens draw's bucket holds now, without storing anything
// (a bucket not stored holds Unstored).
func peek(d *LedgerData, draw Draw, now time.Time) float64 {
	if b, ok := d.Buckets[draw.Bucket]; ok {
		refill(b, draw.Limit, now)
		return b.Tokens
	}
	return d.Unstored(draw.Limit, now)
}

// Unstored is what a bucket of lim that is not stored holds at now: full,
// or, within a Period of Since, what it refilled from empty since then.
func (d *LedgerData) Unstored(lim Limit, now time.Time) float64 {
	if d.Since == nil {
		return lim.Capacity
	}
	return math.Min(math.Max(now.Sub(*d.Since).Seconds(), 0)*lim.rate(), lim.Capacity)
}

// bucket returns draw's bucket in d, refilled to now, storing it if new.
func bucket(d *LedgerData, draw Draw, now time.Time) *Bucket {
	tokens := peek(d, draw, now)
	b, ok := d.Buckets[draw.Bucket]
	if !ok {
		b = &Bucket{Tokens: tokens, Last: now.UTC()}
		d.Buckets[draw.Bucket] = b
	}
	return b
}

func refill(b *Bucket, lim Limit, now time.Time) {
	if el := now.Sub(b.Last).Seconds(); el > 0 {
		b.Tokens = math.Min(b.Tokens+el*lim.rate(), lim.Capacity)
		b.Last = now.UTC()
	}
}

// compact bounds d (see LedgerData), cheaply unless it is over a bound:
// forgotten waiters go; over MaxBuckets, full buckets go and then the
// fullest per-name buckets (down to 7/8 of it, so that the next draws do
// not sort again); over MaxWaiters, the largest backlogs lose their least
// urgent waiters. A waiter not remembered loses no place it is owed:
// fair queuing ranks it after its tenant's remembered waiters, where it
// would be anyway.
func compact(d *LedgerData, now time.Time) {
	for k, w := range d.Waiting {
		if !now.Before(w.Expires) {
			delete(d.Waiting, k)
		}
	}
	if len(d.Buckets) > MaxBuckets {
		for name, b := range d.Buckets {
			lim, ok := d.Limits[KindOf(name)]
			if !ok {
				delete(d.Buckets, name) // a limit no longer drawn with
				continue
			}
			refill(b, lim, now)
			if b.PausedUntil != nil && !now.Before(*b.PausedUntil) {
				b.PausedUntil = nil
			}
			if b.PausedUntil == nil && b.Tokens >= d.Unstored(lim, now) { // dropped, it holds no less
				delete(d.Buckets, name)
			}
		}
		over := len(d.Buckets) - MaxBuckets*7/8 // room for the next ones: not a sweep per draw
		var names []string
		for name, b := range d.Buckets {
			if b.PausedUntil == nil && strings.Contains(name, ":") { // account-wide buckets stay
				names = append(names, name)
			}
		}
		fullness := func(name string) float64 { return d.Buckets[name].Tokens / d.Limits[KindOf(name)].Capacity }
		slices.SortFunc(names, func(a, b string) int {
			if c := cmp.Compare(fullness(b), fullness(a)); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		for _, name := range names[:max(0, min(over, len(names)))] {
			delete(d.Buckets, name)
		}
	}
	if len(d.Waiting) > MaxWaiters {
		type ns struct{ cluster, namespace string }
		count := map[ns]int{}
		for _, w := range d.Waiting {
			count[ns{w.Tenant.Cluster, w.Tenant.Namespace}]++
		}
		for len(d.Waiting) > MaxWaiters {
			victim := ""
			var vt ns
			for k, w := range d.Waiting { // the least urgent of the largest backlog
				t := ns{w.Tenant.Cluster, w.Tenant.Namespace}
				if victim == "" || count[t] > count[vt] || (count[t] == count[vt] && d.urgency(k, victim) > 0) {
					victim, vt = k, t
				}
			}
			delete(d.Waiting, victim)
			count[vt]--
		}
	}
}

// urgency orders waiters' keys nearest due first.
func (d *LedgerData) urgency(a, b string) int {
	if c := d.Waiting[a].Due.Compare(d.Waiting[b].Due); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

// trim keeps tenant's MaxWaitersPerTenant most urgent waiters.
func (d *LedgerData) trim(tenant Tenant) {
	var keys []string
	for k, w := range d.Waiting {
		if w.Tenant.Cluster == tenant.Cluster && w.Tenant.Namespace == tenant.Namespace {
			keys = append(keys, k)
		}
	}
	if len(keys) <= MaxWaitersPerTenant {
		return
	}
	slices.SortFunc(keys, d.urgency)
	for _, k := range keys[MaxWaitersPerTenant:] {
		delete(d.Waiting, k)
	}
}

func emptyLedger() *LedgerData {
	return &LedgerData{Buckets: map[string]*Bucket{}, Waiting: map[string]Waiter{}, Limits: map[string]Limit{}}
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
				Labels: map[string]string{"app.kubernetes.io/part-of": "certhub", hubapi.BudgetLabel: "ledger"}},
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
	d := emptyLedger()
	cm := &corev1.ConfigMap{}
	if err := l.r.Get(ctx, l.key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return d, nil, nil
		}
		return nil, nil, fmt.Errorf("failed to read budget ledger %s: %w", l.key, err)
	}
	if raw := cm.Data[LedgerKey]; raw != "" {
		if err := json.Unmarshal([]byte(raw), d); err != nil {
			// A ledger nobody can read would stop issuance; starting again
			// from full buckets would spend what the CA still counts. So
			// every bucket starts empty now and refills at its rate.
			since := l.clock.Now().UTC()
			d = &LedgerData{Since: &since}
		}
	}
	if d.Buckets == nil {
		d.Buckets = map[string]*Bucket{}
	}
	if d.Waiting == nil {
		d.Waiting = map[string]Waiter{}
	}
	if d.Limits == nil {
		d.Limits = map[string]Limit{}
	}
	return d, cm, nil
}
