package shard

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/fence"
)

var (
	_ mcmanager.Coordinator          = &Coordinator{}
	_ manager.Runnable               = &Coordinator{}
	_ manager.LeaderElectionRunnable = &Coordinator{}
)

// Coordinator decides which downstream clusters this replica engages. See the package doc.
type Coordinator struct {
	opts    Options
	log     logr.Logger
	leases  coordinationclient.LeaseInterface
	cs      kubernetes.Interface
	obs     *observer
	metrics *shardMetrics
	trigger chan struct{}
	ready   atomic.Bool

	mu         sync.Mutex // guards the fields below; never held across an API call
	awares     []multicluster.Aware
	clusters   map[multicluster.ClusterName]*clusterState // connected: handed over by the provider
	registered map[multicluster.ClusterName]bool          // valid registrations, connected or not
	known      uint64                                     // bumped on every change of clusters or registered
	fences     map[string]*fenceState                     // by fence key
	wanted     map[multicluster.ClusterName]role          // what this replica should be connected to
	onWanted   []func(multicluster.ClusterName)

	// Owned by the decision loop only.
	peerLease   *coordinationv1.Lease
	peerRenewed time.Time
	unownedFrom map[string]time.Time // fence key → when it was first seen without a live holder
	reported    map[multicluster.ClusterName]bool
	plan        plan      // the last assignment, recomputed when its inputs change
	takingOver  time.Time // since when an assigned fence has been waiting to be acquired; zero when none is
}

// role is why a replica holds a connection to a cluster.
type role int

const (
	roleNone    role = iota
	roleOwner        // assigned the cluster's fence: holding or acquiring it
	roleStandby      // next in line for it: kept warm, not written to
)

// plan is an assignment and the standby set it implies, with the inputs it
// was computed from.
type plan struct {
	inputs  string
	assign  map[string]string // fence key → peer ID
	standby map[multicluster.ClusterName]bool
}

type clusterState struct {
	cl        cluster.Cluster
	ctx       context.Context    // from the provider: the cluster's lifetime
	engCancel context.CancelFunc // non-nil while engaged with the awares
}

type fenceState struct {
	key, name   string
	held        bool
	lastRenew   time.Time
	transitions int32
	lease       *coordinationv1.Lease // as last written by us
	writes      int                   // downstream writes begun (BeginWrite) and not yet done
}

// New returns a Coordinator. Pass it to mcmanager.New with mcmanager.WithCoordinator.
func New(opts Options, log logr.Logger) (*Coordinator, error) {
	opts.defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	// Lease writes are never throttled on this side: a replica renews
	// fences/RenewInterval a second (67/s for 333 fences), and a client-side
	// limit (the hub client's 50/s) delayed renewals past RenewDeadline and
	// lost fences by the thousand. fenceWriters bounds what is in flight;
	// the hub API server's own priority and fairness protects it.
	cfg := rest.CopyConfig(opts.Config)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create hub clientset: %w", err)
	}
	return newCoordinator(opts, log, cs)
}

// newCoordinator builds a Coordinator on cs; opts must have defaults applied.
// Unit tests call it with a fake clientset and a fake clock.
func newCoordinator(opts Options, log logr.Logger, cs kubernetes.Interface) (*Coordinator, error) {
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Coordinator{
		opts:        opts,
		log:         log.WithName("shard").WithValues("replica", opts.Identity),
		cs:          cs,
		leases:      cs.CoordinationV1().Leases(opts.Namespace),
		obs:         newObserver(opts.MaxClockSkew),
		metrics:     m,
		trigger:     make(chan struct{}, 1),
		clusters:    map[multicluster.ClusterName]*clusterState{},
		registered:  map[multicluster.ClusterName]bool{},
		fences:      map[string]*fenceState{},
		wanted:      map[multicluster.ClusterName]role{},
		unownedFrom: map[string]time.Time{},
		reported:    map[multicluster.ClusterName]bool{},
	}, nil
}

// AddAware registers a component to engage for owned clusters.
func (c *Coordinator) AddAware(a multicluster.Aware) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.awares = append(c.awares, a)
}

// Runnable returns the Coordinator itself: its Start runs the decision loop.
func (c *Coordinator) Runnable() manager.Runnable { return c }

