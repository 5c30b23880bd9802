package discovery

import (
	"context"
	"crypto/sha256"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/fence"
)

// Defaults of Options.
const (
	DefaultReadQPS          = 5
	DefaultReadBurst        = 20
	DefaultReaders          = 2
	DefaultReportInterval   = 30 * time.Second
	DefaultMaxReportEntries = 1000
	DefaultMaxSeries        = 10000
)

// Options configure discovery.
type Options struct {
	// Namespace is the hub namespace of the reports. Required.
	Namespace string
	// Hub writes the reports. Required.
	Hub client.Client
	// Fence says which clusters this replica reports on (Owns); the
	// others' owners do. Nil: every engaged cluster.
	Fence fence.Fence
	// Namespaces returns the namespaces a namespace-scoped registration
	// may read (nil: the whole cluster). Nil: every cluster is cluster-wide.
	Namespaces func(name multicluster.ClusterName) []string
	// MayRead says whether discovery may read Secrets' data in a cluster:
	// false where keys must never reach the hub (certhub.io/mode external).
	// It is asked before every read, and again on each ModeChanged: a
	// cluster switched to external stops being read at once, one switched
	// back is read again, without a new engagement. Nil: everywhere.
	MayRead func(name multicluster.ClusterName) bool
	// Written returns the Secret key of a cluster at resourceVersion rv as
	// this replica last wrote or read it (the hub's Secret store,
	// secretcache.Store.At), nil when it holds another version: a Secret
	// certhub just wrote is then inspected without reading it again. Nil:
	// every changed Secret is read.
	Written func(name multicluster.ClusterName, key client.ObjectKey, rv string) *corev1.Secret
	// ReadQPS and ReadBurst bound the Secret reads in each cluster; they
	// have their own client-side limiter, apart from the issuing clients'.
	// Default DefaultReadQPS, DefaultReadBurst.
	ReadQPS   float32
	ReadBurst int
	// Readers is the number of concurrent reads per cluster. Default DefaultReaders.
	Readers int
	// ReportInterval is how often a changed report is written. Default DefaultReportInterval.
	ReportInterval time.Duration
	// MaxReportEntries caps a cluster's report (the soonest to expire are
	// kept; Truncated counts the rest). Default DefaultMaxReportEntries.
	MaxReportEntries int
	// MaxSeries caps the series of MetricExpiration over every cluster
	// this replica serves (the soonest to expire are kept). Default DefaultMaxSeries.
	MaxSeries int
	// Registerer receives the metrics. Required.
	Registerer prometheus.Registerer
	// Log is the logger. Default: discard.
	Log logr.Logger

	clock clock.WithTicker
}

func (o *Options) defaults() {
	if o.ReadQPS <= 0 {
		o.ReadQPS = DefaultReadQPS
	}
	if o.ReadBurst <= 0 {
		o.ReadBurst = DefaultReadBurst
	}
	if o.Readers <= 0 {
		o.Readers = DefaultReaders
	}
	if o.ReportInterval <= 0 {
		o.ReportInterval = DefaultReportInterval
	}
	if o.MaxReportEntries <= 0 {
		o.MaxReportEntries = DefaultMaxReportEntries
	}
	if o.MaxSeries <= 0 {
		o.MaxSeries = DefaultMaxSeries
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
}

// Discoverer finds the TLS certificates of every engaged cluster. Add it
// to the multicluster manager (a Runnable that is multicluster.Aware).
type Discoverer struct {
	opts    Options
	metrics *metrics

	mu       sync.Mutex
	clusters map[multicluster.ClusterName]*clusterState
}

var _ multicluster.Aware = &Discoverer{}

// New returns a Discoverer with its metrics registered.
func New(opts Options) (*Discoverer, error) {
	opts.defaults()
	if opts.Namespace == "" || opts.Hub == nil || opts.Registerer == nil {
		return nil, errors.New("discovery: Namespace, Hub and Registerer are required")
	}
	d := &Discoverer{opts: opts, clusters: map[multicluster.ClusterName]*clusterState{}}
	var err error
	if d.metrics, err = newMetrics(opts.Registerer, d); err != nil {
		return nil, err
	}
	return d, nil
}

// SetupWithManager adds d to mgr (the multicluster manager: it is told of every cluster engaged).
func (d *Discoverer) SetupWithManager(mgr mcmanager.Manager) error { return mgr.Add(d) }

// Start blocks until ctx ends; each cluster's discovery runs from Engage
// until the cluster's context ends.
func (d *Discoverer) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// clusterState is what discovery knows of one engaged cluster.
type clusterState struct {
	mu sync.Mutex
	// records by Secret.
	records map[types.NamespacedName]Record
	// refs are the Secrets each Ingress names in spec.tls.
	refs map[types.NamespacedName][]types.NamespacedName
	// typed are the kubernetes.io/tls Secrets the metadata watch holds,
	// with their resourceVersion.
	typed map[types.NamespacedName]string
	// changed is signalled by ModeChanged: MayRead may answer otherwise.
	changed chan struct{}
	// listed: the first full read (paged LISTs) is done; until then the
	// metadata watch only records versions, and nothing is queued.
	listed bool
	synced bool
	// reported is the digest of the last report written.
	reported [sha256.Size]byte
}

// typedVersion is the resourceVersion the metadata watch last showed for
// key ("" when it holds none).
func (st *clusterState) typedVersion(key types.NamespacedName) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.typed[key]
}

