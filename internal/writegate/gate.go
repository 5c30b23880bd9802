package writegate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/fence"
)

// Defaults for Options.
const (
	// DefaultInterval is how often each cluster is looked at for cert-manager.
	DefaultInterval = 30 * time.Second
	// MaxPlanRows bounds a report's plan (its counts stay complete).
	MaxPlanRows = 2000
	// lookTimeout bounds one look at one cluster.
	lookTimeout = 10 * time.Second
)

// ReasonClusterConflict is the Event reason, on a cluster's Argo CD Secret,
// when the hub will not write there because cert-manager is active.
const ReasonClusterConflict = "ClusterConflict"

// Options configure the Gate.
type Options struct {
	// Fence says which clusters this replica owns. Nil: every cluster,
	// writes stamped with Identity (a single replica).
	Fence fence.Fence
	// Identity stamps the writes when Fence is nil.
	Identity string
	// Labels returns a cluster's Argo CD Secret labels (the mode). Required.
	Labels func(multicluster.ClusterName) map[string]string
	// Clusters lists the clusters connected here. Required.
	Clusters func() []multicluster.ClusterName
	// GetCluster returns a connected cluster. Required.
	GetCluster func(context.Context, multicluster.ClusterName) (cluster.Cluster, error)
	// Secret names a cluster's Argo CD Secret, for Events (false for
	// kubeconfig-file clusters: no Event). Defaults to none.
	Secret func(multicluster.ClusterName) (types.NamespacedName, bool)
	// Hub writes the reports and reads the cluster Secrets. Required.
	Hub client.Client
	// Namespace holds the reports. Required.
	Namespace string
	// Recorder writes the ClusterConflict Events in the hub. Required.
	Recorder recorder.EventRecorder
	// Interval between looks at each cluster. Defaults to DefaultInterval.
	Interval time.Duration
	// LeaseNamespace holds cert-manager's leader-election Lease
	// (--leader-election-namespace). Defaults to DefaultLeaseNamespace.
	LeaseNamespace string
	// Registerer receives the certhub_cluster_mode and
	// certhub_cluster_conflict metrics. Defaults to controller-runtime's registry.
	Registerer prometheus.Registerer

	clock clock.WithTicker // test seam; defaults to the real clock
}

// Validate reports every missing required option.
func (o Options) Validate() error {
	var errs []error
	if o.Labels == nil || o.Clusters == nil || o.GetCluster == nil {
		errs = append(errs, errors.New("migrate: Labels, Clusters and GetCluster are required"))
	}
	if o.Hub == nil || o.Namespace == "" || o.Recorder == nil {
		errs = append(errs, errors.New("migrate: Hub, Namespace and Recorder are required"))
	}
	return errors.Join(errs...)
}