// NeedLeaderElection is false: every replica is active.
func (c *Coordinator) NeedLeaderElection() bool { return false }

// Ready reports whether the first membership snapshot has been taken; before
// that the replica owns nothing. Suitable for a readiness check.
func (c *Coordinator) Ready() bool { return c.ready.Load() }

// Engage records a cluster the provider made available. It never blocks and
// never engages directly: the decision loop engages owned clusters.
func (c *Coordinator) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st := &clusterState{cl: cl, ctx: ctx}
	c.mu.Lock()
	if old, ok := c.clusters[name]; ok && old.engCancel != nil {
		old.engCancel() // new connection data: re-engaged below with the new cluster
	}
	c.clusters[name] = st
	c.known++
	c.mu.Unlock()
	context.AfterFunc(ctx, func() { // no goroutine per cluster while it is engaged
		c.mu.Lock()
		if cur := c.clusters[name]; cur == st {
			if cur.engCancel != nil {
				cur.engCancel()
			}
			delete(c.clusters, name)
			c.known++
		}
		c.mu.Unlock()
		c.kick()
	})
	c.kick()
	return nil
}

// Register records a valid registration of cluster name, connected or not.
// Every replica registers the same set (they read the same cluster Secrets),
// and the assignment is computed over it, so a cluster nobody can reach
// still has an owner: the replica that holds its fence and keeps retrying
// the connection. Engage alone also makes a cluster known.
func (c *Coordinator) Register(name multicluster.ClusterName) {
	c.mu.Lock()
	if !c.registered[name] {
		c.registered[name] = true
		c.known++
	}
	c.mu.Unlock()
	c.kick()
}

// Unregister forgets a registration (its Secret is gone or invalid).
func (c *Coordinator) Unregister(name multicluster.ClusterName) {
	c.mu.Lock()
	if c.registered[name] {
		delete(c.registered, name)
		c.known++
	}
	c.mu.Unlock()
	c.kick()
}

// Wanted reports whether this replica should hold a connection to (and a
// cache of) cluster name now: it is assigned the cluster's fence — holding
// it or acquiring it — or keeps the cluster warm as a standby. False before
// the first membership snapshot.
func (c *Coordinator) Wanted(name multicluster.ClusterName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wanted[name] != roleNone
}

// OnWantedChanged registers fn, called from the decision loop with every
// cluster whose Wanted answer changed. fn must not block.
func (c *Coordinator) OnWantedChanged(fn func(multicluster.ClusterName)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onWanted = append(c.onWanted, fn)
}

// Owns reports whether this replica may write to cluster now, and the stamp
// to record on what it writes: "<replica>/<fence transition>", so a write by
// a stale owner is detectable after the fact. It is false as soon as the
// fence's renew deadline has passed, even before the decision loop notices.
func (c *Coordinator) Owns(name multicluster.ClusterName) (string, bool) {
	stamp, _, ok := c.OwnsUntil(name)
	return stamp, ok
}

// OwnsUntil is Owns with the instant ownership ends unless the fence is
// renewed meanwhile: its last renewal + RenewDeadline. A write given this
// deadline cannot complete after it, and RenewDeadline < LeaseDuration, so
// it completes before any other replica may take the fence over — the
// fence holds at write time, not only at check time.
func (c *Coordinator) OwnsUntil(name multicluster.ClusterName) (string, time.Time, bool) {
	now := c.opts.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.ownedLocked(name, now)
	if !ok {
		return "", time.Time{}, false
	}
	return c.opts.Identity + "/" + strconv.Itoa(int(f.transitions)), f.lastRenew.Add(c.opts.RenewDeadline), true
}

// BeginWrite is OwnsUntil for one downstream write, which the caller ends
// with done (idempotent). A graceful release of the fence waits for the
// writes begun under it (at most until their deadline) before clearing the
// holder, so the next owner never writes alongside a write still in flight.
func (c *Coordinator) BeginWrite(name multicluster.ClusterName) (stamp string, until time.Time, done func(), ok bool) {
	now := c.opts.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.ownedLocked(name, now)
	if !ok {
		return "", time.Time{}, func() {}, false
	}
	f.writes++
	var once sync.Once
	done = func() {
		once.Do(func() {
			c.mu.Lock()
			f.writes--
			c.mu.Unlock()
		})
	}
	return c.opts.Identity + "/" + strconv.Itoa(int(f.transitions)), f.lastRenew.Add(c.opts.RenewDeadline), done, true
}

