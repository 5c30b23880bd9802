package budget

import (
	"container/list"
	"math"
	"slices"
	"time"

	"github.com/google/btree"
)

// DefaultMaxTenantWaiters is how many waiters a Budget remembers per tenant
// (Options.MaxTenantWaiters). A tenant's waiter past that many cannot be
// admitted before the ones it has ahead: at the rates a hub serves (tens per
// second) they take longer than MaxWait, so the waiter is told to ask again
// then, not remembered. It bounds the work one tenant's backlog costs every
// Admit (a sorted insert into at most this many) and the memory it holds.
const DefaultMaxTenantWaiters = 1024

// entry is one remembered waiter.
type entry struct {
	key       string
	tenant    *tenantQueue
	due, seen time.Time
	// lane is the list it is in: a Routine waiter moves to Urgent when its
	// due time passes (Lane).
	lane Lane
	aged *list.Element // in room.aged
}

// before orders a tenant's waiters of one lane: nearest due first.
func (e *entry) before(o *entry) bool {
	if c := e.due.Compare(o.due); c != 0 {
		return c < 0
	}
	return e.key < o.key
}

// tenantQueue is one tenant's waiters, by lane, each lane nearest due first.
type tenantQueue struct {
	id     tenantKey
	weight float64
	lanes  [2][]*entry // indexed by Lane
	tag    float64     // its finish tag when last indexed (room)
}

func (t *tenantQueue) len() int { return len(t.lanes[Routine]) + len(t.lanes[Urgent]) }

// index is where e is, or would go, in its lane.
func (t *tenantQueue) index(e *entry) int {
	i, _ := slices.BinarySearchFunc(t.lanes[e.lane], e, func(a, b *entry) int {
		if a.before(b) {
			return -1
		}
		if b.before(a) {
			return 1
		}
		return 0
	})
	return i
}

func (t *tenantQueue) insert(e *entry) {
	t.lanes[e.lane] = slices.Insert(t.lanes[e.lane], t.index(e), e)
}

func (t *tenantQueue) remove(e *entry) {
	if i := t.index(e); i < len(t.lanes[e.lane]) && t.lanes[e.lane][i] == e {
		t.lanes[e.lane] = slices.Delete(t.lanes[e.lane], i, i+1)
	}
}

// promote moves the Routine waiters whose due time has passed to Urgent.
func (t *tenantQueue) promote(now time.Time) {
	for len(t.lanes[Routine]) > 0 && !now.Before(t.lanes[Routine][0].due) {
		e := t.lanes[Routine][0]
		t.lanes[Routine] = t.lanes[Routine][1:]
		e.lane = Urgent
		t.insert(e)
	}
}

// last is the waiter this tenant would serve last.
func (t *tenantQueue) last() *entry {
	for _, l := range []Lane{Routine, Urgent} {
		if n := len(t.lanes[l]); n > 0 {
			return t.lanes[l][n-1]
		}
	}
	return nil
}

// room is a Budget's waiting room, indexed so that an ask costs
// O(log n): a binary search and a bounded insert in its tenant's queue,
// and a walk over only the tenants it counts as ahead, in start-tag order
// (one B-tree per lane of the tenants with waiters in it, one of those
// with a single waiter), stopped once enough are ahead that it cannot be
// admitted within MaxWait.
type room struct {
	byKey    map[string]*entry
	tenants  map[tenantKey]*tenantQueue
	clusters map[string]int // waiting namespaces per cluster
	aged     list.List      // entries, least recently seen first
	max      int            // waiters per tenant
	fair     *Fairness
	// lanes index the tenants with waiters in a lane by start tag; singles
	// those whose only waiter is in it.
	lanes, singles [2]*btree.BTreeG[*tenantQueue]
	urgent         int // waiters in the Urgent lane
}

// byTag orders tenants by their indexed tag, then name: the order in which
// they start, equal starts going first in name order.
func byTag(a, b *tenantQueue) bool {
	if a.tag != b.tag {
		return a.tag < b.tag
	}
	if a.id.cluster != b.id.cluster {
		return a.id.cluster < b.id.cluster
	}
	return a.id.namespace < b.id.namespace
}

func newRoom(maxPerTenant int, f *Fairness) *room {
	r := &room{byKey: map[string]*entry{}, tenants: map[tenantKey]*tenantQueue{}, clusters: map[string]int{}, max: maxPerTenant, fair: f}
	for l := range r.lanes {
		r.lanes[l], r.singles[l] = btree.NewG(16, byTag), btree.NewG(16, byTag)
	}
	return r
}

// change runs mutate on t's queue with t out of the indexes, then puts it
// back under its tag, and forgets t once it has no waiters.
func (r *room) change(t *tenantQueue, mutate func()) {
	for l := range r.lanes {
		r.lanes[l].Delete(t)
		r.singles[l].Delete(t)
		if Lane(l) == Urgent {
			r.urgent -= len(t.lanes[l])
		}
	}
	mutate()
	r.urgent += len(t.lanes[Urgent])
	if t.len() == 0 {
		delete(r.tenants, t.id)
		if r.clusters[t.id.cluster]--; r.clusters[t.id.cluster] <= 0 {
			delete(r.clusters, t.id.cluster)
		}
		return
	}
	t.tag = r.fair.tagOf(t.id)
	for l := range r.lanes {
		if len(t.lanes[l]) > 0 {
			r.lanes[l].ReplaceOrInsert(t)
			if t.len() == 1 {
				r.singles[l].ReplaceOrInsert(t)
			}
		}
	}
}

// forget drops e.
func (r *room) forget(e *entry) {
	r.change(e.tenant, func() { e.tenant.remove(e) })
	delete(r.byKey, e.key)
	r.aged.Remove(e.aged)
}