// served reports whether an Ingress names key; st.mu held.
func (st *clusterState) servedLocked(key types.NamespacedName) bool {
	for _, secrets := range st.refs {
		for _, s := range secrets {
			if s == key {
				return true
			}
		}
	}
	return false
}

// snapshot returns the cluster's records at now.
func (st *clusterState) snapshot(now time.Time) ([]Record, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]Record, 0, len(st.records))
	for _, r := range st.records {
		out = append(out, r.at(now))
	}
	return out, st.synced
}

// Engage starts discovery in cl until ctx ends; it does not block.
func (d *Discoverer) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	st := &clusterState{records: map[types.NamespacedName]Record{}, refs: map[types.NamespacedName][]types.NamespacedName{},
		typed: map[types.NamespacedName]string{}, changed: make(chan struct{}, 1)}
	d.mu.Lock()
	d.clusters[name] = st
	d.mu.Unlock()
	context.AfterFunc(ctx, func() {
		d.mu.Lock()
		if d.clusters[name] == st {
			delete(d.clusters, name)
		}
		d.mu.Unlock()
	})
	go d.run(ctx, name, cl, st)
	return nil
}

// states returns the engaged clusters' states.
func (d *Discoverer) states() map[multicluster.ClusterName]*clusterState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.clusters)
}

// ModeChanged tells discovery that MayRead may now answer otherwise for a
// cluster (its labels changed).
func (d *Discoverer) ModeChanged(name multicluster.ClusterName) {
	d.mu.Lock()
	st := d.clusters[name]
	d.mu.Unlock()
	if st != nil {
		select {
		case st.changed <- struct{}{}:
		default: // one pending signal is enough
		}
	}
}

// mayRead is Options.MayRead's answer for a cluster.
func (d *Discoverer) mayRead(name multicluster.ClusterName) bool {
	return d.opts.MayRead == nil || d.opts.MayRead(name)
}

// run watches cl while MayRead allows, until ctx ends: a change of the
// cluster's mode stops the watch or starts it again.
func (d *Discoverer) run(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, st *clusterState) {
	log := d.opts.Log.WithValues("cluster", name)
	for {
		if !d.mayRead(name) {
			log.V(1).Info("Discovery skips the cluster while its Secrets' data must not reach the hub")
		} else if !d.watchWhileReadable(ctx, name, cl, st, log) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-st.changed:
		}
	}
}

// watchWhileReadable runs one watch of cl until ctx ends or MayRead says no
// (true: it said no, and the caller waits for the next change).
func (d *Discoverer) watchWhileReadable(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, st *clusterState, log logr.Logger) bool {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := d.newWatch(wctx, name, cl, st, log)
	if err != nil {
		if ctx.Err() == nil { // the engagement ended first: nothing to report
			log.Error(err, "Discovery could not start in the cluster")
		}
		return false
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(wctx)
	}()
	for {
		select {
		case <-done:
			return false
		case <-st.changed:
			if !d.mayRead(name) {
				log.Info("Discovery stops reading the cluster: its Secrets' data must not reach the hub now")
				cancel()
				<-done
				return true
			}
		}
	}
}