// ownedLocked returns the fence of cluster name if this replica may write
// to it at now. c.mu is held.
func (c *Coordinator) ownedLocked(name multicluster.ClusterName, now time.Time) (*fenceState, bool) {
	cs := c.clusters[name]
	f := c.fences[FenceKey(string(name), c.opts.Buckets)]
	if cs == nil || cs.engCancel == nil || f == nil || !f.held || now.Sub(f.lastRenew) >= c.opts.RenewDeadline {
		return nil, false
	}
	return f, true
}

// awaitWrites waits until the writes begun under f are done, or until
// deadline (by which they must have ended), or ctx ends.
func (c *Coordinator) awaitWrites(ctx context.Context, f *fenceState, deadline time.Time) {
	for {
		c.mu.Lock()
		n := f.writes
		c.mu.Unlock()
		if n == 0 || !c.opts.clock.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (c *Coordinator) kick() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Start runs the decision loop until ctx is done, then hands every owned
// cluster back: engagements are cancelled, fences released and the peer
// Lease deleted, so the other replicas take over at once.
func (c *Coordinator) Start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(c.cs, 0,
		informers.WithNamespace(c.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LeaseKindLabel }))
	inf := factory.Coordination().V1().Leases().Informer()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.observe(o) },
		UpdateFunc: func(_, o any) { c.observe(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if l, ok := o.(*coordinationv1.Lease); ok {
				c.obs.forget(l.Name)
				c.kick()
			}
		},
	}); err != nil {
		return fmt.Errorf("failed to watch Leases: %w", err)
	}
	informerCtx, stopInformer := context.WithCancel(context.Background())
	defer stopInformer()
	factory.Start(informerCtx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}

	// No decision before the first membership snapshot and our own peer Lease.
	for c.renewPeer(ctx) != nil {
		select {
		case <-ctx.Done():
			return nil
		case <-c.opts.clock.After(c.opts.RetryPeriod):
		}
	}
	c.ready.Store(true)
	c.log.Info("membership synced; deciding ownership", "peers", len(c.obs.peers(c.opts.clock.Now())))

	ticker := c.opts.clock.NewTicker(c.opts.RetryPeriod)
	defer ticker.Stop()
	for {
		c.step(ctx)
		// Lease events kick the loop: at 1,000 fences that is ~150 a second.
		// One step per minStepGap serves them all; a step reads every Lease
		// anew, so nothing is lost by waiting.
		select {
		case <-ctx.Done():
		case <-c.opts.clock.After(minStepGap):
		}
		// Also wake the moment another replica's Lease expires.
		var expiry <-chan time.Time
		if next := c.obs.nextExpiry(c.opts.clock.Now(), c.opts.Identity); !next.IsZero() {
			expiry = c.opts.clock.After(next.Sub(c.opts.clock.Now()) + 10*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			c.shutdown()
			return nil
		case <-ticker.C():
		case <-expiry:
		case <-c.trigger:
		}
	}
}

func (c *Coordinator) observe(o any) {
	if l, ok := o.(*coordinationv1.Lease); ok {
		c.obs.record(l, c.opts.clock.Now())
		c.kick()
	}
}

