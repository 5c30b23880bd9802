package shard

import (
	"context"
	"fmt"
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
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
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
	// registrations is closed by RegistrationsSynced (Options.AwaitRegistrations).
	registrations     chan struct{}
	registrationsOnce sync.Once

	mu         sync.Mutex // guards the fields below; never held across an API call
	awares     []multicluster.Aware
	clusters   map[multicluster.ClusterName]*clusterState // connected: handed over by the provider
	registered map[multicluster.ClusterName]bool          // valid registrations, connected or not
	keys       map[multicluster.ClusterName]string        // the fence key of every known cluster (registered or connected), hashed once
	known      uint64                                     // bumped on every change of clusters or registered
	fences     map[string]*fenceState                     // by fence key
	wanted     map[multicluster.ClusterName]role          // what this replica should be connected to
	onWanted   []func(multicluster.ClusterName)

	// The peer Lease, renewed by the decision loop and the heartbeat, one
	// at a time.
	peerMu      sync.Mutex
	peerLease   *coordinationv1.Lease
	peerRenewed time.Time

	// Owned by the decision loop only.
	unownedFrom map[string]time.Time                  // fence key → when it was first seen without a live holder
	reported    map[multicluster.ClusterName]struct{} // the clusters with an owned-gauge series (fence held)
	plan        plan                                  // the last assignment, recomputed when its inputs change
	takingOver  time.Time                             // since when an assigned fence has been waiting to be acquired; zero when none is
	livePeers   []string                              // the live-peer IDs of the last step, sorted; nil before the first
	// layoutConflict is why another fence layout is in use (layout.go), "" when none is.
	layoutConflict string
}

// role is why a replica holds a connection to a cluster.
type role int

const (
	roleNone    role = iota
	roleOwner        // assigned the cluster's fence: holding or acquiring it
	roleStandby      // next in line for it: kept warm, not written to
)

type clusterState struct {
	cl        cluster.Cluster
	ctx       context.Context    // from the provider: the cluster's lifetime
	engCancel context.CancelFunc // non-nil while engaged with the awares
}

// New returns a Coordinator. Pass it to mcmanager.New with mcmanager.WithCoordinator.
func New(opts Options) (*Coordinator, error) {
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
	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
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
		opts:          opts,
		log:           log.WithName("shard").WithValues("replica", opts.Identity),
		cs:            cs,
		leases:        cs.CoordinationV1().Leases(opts.Namespace),
		obs:           newObserver(opts.MaxClockSkew),
		metrics:       m,
		trigger:       make(chan struct{}, 1),
		registrations: make(chan struct{}),
		clusters:      map[multicluster.ClusterName]*clusterState{},
		registered:    map[multicluster.ClusterName]bool{},
		keys:          map[multicluster.ClusterName]string{},
		fences:        map[string]*fenceState{},
		wanted:        map[multicluster.ClusterName]role{},
		unownedFrom:   map[string]time.Time{},
		reported:      map[multicluster.ClusterName]struct{}{},
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

// Register records a valid registration of cluster name, connected or not.
// Every replica registers the same set (they read the same cluster Secrets),
// and the assignment is computed over it, so a cluster nobody can reach
// still has an owner: the replica that holds its fence and keeps retrying
// the connection. Engage alone also makes a cluster known.
func (c *Coordinator) Register(name multicluster.ClusterName) {
	c.mu.Lock()
	if !c.registered[name] {
		c.registered[name] = true
		c.trackLocked(name)
	}
	c.mu.Unlock()
	c.kick()
}

// RegistrationsSynced says every registration present at the provider's
// start has been registered: with Options.AwaitRegistrations, the replica
// joins its peers and decides from then on. Later calls do nothing.
func (c *Coordinator) RegistrationsSynced() {
	c.registrationsOnce.Do(func() { close(c.registrations) })
}

// Unregister forgets a registration (its Secret is gone or invalid).
func (c *Coordinator) Unregister(name multicluster.ClusterName) {
	c.mu.Lock()
	if c.registered[name] {
		delete(c.registered, name)
		c.trackLocked(name)
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

// Start runs the decision loop until ctx is done, then hands every owned
// cluster back: engagements are cancelled, fences released and the peer
// Lease deleted, so the other replicas take over at once.
func (c *Coordinator) Start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(c.cs, 0,
		informers.WithNamespace(c.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = hubapi.LeaseKindLabel }))
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

	// No peer Lease before the registrations are known (AwaitRegistrations):
	// peers would hand this replica fences that it gives back as its
	// assignment follows the registrations still arriving.
	if c.opts.AwaitRegistrations {
		c.log.Info("waiting for the cluster registrations before joining the peers")
		select {
		case <-ctx.Done():
			return nil
		case <-c.registrations:
		}
		c.mu.Lock()
		n := len(c.registered)
		c.mu.Unlock()
		c.log.Info("cluster registrations synced", "registered", n)
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

	beatCtx, stopBeat := context.WithCancel(ctx)
	beatDone := make(chan struct{})
	go func() {
		defer close(beatDone)
		c.heartbeat(beatCtx)
	}()
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
			stopBeat()
			<-beatDone // before shutdown deletes the peer Lease it would write again
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

const (
	// fenceWriters bounds the fence Lease writes of one step in flight at once.
	fenceWriters = 16
	// minStepGap is the least time between two steps of the decision loop.
	minStepGap = 25 * time.Millisecond
)

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
	// The peer Lease goes last. Deleted first, it made the hand-off slower
	// (shardbench, 1,000 clusters: 1.0–2.2 s against 0.3–1.1 s), likely
	// because the peers then began to connect this replica's clusters while
	// its fences were still being released, and took the fences later.
	if err := c.leases.Delete(ctx, leaseName(c.opts.PeerPrefix, c.opts.Identity), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		c.log.Error(err, "failed to delete peer Lease; peers will wait for it to expire")
	}
	c.log.Info("handed off all clusters", "fences", len(held))
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
	if len(c.keys) == 0 {
		return 0
	}
	held := 0
	for _, key := range c.keys {
		if c.heldLocked(key) {
			held++
		}
	}
	return float64(held) / float64(len(c.keys))
}