func (o *Options) defaults() {
	if o.Fence == nil {
		o.Fence = fence.Static{Identity: o.Identity}
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = DefaultLeaseNamespace
	}
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	if o.Secret == nil {
		o.Secret = func(multicluster.ClusterName) (types.NamespacedName, bool) { return types.NamespacedName{}, false }
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
}

// state is what the gate knows of one cluster.
type state struct {
	looked   time.Time // last look that answered; zero: never
	conflict bool
	message  string
	since    time.Time // of the current conflict answer
	skipped  bool      // a skipped signal was logged
	// held: namespaces where a field manager named like cert-manager's
	// wrote a Certificate since the last look, with why (HoldsStatus).
	held     map[string]string
	plan     map[types.NamespacedName]Verdict
	reported string // the report last written
	writes   bool   // last Writes answer told to subscribers
}

// Gate decides whether the hub writes in each cluster; it is a
// fence.Fence over Options.Fence, and a manager.Runnable that looks at
// the clusters (Start).
type Gate struct {
	opts    Options
	metrics *gateMetrics
	kick    chan struct{}
	// pauser is opts.Fence's, nil when it has no pauses.
	pauser fence.Pauser

	mu     sync.Mutex
	states map[multicluster.ClusterName]*state
	subs   []func(multicluster.ClusterName)
	// pending are the clusters to look at in the next pass, whatever their
	// last look (their mode changed).
	pending map[multicluster.ClusterName]bool
}

var (
	_ fence.Fence  = (*Gate)(nil)
	_ fence.Pauser = (*Gate)(nil)
	_ fence.Pauser = requestFence{}
)

// New returns a Gate; it looks at nothing until Start.
func New(opts Options) (*Gate, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.defaults()
	m, err := newGateMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	p, _ := opts.Fence.(fence.Pauser)
	return &Gate{opts: opts, metrics: m, kick: make(chan struct{}, 1), pauser: p,
		states: map[multicluster.ClusterName]*state{}, pending: map[multicluster.ClusterName]bool{}}, nil
}

// SetupWithManager adds g to mgr (the hub's manager).
func (g *Gate) SetupWithManager(mgr manager.Manager) error { return mgr.Add(g) }

// Mode is the cluster's mode.
func (g *Gate) Mode(name multicluster.ClusterName) Mode {
	m, _ := ModeOf(g.opts.Labels(name))
	return m
}

// Writes reports whether the hub may write in the cluster now, by its
// mode and the last look at it; ownership is the fence's to say. A cluster
// not looked at yet is looked at soon.
func (g *Gate) Writes(name multicluster.ClusterName) bool {
	switch g.Mode(name) {
	case ForceIssue:
		return true
	case Issue:
	default:
		return false
	}
	g.mu.Lock()
	st := g.states[name]
	unlooked := st == nil || st.looked.IsZero()
	ok := !unlooked && !st.conflict
	g.mu.Unlock()
	if unlooked {
		g.poke()
	}
	return ok
}

// HoldsStatus says why the hub does not write Certificate status in
// namespace of the cluster now ("" when it may): at the last look, a
// Certificate there had been written by a field manager named like
// cert-manager's since the look before. A tenant can write under any
// field-manager name, so this signal never holds back another namespace,
// nor the Secrets the hub writes; only cert-manager's leader-election
// Lease holds back the cluster (Writes).
func (g *Gate) HoldsStatus(name multicluster.ClusterName, namespace string) string {
	if g.Mode(name) == ForceIssue {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.states[name]; st != nil {
		return st.held[namespace]
	}
	return ""
}

// SignsRequests reports whether the hub may sign the cluster's
// CertificateRequests now: in mode external always (cert-manager is
// expected there), in issue and force-issue where it writes.
func (g *Gate) SignsRequests(name multicluster.ClusterName) bool {
	if g.Mode(name) == External {
		return true
	}
	return g.Writes(name)
}

// RequestFence is the fence of the CertificateRequest signer: the inner
// fence's answer, only where SignsRequests.
func (g *Gate) RequestFence() fence.Fence { return requestFence{g} }

type requestFence struct{ g *Gate }

func (f requestFence) Owns(name multicluster.ClusterName) (string, bool) {
	if !f.g.SignsRequests(name) {
		return "", false
	}
	return f.g.opts.Fence.Owns(name)
}

func (f requestFence) BeginWrite(name multicluster.ClusterName) (string, time.Time, func(), bool) {
	if !f.g.SignsRequests(name) {
		return "", time.Time{}, func() {}, false
	}
	return f.g.opts.Fence.BeginWrite(name)
}

// Mark is the inner fence's (fence.Pauser); 0 when it has no pauses.
func (f requestFence) Mark(name multicluster.ClusterName) uint64 { return f.g.Mark(name) }

// Paused is the inner fence's (fence.Pauser).
func (f requestFence) Paused(name multicluster.ClusterName, mark uint64) (time.Duration, bool) {
	return f.g.Paused(name, mark)
}

// Mark is the inner fence's (fence.Pauser); 0 when it has no pauses. A
// mode's own gating needs none: a mode change requeues what it concerns.
func (g *Gate) Mark(name multicluster.ClusterName) uint64 {
	if g.pauser == nil {
		return 0
	}
	return g.pauser.Mark(name)
}

// Paused is the inner fence's (fence.Pauser).
func (g *Gate) Paused(name multicluster.ClusterName, mark uint64) (time.Duration, bool) {
	if g.pauser == nil {
		return 0, false
	}
	return g.pauser.Paused(name, mark)
}

// Owns is the fence's answer, only where the hub writes.
func (g *Gate) Owns(name multicluster.ClusterName) (string, bool) {
	if !g.Writes(name) {
		return "", false
	}
	return g.opts.Fence.Owns(name)
}

// BeginWrite is the fence's, only where the hub writes.
func (g *Gate) BeginWrite(name multicluster.ClusterName) (string, time.Time, func(), bool) {
	if !g.Writes(name) {
		return "", time.Time{}, func() {}, false
	}
	return g.opts.Fence.BeginWrite(name)
}

// Subscribe calls fn, without blocking the gate, with each cluster whose
// mode or Writes answer changed.
func (g *Gate) Subscribe(fn func(multicluster.ClusterName)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.subs = append(g.subs, fn)
}

// LabelsChanged is told that a cluster's Secret labels changed (its mode
// may have): subscribers decide again, and the cluster is looked at again
// at once (switched to issue, it is written as soon as cert-manager is
// seen gone, not an Interval later).
func (g *Gate) LabelsChanged(name multicluster.ClusterName) {
	g.mu.Lock()
	g.pending[name] = true
	g.mu.Unlock()
	g.notify(name)
	g.poke()
}

// Plan records what the hub would do with one Certificate of a cluster
// it does not write in; the report follows within a second or so.
func (g *Gate) Plan(name multicluster.ClusterName, v Verdict) {
	g.mu.Lock()
	st := g.stateLocked(name)
	if st.plan == nil {
		st.plan = map[types.NamespacedName]Verdict{}
	}
	key := types.NamespacedName{Namespace: v.Namespace, Name: v.Name}
	changed := st.plan[key] != v
	st.plan[key] = v
	g.mu.Unlock()
	if changed {
		g.poke()
	}
}

// Forget removes a Certificate from the cluster's plan (deleted, or now
// written).
func (g *Gate) Forget(name multicluster.ClusterName, namespace, certificate string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.states[name]; st != nil {
		delete(st.plan, types.NamespacedName{Namespace: namespace, Name: certificate})
	}
}

func (g *Gate) stateLocked(name multicluster.ClusterName) *state {
	st := g.states[name]
	if st == nil {
		st = &state{}
		g.states[name] = st
	}
	return st
}

func (g *Gate) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

func (g *Gate) notify(name multicluster.ClusterName) {
	g.mu.Lock()
	subs := append([]func(multicluster.ClusterName){}, g.subs...)
	g.mu.Unlock()
	for _, fn := range subs {
		go fn(name) // a subscriber may list a cache that is still syncing
	}
}

// Start looks at every owned cluster each Interval (and at once at a
// cluster not looked at yet or whose mode changed), writes the reports
// (also soon after a plan changed), until ctx ends.
func (g *Gate) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("migrate")
	t := g.opts.clock.NewTicker(g.opts.Interval)
	defer t.Stop()
	for {
		g.pass(ctx, log, false)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-g.kick:
			g.pass(ctx, log, true)
			select { // a cluster that cannot be looked at pokes at most once a second
			case <-ctx.Done():
				return nil
			case <-g.opts.clock.After(time.Second):
			}
		}
	}
}