// step is one pass of the decision loop:
//
//	membership + registered clusters ─▶ AssignBounded(fence keys, peers)
//	for each fence key: want = assigned to self
//	   want & !held ─▶ acquire (create, or take over a released/expired Lease)
//	   want &  held ─▶ renew every RenewInterval; past RenewDeadline ─▶ lost
//	  !want &  held ─▶ stop engagements, then release (holder = "")
//	─▶ engage connected clusters whose fence is held; cancel the others
//	─▶ wanted connections = assigned to self ∪ standbys ─▶ tell the provider
func (c *Coordinator) step(ctx context.Context) {
	now := c.opts.clock.Now()
	if now.Sub(c.peerRenewed) >= c.opts.RenewInterval {
		if err := c.renewPeer(ctx); err != nil {
			c.log.Error(err, "failed to renew peer Lease")
		}
	}
	now = c.opts.clock.Now()
	selfAlive := now.Sub(c.peerRenewed) < c.opts.RenewDeadline
	peers := c.membership(now, selfAlive)
	c.metrics.peers.Set(float64(len(peers)))

	c.mu.Lock()
	names := c.knownLocked()
	keys := map[string]int{} // fence key → clusters it guards
	for _, name := range names {
		keys[FenceKey(string(name), c.opts.Buckets)]++
	}
	known := c.known
	var work []*fenceState
	for k := range keys {
		if c.fences[k] == nil {
			c.fences[k] = &fenceState{key: k, name: leaseName(c.opts.FencePrefix, k)}
		}
	}
	for k, f := range c.fences {
		if keys[k] == 0 && !f.held {
			delete(c.fences, k)
			continue
		}
		work = append(work, f)
	}
	c.mu.Unlock()

	pl := c.planFor(peers, keys, names, known)
	// Each fence is written by one goroutine at a time, at most
	// fenceWriters at once: at 1,000 fences a serial loop spends seconds on
	// round trips, and a burst of renewals would outlast RenewDeadline.
	var wg sync.WaitGroup
	sem := make(chan struct{}, fenceWriters)
	run := func(op func()) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			op()
		})
	}
	for _, f := range work {
		want := keys[f.key] > 0 && pl.assign[f.key] == c.opts.Identity
		switch {
		case want && !c.isHeld(f):
			run(func() { c.acquire(ctx, f) })
		case want:
			if c.opts.clock.Since(c.lastRenew(f)) >= c.opts.RenewInterval {
				run(func() { c.renew(ctx, f) })
			}
		case c.isHeld(f):
			run(func() { c.release(ctx, f, "not assigned to this replica") })
		}
	}
	wg.Wait()
	c.syncEngagements()
	if selfAlive {
		// A replica that cannot renew its own peer Lease keeps its
		// connections as they are: it owns nothing meanwhile, and dropping
		// every cache during a hub outage would only slow the recovery.
		c.syncWanted(pl, names)
	}
	c.updateMetrics(keys)
}

// planFor returns the assignment of the fence keys (with their cluster
// counts) to peers and this replica's standby clusters, reusing the last
// plan while its inputs — peers, weights, known clusters — are unchanged.
func (c *Coordinator) planFor(peers []Peer, keys map[string]int, names []multicluster.ClusterName, known uint64) plan {
	ids := make([]string, 0, len(peers))
	for _, p := range peers {
		ids = append(ids, p.ID+"="+strconv.FormatFloat(p.Weight, 'g', -1, 64))
	}
	slices.Sort(ids)
	inputs := strconv.FormatUint(known, 10) + "|" + strings.Join(ids, ",")
	if c.plan.assign != nil && c.plan.inputs == inputs {
		return c.plan
	}
	units := make([]Unit, 0, len(keys))
	for k, n := range keys {
		units = append(units, Unit{Key: k, Load: n})
	}
	pl := plan{inputs: inputs, assign: AssignBounded(units, peers, c.opts.Balance), standby: map[multicluster.ClusterName]bool{}}
	if c.opts.Standby > 0 && len(peers) > 1 {
		// The fence keys this replica takes over if their owner dies: those
		// the assignment without that owner gives to us.
		next := map[string]bool{}
		for _, q := range peers {
			if q.ID == c.opts.Identity {
				continue
			}
			rest := slices.DeleteFunc(slices.Clone(peers), func(p Peer) bool { return p.ID == q.ID })
			alt := AssignBounded(units, rest, c.opts.Balance)
			for k, owner := range pl.assign {
				if owner == q.ID && alt[k] == c.opts.Identity {
					next[k] = true
				}
			}
		}
		self := Peer{ID: c.opts.Identity, Weight: c.opts.Weight}
		var candidates []multicluster.ClusterName
		for _, name := range names {
			if next[FenceKey(string(name), c.opts.Buckets)] {
				candidates = append(candidates, name)
			}
		}
		// The closest first: the highest rendezvous score for this replica.
		slices.SortFunc(candidates, func(a, b multicluster.ClusterName) int {
			if c := cmp.Compare(score(string(b), self), score(string(a), self)); c != 0 {
				return c
			}
			return strings.Compare(string(a), string(b))
		})
		for _, name := range candidates[:min(len(candidates), c.opts.Standby)] {
			pl.standby[name] = true
		}
	}
	c.plan = pl
	return pl
}

