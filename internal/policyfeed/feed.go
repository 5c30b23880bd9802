package policyfeed

import (
	"context"
	"crypto/x509"
	"sync"
	"sync/atomic"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/engaged"
	"github.com/certhub/certhub/internal/policy"
)

// Evaluator decides whether a Certificate may be issued (*policy.Engine).
type Evaluator interface {
	Evaluate(cluster string, crt *cmapi.Certificate, tmpl *x509.Certificate) (d policy.Decision, pending bool)
}

// Feed queues Certificates again when the issuance policies change.
type Feed struct {
	log    logr.Logger
	policy Evaluator
	kicks  chan struct{} // buffered 1: changes while a pass runs coalesce
	all    atomic.Bool   // the next pass queues every Certificate (kickAll)
	settle time.Duration // quiet time after a kick before the pass

	clusters engaged.Set
	mu       sync.Mutex // guards queue
	queue    workqueue.TypedRateLimitingInterface[mcreconcile.Request]
}

// DefaultSettle is how long the feed waits for a burst of policy changes
// to end before its pass.
const DefaultSettle = 250 * time.Millisecond

// Options configure a Feed.
type Options struct {
	// Policy decides (nil: every Certificate is allowed; only marked ones
	// are queued).
	Policy Evaluator
	// Log is the logger. Default: discard.
	Log logr.Logger
}

// New returns a Feed. Add it to the manager (SetupWithManager: Start,
// Engage) and hand the controller its Source.
func New(opts Options) (*Feed, error) {
	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	return &Feed{log: log.WithName("policy-feed"), policy: opts.Policy, settle: DefaultSettle,
		kicks: make(chan struct{}, 1)}, nil
}

// SetupWithManager adds the feed to mgr (the multicluster manager: it is
// told of every cluster engaged).
func (f *Feed) SetupWithManager(mgr mcmanager.Manager) error { return mgr.Add(f) }

// Kick asks for a pass; it never blocks.
func (f *Feed) Kick() {
	select {
	case f.kicks <- struct{}{}:
	default:
	}
}

// KickAll asks for a pass that queues every Certificate; it never blocks.
func (f *Feed) KickAll() {
	f.all.Store(true)
	f.Kick()
}

// Engage remembers the cluster until its context ends.
func (f *Feed) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	return f.clusters.Engage(ctx, name, cl)
}

// Source hands the controller's queue to the feed.
func (f *Feed) Source() source.TypedSource[mcreconcile.Request] {
	return source.TypedFunc[mcreconcile.Request](func(_ context.Context, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) error {
		f.mu.Lock()
		f.queue = q
		f.mu.Unlock()
		return nil
	})
}

// Start runs passes until ctx ends.
func (f *Feed) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.kicks:
			f.quiet(ctx)
			f.pass(ctx)
		}
	}
}

// quiet waits until no kick has come for f.settle (at most 20 × settle).
func (f *Feed) quiet(ctx context.Context) {
	for range 20 {
		select {
		case <-ctx.Done():
			return
		case <-f.kicks:
		case <-time.After(f.settle):
			return
		}
	}
}

// stale reports whether crt's status may no longer match what the policies
// decide now. A CA is always looked at again: a policy that still allows
// it may sign it with other powers now (path length, name constraints).
func (f *Feed) stale(name multicluster.ClusterName, crt *cmapi.Certificate) bool {
	if ready := apiutil.GetCertificateCondition(crt, cmapi.CertificateConditionReady); ready != nil && ready.Reason == reasons.PolicyDenied {
		return true
	}
	if crt.Spec.IsCA {
		return true
	}
	if apiutil.GetCertificateCondition(crt, cmapi.CertificateConditionType(reasons.PolicyViolationCondition)) != nil {
		return true
	}
	if f.policy == nil {
		return false
	}
	d, pending := f.policy.Evaluate(string(name), crt, nil)
	return pending || !d.Allowed
}

func (f *Feed) pass(ctx context.Context) {
	f.mu.Lock()
	q := f.queue
	f.mu.Unlock()
	clusters := f.clusters.All()
	if q == nil {
		return // the controller has not started; it will list everything itself
	}
	n, queued := 0, 0
	all := f.all.Swap(false)
	for name, cl := range clusters {
		list := certspec.NewList()
		if err := cl.GetCache().List(ctx, list); err != nil {
			f.log.Error(err, "failed to list Certificates after a policy change", "cluster", name)
			continue
		}
		c, qd := f.enqueue(q, name, list.Items, all)
		n, queued = n+c, queued+qd
	}
	f.log.V(1).Info("issuance policies changed; Certificates decided again", "certificates", n, "queued", queued, "clusters", len(clusters))
}

// enqueue decides items (cluster name's Certificates) again and queues
// those that may have changed; it returns how many it saw and queued.
func (f *Feed) enqueue(q workqueue.TypedInterface[mcreconcile.Request], name multicluster.ClusterName, items []unstructured.Unstructured, all bool) (n, queued int) {
	for i := range items {
		n++
		crt, err := certspec.Decode(&items[i])
		if err != nil {
			continue // its own reconcile reports it
		}
		if all || f.stale(name, crt) {
			q.Add(mcreconcile.Request{ClusterName: name, Request: reconcile.Request{NamespacedName: client.ObjectKeyFromObject(crt)}})
			queued++
		}
	}
	return n, queued
}