// NeedLeaderElection is false: every replica looks at the clusters it owns.
func (g *Gate) NeedLeaderElection() bool { return false }

// pass looks at the owned clusters (when onlyNew, only those never looked
// at or pending), then reports.
func (g *Gate) pass(ctx context.Context, log logr.Logger, onlyNew bool) {
	owned := map[multicluster.ClusterName]bool{}
	for _, name := range g.opts.Clusters() {
		if _, ok := g.opts.Fence.Owns(name); !ok {
			continue
		}
		owned[name] = true
		mode, valid := ModeOf(g.opts.Labels(name))
		g.metrics.setMode(name, mode)
		if !valid {
			log.Info("unknown mode; observing", "cluster", name, "value", g.opts.Labels(name)["certhub.io/mode"])
		}
		g.mu.Lock()
		looked, pending := g.stateLocked(name).looked, g.pending[name]
		delete(g.pending, name)
		g.mu.Unlock()
		if mode == Off || mode == External || (onlyNew && !looked.IsZero() && !pending) {
			continue
		}
		g.lookAt(ctx, log.WithValues("cluster", name), name)
	}
	g.forgetUnowned(owned)
	for name := range owned {
		if err := g.report(ctx, name); err != nil {
			log.Error(err, "failed to write migration report", "cluster", name)
		}
	}
}