// syncWanted records which clusters this replica should be connected to —
// those whose fence it is assigned or still holds, and its standbys — and
// tells the OnWantedChanged subscribers about every change.
//
// A takeover comes first: while a fence assigned to this replica waits to be
// acquired (its former holder's Lease has yet to expire), clusters that
// become standbys only now are not connected yet — after a replica dies
// every survivor gains standbys (those it would take from the other
// survivors), and connecting hundreds of them would compete for CPU and the
// hub with the takeover they exist to speed up. Standbys already connected
// stay; the hold ends when every assigned fence is held, or after
// LeaseDuration + RenewDeadline at most.
func (c *Coordinator) syncWanted(pl plan, names []multicluster.ClusterName) {
	next := make(map[multicluster.ClusterName]role, len(names))
	standby, waiting := 0, 0
	now := c.opts.clock.Now()
	c.mu.Lock()
	acquiring := false
	for _, name := range names {
		if pl.assign[FenceKey(string(name), c.opts.Buckets)] == c.opts.Identity && !c.heldLocked(name) {
			acquiring = true
			break
		}
	}
	switch {
	case !acquiring:
		c.takingOver = time.Time{}
	case c.takingOver.IsZero():
		c.takingOver = now
	}
	hold := acquiring && now.Sub(c.takingOver) < c.opts.LeaseDuration+c.opts.RenewDeadline
	for _, name := range names {
		switch {
		case pl.assign[FenceKey(string(name), c.opts.Buckets)] == c.opts.Identity || c.heldLocked(name):
			next[name] = roleOwner
		case pl.standby[name] && hold && c.wanted[name] == roleNone:
			waiting++
		case pl.standby[name]:
			next[name] = roleStandby
			standby++
		}
	}
	if waiting > 0 {
		c.log.V(1).Info("new standbys wait for the takeover", "waiting", waiting)
	}
	var changed []multicluster.ClusterName
	for name, r := range next {
		if c.wanted[name] == roleNone {
			changed = append(changed, name)
		} else if c.wanted[name] != r {
			c.log.V(1).Info("cluster role changed", "cluster", name, "standby", r == roleStandby)
		}
	}
	for name := range c.wanted {
		if next[name] == roleNone {
			changed = append(changed, name)
		}
	}
	c.wanted = next
	fns := slices.Clone(c.onWanted)
	c.mu.Unlock()
	c.metrics.standby.Set(float64(standby))
	for _, name := range changed {
		for _, fn := range fns {
			fn(name)
		}
	}
}

// membership is the peer snapshot decisions use. Our own entry comes from
// our renew record, not the informer, which may lag behind our writes; a
// replica that cannot renew its own peer Lease decides to own nothing.
func (c *Coordinator) membership(now time.Time, selfAlive bool) []Peer {
	if !selfAlive {
		return nil
	}
	peers := []Peer{{ID: c.opts.Identity, Weight: c.opts.Weight}}
	for _, p := range c.obs.peers(now) {
		if p.ID != c.opts.Identity {
			peers = append(peers, p)
		}
	}
	return peers
}

const (
	// fenceWriters bounds the fence Lease writes of one step in flight at once.
	fenceWriters = 16
	// minStepGap is the least time between two steps of the decision loop.
	minStepGap = 25 * time.Millisecond
)

// knownLocked lists the clusters this replica knows: the registered ones
// and those the provider connected (Engage alone also makes a cluster
// known). c.mu is held.
func (c *Coordinator) knownLocked() []multicluster.ClusterName {
	names := make([]multicluster.ClusterName, 0, len(c.registered)+len(c.clusters))
	for name := range c.registered {
		names = append(names, name)
	}
	for name := range c.clusters {
		if !c.registered[name] {
			names = append(names, name)
		}
	}
	return names
}

