package drpair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/engaged"
	"github.com/certhub/certhub/internal/fence"
)

// DefaultInterval is Options.Interval's default (--standby-interval).
const DefaultInterval = 15 * time.Second

// Options configure the DR pairs.
type Options struct {
	// Namespace is the hub namespace of the source and status ConfigMaps.
	// Required.
	Namespace string
	// Hub reads the registrations and the ConfigMaps and writes the
	// ConfigMaps. Required.
	Hub client.Client
	// Clusters lists every registered cluster with its labels (the pairs
	// are read from StandbyForLabel). Required.
	Clusters func() map[multicluster.ClusterName]map[string]string
	// Registration names a cluster's Secret in the hub (its annotations
	// hold the standby's selector). Nil: every Certificate is selected.
	Registration func(multicluster.ClusterName) (types.NamespacedName, bool)
	// Fence says which clusters this replica owns: it writes their source
	// or status. Nil: all.
	Fence fence.Fence
	// WriteFence guards the writes into a standby (the migration gate: a
	// standby in observe mode is reported, never written). Nil: Fence.
	WriteFence fence.Fence
	// Interval is how often each pair is looked at. Default DefaultInterval.
	Interval time.Duration
	// Registerer receives the metrics. Required.
	Registerer prometheus.Registerer
	// Log defaults to discard.
	Log logr.Logger

	clock clock.WithTicker
}

func (o *Options) defaults() {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.WriteFence == nil {
		o.WriteFence = o.Fence
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
}

// Pairs keeps every DR pair's standby in step with its primary. Add it to
// the multicluster manager: it is told of every engaged cluster (Engage).
type Pairs struct {
	opts    Options
	metrics *metrics
	engaged.Set
	mu      sync.Mutex
	written map[string]string // ConfigMap name → digest of what this replica last wrote
	shown   map[multicluster.ClusterName]string
}

// New returns the DR pairs' controller; add it to the multicluster manager
// (it is told of every engaged cluster).
func New(opts Options) (*Pairs, error) {
	if opts.Namespace == "" || opts.Hub == nil || opts.Clusters == nil || opts.Registerer == nil {
		return nil, errors.New("standby: Namespace, Hub, Clusters and Registerer are required")
	}
	opts.defaults()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Pairs{opts: opts, metrics: m, written: map[string]string{}, shown: map[multicluster.ClusterName]string{}}, nil
}

// SetupWithManager adds p to mgr (the multicluster manager: it is told of every cluster engaged).
func (p *Pairs) SetupWithManager(mgr mcmanager.Manager) error { return mgr.Add(p) }

// Start looks at every pair each Interval until ctx ends.
func (p *Pairs) Start(ctx context.Context) error {
	t := p.opts.clock.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		if err := p.pass(ctx); err != nil && ctx.Err() == nil {
			p.opts.Log.Error(err, "DR pairs pass failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// owned is the engaged cluster name when this replica owns it.
func (p *Pairs) owned(name multicluster.ClusterName) (cluster.Cluster, string, bool) {
	cl := p.Get(name)
	if cl == nil {
		return nil, "", false
	}
	if p.opts.Fence == nil {
		return cl, "", true
	}
	stamp, ok := p.opts.Fence.Owns(name)
	return cl, stamp, ok
}

// pass writes the source of every primary and brings every standby this
// replica owns in step.
func (p *Pairs) pass(ctx context.Context) error {
	pairs := map[multicluster.ClusterName]multicluster.ClusterName{} // standby → primary
	primaries := map[multicluster.ClusterName]bool{}
	for name, l := range p.opts.Clusters() {
		if prim := l[hubapi.StandbyForLabel]; prim != "" && multicluster.ClusterName(prim) != name {
			pairs[name] = multicluster.ClusterName(prim)
			primaries[multicluster.ClusterName(prim)] = true
		}
	}
	var errs []error
	mine := map[string]bool{} // the ConfigMaps this replica writes now
	for prim := range primaries {
		if cl, stamp, ok := p.owned(prim); ok {
			mine[SourceName(string(prim))] = true
			if err := p.writeSource(ctx, prim, cl, stamp); err != nil {
				errs = append(errs, err)
			}
		}
	}
	shown := map[multicluster.ClusterName]string{}
	for sb, prim := range pairs {
		cl, stamp, ok := p.owned(sb)
		if !ok {
			continue
		}
		shown[sb] = string(prim)
		mine[StatusName(string(sb))] = true
		if err := p.sync(ctx, sb, prim, cl, stamp); err != nil {
			errs = append(errs, err)
		}
	}
	p.mu.Lock()
	old := p.shown
	p.shown = shown
	for name := range p.written {
		if !mine[name] { // another replica may write it meanwhile: write it again when it is ours
			delete(p.written, name)
		}
	}
	p.mu.Unlock()
	for sb, prim := range old {
		if shown[sb] != prim {
			p.metrics.forget(string(sb), prim)
		}
	}
	return errors.Join(errs...)
}

// selector is the standby's selector over its primary's Certificates.
func (p *Pairs) selector(ctx context.Context, standby multicluster.ClusterName) (labels.Selector, error) {
	if p.opts.Registration == nil {
		return labels.Everything(), nil
	}
	key, ok := p.opts.Registration(standby)
	if !ok {
		return labels.Everything(), nil
	}
	s := &corev1.Secret{}
	if err := p.opts.Hub.Get(ctx, key, s); err != nil {
		return nil, fmt.Errorf("failed to read the registration of %s: %w", standby, err)
	}
	raw, ok := s.Annotations[hubapi.StandbySelectorAnnotation]
	if !ok {
		return labels.Everything(), nil
	}
	sel, err := labels.Parse(raw)
	if err != nil {
		return labels.Nothing(), fmt.Errorf("%s %q does not parse (nothing selected): %w", hubapi.StandbySelectorAnnotation, raw, err)
	}
	return sel, nil
}

// changed reports whether digest differs from what this replica last
// wrote to the ConfigMap name (wrote remembers it).
func (p *Pairs) changed(name, digest string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.written[name] != digest
}

func (p *Pairs) wrote(name, digest string) {
	p.mu.Lock()
	p.written[name] = digest
	p.mu.Unlock()
}