// expire forgets the waiters, but keep, not seen for StaleAfter.
func (r *room) expire(now time.Time, keep string) {
	for el := r.aged.Front(); el != nil; {
		e, _ := el.Value.(*entry) // the list holds only entries
		el = el.Next()
		if now.Sub(e.seen) <= StaleAfter {
			return
		}
		if e.key != keep {
			r.forget(e)
		}
	}
}

// put remembers key's ask and returns its entry; false when its tenant
// already has its maximum of waiters, all served before it. Its tenant's
// Routine waiters whose due time has passed move to Urgent (a tenant's
// waiters ask at least every MaxWait, so no lane is older than that).
func (r *room) put(key string, tenant Tenant, due time.Time, lane Lane, now time.Time) (*entry, bool) {
	id := keyOf(tenant)
	if e, ok := r.byKey[key]; ok {
		if e.tenant.id == id {
			r.change(e.tenant, func() {
				e.tenant.remove(e)
				e.due, e.lane, e.seen = due, laneOf(lane, due, now), now
				e.tenant.weight = tenant.weight()
				e.tenant.insert(e)
				e.tenant.promote(now)
			})
			r.aged.MoveToBack(e.aged)
			return e, true
		}
		r.forget(e)
	}
	e := &entry{key: key, due: due, seen: now, lane: laneOf(lane, due, now)}
	if t := r.tenants[id]; t != nil && t.len() >= r.max {
		last := t.last()
		if last.lane > e.lane || (last.lane == e.lane && last.before(e)) {
			return nil, false
		}
		r.forget(last)
	}
	t := r.tenants[id]
	if t == nil {
		t = &tenantQueue{id: id}
		r.tenants[id] = t
		r.clusters[id.cluster]++
	}
	e.tenant = t
	r.change(t, func() {
		t.weight = tenant.weight()
		t.insert(e)
		t.promote(now)
	})
	e.aged = r.aged.PushBack(e)
	r.byKey[key] = e
	return e, true
}

func laneOf(lane Lane, due, now time.Time) Lane {
	if lane == Routine && !now.Before(due) {
		return Urgent
	}
	return lane
}

// cost is how far one issuance moves a namespace of t's cluster in virtual
// time: its cluster's waiting namespaces share the cluster's weight.
func (r *room) cost(t *tenantQueue) float64 {
	return float64(max(r.clusters[t.id.cluster], 1)) / t.weight
}

// ahead counts the waiters served before e, up to limit: those of a more
// pressing lane, then those of e's lane that start-time fair queuing
// (Fairness) serves first. A tenant's waiters of a lane start one cost
// apart from its tag, nearest due first, so each tenant's count is
// arithmetic on its tag and its lane's length; equal starts go in the
// index's order. Only the tenants that start before e are walked, and each
// of them counts, so the walk ends within limit tenants. With quiet (e's
// tenant has nothing else waiting), only the waiters of other such tenants
// are counted.
func (r *room) ahead(e *entry, quiet bool, limit int) int {
	own, index := e.tenant, r.lanes[e.lane]
	n := 0
	if quiet {
		index = r.singles[e.lane]
		if e.lane == Routine {
			n += r.singles[Urgent].Len()
		}
	} else {
		n += own.index(e)
		if e.lane == Routine {
			n += r.urgent
		}
	}
	v := r.fair.Virtual
	mine := max(v, own.tag) + float64(own.index(e))*r.cost(own)
	passed := false
	index.Ascend(func(t *tenantQueue) bool {
		if t == own {
			passed = true
			return true
		}
		start := max(v, t.tag)
		if start > mine || (passed && start == mine) || n >= limit {
			return false
		}
		n += startsBefore(start, r.cost(t), mine, len(t.lanes[e.lane]), !passed)
		return true
	})
	return n
}

// startsBefore is how many of n waiters, starting at start one cost apart,
// go before a waiter starting at mine; with first, those starting with it
// too. The count is computed, then checked against the comparison itself
// (a float's rounding must not move a waiter across a tie).
func startsBefore(start, cost, mine float64, n int, first bool) int {
	before := func(j int) bool {
		s := start + float64(j)*cost
		return s < mine || (s == mine && first)
	}
	k := int(min(max(math.Ceil((mine-start)/cost), 0), float64(n)))
	for k > 0 && !before(k-1) {
		k--
	}
	for k < n && before(k) {
		k++
	}
	return k
}

// tagOf is the tag a tenant is indexed under: its finish tag, or 0 if it
// has none (it starts at Virtual).
func (f *Fairness) tagOf(id tenantKey) float64 { return f.Finish[id.String()] }

// startOf is a tenant's next start tag.
func (f *Fairness) startOf(id tenantKey) float64 { return max(f.Virtual, f.tagOf(id)) }

// serve records that a waiter of id took a token while the cluster had
// namespaces waiting (its own included): its tag moves one cost past where
// it started, and virtual time to that start. It returns the tenants whose
// tags compact dropped while ahead of Virtual.
func (f *Fairness) serve(id tenantKey, namespaces int, weight float64) []string {
	start := f.startOf(id)
	if f.Finish == nil {
		f.Finish = map[string]float64{}
	}
	f.Finish[id.String()] = start + float64(max(namespaces, 1))/weight
	f.Virtual = start
	return f.compact()
}

// served moves e's tenant in the indexes after serve.
func (r *room) served(e *entry) {
	t := e.tenant
	dropped := r.fair.serve(t.id, r.clusters[t.id.cluster], t.weight)
	r.forget(e)
	for _, id := range dropped {
		if t := r.tenants[tenantKeyOf(id)]; t != nil {
			r.change(t, func() {})
		}
	}
}