// heldLocked reports whether this replica holds the fence of cluster name.
// c.mu is held.
func (c *Coordinator) heldLocked(name multicluster.ClusterName) bool {
	f := c.fences[FenceKey(string(name), c.opts.Buckets)]
	return f != nil && f.held
}

func (c *Coordinator) lastRenew(f *fenceState) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f.lastRenew
}

func (c *Coordinator) isHeld(f *fenceState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f.held
}

// setHeld records a fence state change under the lock Owns reads with.
func (c *Coordinator) setHeld(f *fenceState, held bool, lease *coordinationv1.Lease, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f.held = held
	if lease != nil {
		f.lease = lease
		f.transitions = ptr.Deref(lease.Spec.LeaseTransitions, 0)
	}
	if held {
		f.lastRenew = at
	}
}

func (c *Coordinator) acquire(ctx context.Context, f *fenceState) {
	now := c.opts.clock.Now()
	obs := c.obs.get(f.name)
	if obs != nil && obs.holder() != c.opts.Identity && c.obs.live(f.name, now) {
		return // someone else holds it; wait for its release or expiry
	}
	var (
		got *coordinationv1.Lease
		err error
	)
	prevHolder := obs.holder()
	if obs == nil {
		got, err = c.leases.Create(ctx, c.fenceLease(f, nil, now), metav1.CreateOptions{})
	} else {
		got, err = c.leases.Update(ctx, c.fenceLease(f, obs.lease, now), metav1.UpdateOptions{})
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			c.metrics.fenceFailures.WithLabelValues("acquire").Inc()
			c.log.Error(err, "failed to acquire fence", "fence", f.name)
		}
		return // lost a race or will retry on the next tick
	}
	c.obs.record(got, now)
	c.setHeld(f, true, got, now)
	if prevHolder != "" && prevHolder != c.opts.Identity {
		c.metrics.handoffs.Inc()
	}
	c.log.Info("fence acquired", "fence", f.name, "previousHolder", prevHolder, "transitions", ptr.Deref(got.Spec.LeaseTransitions, 0))
}

// fenceLease is the Lease that claims f for this replica, based on the
// current one (nil to create it). A claim increments leaseTransitions, so
// every holding period has its own number.
func (c *Coordinator) fenceLease(f *fenceState, cur *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: f.name, Namespace: c.opts.Namespace,
		Labels:      map[string]string{LeaseKindLabel: leaseKindFence},
		Annotations: map[string]string{FenceKeyAnnotation: f.key},
	}}
	if c.opts.Buckets > 0 {
		l.Annotations[BucketsAnnotation] = strconv.Itoa(c.opts.Buckets)
	}
	var transitions int32
	if cur != nil {
		l = cur.DeepCopy()
		transitions = ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1
	}
	mt := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = ptr.To(c.opts.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
	l.Spec.AcquireTime = &mt
	l.Spec.RenewTime = &mt
	l.Spec.LeaseTransitions = ptr.To(transitions)
	return l
}

// renew renews a held fence. A renewal that succeeds only after
// RenewDeadline keeps the fence (nobody could take it before
// LeaseDuration), but Owns was false from the deadline on, so writes were
// refused and reconciles skipped meanwhile: the fence's engagements start
// anew, and the controllers see every object again — nothing skipped stays
// skipped (found at 1,000 clusters, when a busy hub answered renewals late).
func (c *Coordinator) renew(ctx context.Context, f *fenceState) {
	now := c.opts.clock.Now()
	prev := c.lastRenew(f)
	l := f.lease.DeepCopy()
	mt := metav1.NewMicroTime(now)
	l.Spec.RenewTime = &mt
	got, err := c.leases.Update(ctx, l, metav1.UpdateOptions{})
	if err == nil {
		c.obs.record(got, now)
		c.setHeld(f, true, got, now)
		if c.opts.clock.Since(prev) >= c.opts.RenewDeadline {
			c.reengage(f)
		}
		return
	}
	c.metrics.fenceFailures.WithLabelValues("renew").Inc()
	if obs := c.obs.get(f.name); apierrors.IsConflict(err) && obs != nil && obs.holder() != c.opts.Identity {
		c.lose(f, fmt.Sprintf("taken by %q", obs.holder()))
		return
	}
	if c.opts.clock.Since(prev) >= c.opts.RenewDeadline {
		c.lose(f, "renew deadline passed: "+err.Error())
		return
	}
	c.log.Error(err, "failed to renew fence; retrying", "fence", f.name)
}