// lookAt looks at one cluster and records the answer; a changed Writes
// answer is told to the subscribers, a new conflict to the cluster Secret.
func (g *Gate) lookAt(ctx context.Context, log logr.Logger, name multicluster.ClusterName) {
	cl, err := g.opts.GetCluster(ctx, name)
	if err != nil {
		return // disconnected meanwhile
	}
	now := g.opts.clock.Now()
	g.mu.Lock()
	st := g.stateLocked(name)
	since := st.looked
	g.mu.Unlock()
	if since.IsZero() {
		since = now.Add(-g.opts.Interval)
	}
	lctx, cancel := context.WithTimeout(ctx, lookTimeout)
	a, err := look(lctx, cl.GetAPIReader(), g.opts.LeaseNamespace, since, now)
	cancel()
	if err != nil {
		log.Error(err, "failed to look for cert-manager; keeping the last answer")
		return
	}
	g.mu.Lock()
	began := a.active && !st.conflict
	if a.active != st.conflict || st.looked.IsZero() {
		st.since = now
	}
	st.looked, st.conflict, st.message = now, a.active, a.message
	logSkipped := len(a.skipped) > 0 && !st.skipped
	st.skipped = st.skipped || logSkipped
	var newlyHeld []string
	heldChanged := len(a.namespaces) != len(st.held)
	for ns := range a.namespaces {
		if _, ok := st.held[ns]; !ok {
			newlyHeld, heldChanged = append(newlyHeld, a.namespaces[ns]), true
		}
	}
	st.held = a.namespaces
	g.mu.Unlock()
	for _, why := range newlyHeld {
		log.Info("holding back Certificate status writes in one namespace: a field manager named like cert-manager's wrote there", "why", why)
	}
	if heldChanged && !began {
		g.notify(name) // held namespaces are written again, or held now
	}
	g.metrics.setConflict(name, a.active)
	if logSkipped {
		log.Info("cannot read every cert-manager signal with this registration; relying on the others", "skipped", a.skipped)
	}
	if began {
		log.Info("cert-manager is active; the hub will not write here", "why", a.message)
		g.event(ctx, name, a.message)
	}
	if w := g.Writes(name); g.swapWrites(name, w) {
		g.notify(name)
	}
}

// swapWrites records w as the cluster's last told Writes answer and
// reports whether it changed.
func (g *Gate) swapWrites(name multicluster.ClusterName, w bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stateLocked(name)
	changed := st.writes != w
	st.writes = w
	return changed
}

// event records ClusterConflict on the cluster's Argo CD Secret.
func (g *Gate) event(ctx context.Context, name multicluster.ClusterName, why string) {
	key, ok := g.opts.Secret(name)
	if !ok {
		return
	}
	s := &corev1.Secret{}
	if err := g.opts.Hub.Get(ctx, key, s); err != nil {
		return
	}
	g.opts.Recorder.Eventf(s, nil, corev1.EventTypeWarning, ReasonClusterConflict, "Migrate",
		"%s; certhub writes nothing in cluster %q until cert-manager stops there or %s is %q", why, name, "certhub.io/mode", ForceIssue)
}

// forgetUnowned drops the state of clusters this replica no longer owns
// (their new owner looks at them before writing). Ownership is asked again
// here: a cluster acquired since the pass began has plan rows already
// (certsync plans as soon as it owns), which must not be lost.
func (g *Gate) forgetUnowned(owned map[multicluster.ClusterName]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for name := range g.states {
		if owned[name] {
			continue
		}
		if _, ok := g.opts.Fence.Owns(name); !ok {
			delete(g.states, name)
			g.metrics.forget(name)
		}
	}
	for name := range g.pending {
		if !owned[name] {
			delete(g.pending, name)
		}
	}
}

// String is the cluster's state, for logs and tests.
func (g *Gate) String(name multicluster.ClusterName) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.states[name]
	if st == nil {
		return "not looked at"
	}
	return fmt.Sprintf("looked %s, conflict %t (%s)", st.looked.Format(time.RFC3339), st.conflict, st.message)
}