// reengage restarts the engagements of f's clusters: syncEngagements engages
// them again at once (the fence is held), and the controllers' sources
// replay every cached object.
func (c *Coordinator) reengage(f *fenceState) {
	c.mu.Lock()
	n := 0
	for name, cs := range c.clusters {
		if cs.engCancel != nil && FenceKey(string(name), c.opts.Buckets) == f.key {
			cs.engCancel()
			cs.engCancel = nil
			n++
		}
	}
	c.mu.Unlock()
	c.metrics.fenceFailures.WithLabelValues("late").Inc()
	c.log.Info("fence renewed after its renew deadline; engaging its clusters anew", "fence", f.name, "clusters", n)
	c.syncEngagements()
}

// lose gives up a fence without writing: it is no longer ours to release.
func (c *Coordinator) lose(f *fenceState, why string) {
	c.setHeld(f, false, nil, time.Time{})
	c.metrics.fenceFailures.WithLabelValues("lost").Inc()
	c.syncEngagements()
	c.log.Info("fence lost; stopped writing to its clusters", "fence", f.name, "why", why)
}

// release stops the engagements first and waits for the downstream writes
// still in flight under the fence (bounded by their deadline), then clears
// the holder so the new owner need not wait for expiry.
func (c *Coordinator) release(ctx context.Context, f *fenceState, why string) {
	c.mu.Lock()
	writesEnd := f.lastRenew.Add(c.opts.RenewDeadline)
	c.mu.Unlock()
	c.setHeld(f, false, nil, time.Time{}) // no write begins from here on
	c.syncEngagements()
	c.awaitWrites(ctx, f, writesEnd)
	l := f.lease.DeepCopy()
	l.Spec.HolderIdentity = ptr.To("")
	l.Spec.LeaseDurationSeconds = ptr.To(int32(1))
	got, err := c.leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		c.metrics.fenceFailures.WithLabelValues("release").Inc()
		c.log.Error(err, "failed to release fence; it will expire", "fence", f.name)
		return
	}
	c.obs.record(got, c.opts.clock.Now())
	c.log.Info("fence released", "fence", f.name, "why", why)
}

// syncEngagements engages clusters whose fence is held and cancels the rest.
func (c *Coordinator) syncEngagements() {
	type start struct {
		name multicluster.ClusterName
		cl   cluster.Cluster
		ctx  context.Context
	}
	var starts []start
	c.mu.Lock()
	awares := append([]multicluster.Aware(nil), c.awares...)
	for name, cs := range c.clusters {
		f := c.fences[FenceKey(string(name), c.opts.Buckets)]
		held := f != nil && f.held
		switch {
		case held && cs.engCancel == nil && cs.ctx.Err() == nil:
			ctx, cancel := context.WithCancel(cs.ctx)
			cs.engCancel = cancel
			starts = append(starts, start{name: name, cl: cs.cl, ctx: ctx})
		case !held && cs.engCancel != nil:
			cs.engCancel()
			cs.engCancel = nil
			c.log.Info("cluster disengaged", "cluster", name)
		}
	}
	c.mu.Unlock()
	// Engaging starts informers in the downstream cluster and can take a
	// while; it must not hold up renewals, so each cluster engages on its own.
	for _, s := range starts {
		go c.engage(s.ctx, awares, s.name, s.cl)
	}
}

func (c *Coordinator) engage(ctx context.Context, awares []multicluster.Aware, name multicluster.ClusterName, cl cluster.Cluster) {
	for _, a := range awares {
		if err := a.Engage(ctx, name, cl); err != nil {
			c.log.Error(err, "failed to engage cluster; retrying", "cluster", name)
			c.mu.Lock()
			if cs := c.clusters[name]; cs != nil && cs.engCancel != nil && cs.cl == cl {
				cs.engCancel()
				cs.engCancel = nil
			}
			c.mu.Unlock()
			c.kick()
			return
		}
	}
	c.log.Info("cluster engaged", "cluster", name)
}

func (c *Coordinator) renewPeer(ctx context.Context) error {
	now := c.opts.clock.Now()
	mt := metav1.NewMicroTime(now)
	l := c.peerLease
	create := false
	if l == nil {
		cur, err := c.leases.Get(ctx, leaseName(c.opts.PeerPrefix, c.opts.Identity), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName(c.opts.PeerPrefix, c.opts.Identity), Namespace: c.opts.Namespace}}
			create = true
		case err != nil:
			return fmt.Errorf("failed to get peer Lease: %w", err)
		default:
			l = cur
		}
	}
	l = l.DeepCopy()
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[LeaseKindLabel] = leaseKindPeer
	l.Annotations[WeightAnnotation] = strconv.FormatFloat(c.opts.Weight, 'g', -1, 64)
	l.Spec.HolderIdentity = ptr.To(c.opts.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
	l.Spec.RenewTime = &mt
	var (
		got *coordinationv1.Lease
		err error
	)
	if create {
		got, err = c.leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		got, err = c.leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		c.peerLease = nil // re-read on the next attempt
		return fmt.Errorf("failed to write peer Lease: %w", err)
	}
	c.peerLease, c.peerRenewed = got, now
	c.obs.record(got, now)
	return nil
}

// shutdown hands everything back. It runs with its own deadline because ctx is already done.
func (c *Coordinator) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.RenewDeadline)
	defer cancel()
	c.mu.Lock()
	var held []*fenceState
	for _, f := range c.fences {
		if f.held {
			f.held = false
			held = append(held, f)
		}
	}
	for _, cs := range c.clusters {
		if cs.engCancel != nil {
			cs.engCancel()
			cs.engCancel = nil
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, f := range held {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c.release(ctx, f, "shutting down")
		})
	}
	wg.Wait()
	if err := c.leases.Delete(ctx, leaseName(c.opts.PeerPrefix, c.opts.Identity), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		c.log.Error(err, "failed to delete peer Lease; peers will wait for it to expire")
	}
	c.log.Info("handed off all clusters", "fences", len(held))
}

func (c *Coordinator) updateMetrics(keys map[string]int) {
	now := c.opts.clock.Now()
	threshold := c.opts.LeaseDuration + c.opts.RetryPeriod
	var owned, unowned int
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.reported {
		if c.clusters[name] == nil && !c.registered[name] {
			c.metrics.clusterOwned.DeleteLabelValues(string(name))
			delete(c.reported, name)
		}
	}
	for _, cs := range c.clusters {
		if cs.engCancel != nil {
			owned++
		}
	}
	for _, name := range c.knownLocked() {
		c.reported[name] = true
		v := 0.0
		if c.heldLocked(name) {
			v = 1
		}
		c.metrics.clusterOwned.WithLabelValues(string(name)).Set(v)
	}
	for k := range keys {
		f := c.fences[k]
		if (f != nil && f.held) || c.obs.live(leaseName(c.opts.FencePrefix, k), now) {
			delete(c.unownedFrom, k)
			continue
		}
		since, ok := c.unownedFrom[k]
		if !ok {
			c.unownedFrom[k] = now
			continue
		}
		if now.Sub(since) > threshold {
			unowned++
		}
	}
	for k := range c.unownedFrom {
		if keys[k] == 0 {
			delete(c.unownedFrom, k)
		}
	}
	c.metrics.owned.Set(float64(owned))
	c.metrics.unowned.Set(float64(unowned))
}

// The coordinator is the fence of a sharded hub.
var (
	_ fence.Fence  = (*Coordinator)(nil)
	_ fence.Sharer = (*Coordinator)(nil)
)

// Share is the fraction of the known clusters whose fence this replica
// holds (0 when it knows none): its share of a hub-wide budget. The shares
// of all replicas add up to 1.
func (c *Coordinator) Share() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := c.knownLocked()
	if len(names) == 0 {
		return 0
	}
	held := 0
	for _, name := range names {
		if c.heldLocked(name) {
			held++
		}
	}
	return float64(held) / float64(len(names))
}
