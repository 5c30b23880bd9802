package crsign

import (
	"context"
	"crypto/x509"
	"errors"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/fairqueue"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/writegate"
)

// Defaults for Options.
const (
	// DefaultIssuerRetryInterval is how soon a request waiting for its
	// issuer (missing, not ready) is tried again.
	DefaultIssuerRetryInterval = 30 * time.Second
	// DefaultMaxConcurrentReconciles is the signing workers.
	DefaultMaxConcurrentReconciles = 4
)

// Resolver turns an issuerRef into a hub issuer (*issuers.Resolver).
type Resolver interface {
	Resolve(ctx context.Context, ref cmmeta.IssuerReference, namespace string, downstream client.Reader) (issuers.Issuer, error)
}

// Policy decides on a certificate before it is signed (*policy.Engine).
type Policy interface {
	Evaluate(cluster string, crt *cmapi.Certificate, tmpl *x509.Certificate) (d policy.Decision, pending bool)
}

// Budget admits issuances at the hub's --issuance-rate (*budget.Budget).
type Budget interface {
	Admit(key string, tenant budget.Tenant, due time.Time, lane budget.Lane) time.Duration
}

// Record stores each signature before it leaves the hub (*issued.Record).
type Record interface {
	Add(ctx context.Context, e issued.Entry) error
}

// Modes tells when a cluster's requests may be signed again (its mode
// changed): *writegate.Gate.
type Modes interface {
	Subscribe(fn func(multicluster.ClusterName))
}

// Options configure the signer.
type Options struct {
	// Issuers resolves the hub ClusterIssuer a request names. Required.
	Issuers Resolver
	// Fence says where this replica may write, until when (migrate's
	// RequestFence: ownership and the cluster's mode). Required.
	Fence fence.Fence
	// Policy decides every signature. Nil allows everything.
	Policy Policy
	// Budget, when set, admits every signature.
	Budget Budget
	// Record, when set, records every certificate signed before the
	// request's status carries it (internal/issued). A request whose
	// certificate cannot be recorded is not given it; it is tried again.
	Record Record
	// Modes, when set, requeues a cluster's requests when its mode changes.
	Modes Modes
	// IssuerRetryInterval defaults to DefaultIssuerRetryInterval.
	IssuerRetryInterval time.Duration
	// MaxConcurrentReconciles defaults to DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// MaxConcurrentReconcilesPerCluster bounds the workers one cluster
	// occupies at once, so a cluster that stalls its status writes leaves
	// the rest to the others (internal/fairqueue, as for Certificates).
	// Defaults to half of MaxConcurrentReconciles, rounded up.
	MaxConcurrentReconcilesPerCluster int
	// MaxNames is how many names (SANs, subject attributes) one CSR may
	// ask for; more is refused before the CSR is read further. Defaults
	// to issuers.DefaultMaxNames.
	MaxNames int
	// Registerer receives certhub_certificaterequests_total. Defaults to
	// controller-runtime's registry.
	Registerer prometheus.Registerer

	clock clock.Clock // test seam; defaults to the real clock
}

// Validate reports every missing required option.
func (o Options) Validate() error {
	if o.Issuers == nil || o.Fence == nil {
		return errors.New("crsign: Issuers and Fence are required")
	}
	return nil
}

func (o *Options) defaults() {
	if o.IssuerRetryInterval <= 0 {
		o.IssuerRetryInterval = DefaultIssuerRetryInterval
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if o.MaxConcurrentReconcilesPerCluster <= 0 {
		o.MaxConcurrentReconcilesPerCluster = (o.MaxConcurrentReconciles + 1) / 2
	}
	if o.MaxNames <= 0 {
		o.MaxNames = issuers.DefaultMaxNames
	}
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
}

// ForHub reports whether a request names a hub issuer (issuerRef.group
// certhub.io): the only ones this package touches.
func ForHub(cr *cmapi.CertificateRequest) bool { return cr.Spec.IssuerRef.Group == hubapi.GroupName }

// CacheOptions keep in a downstream cluster's cache only the
// CertificateRequests this package signs: any other (cert-manager's own
// issuers', istio-csr's, thousands of them) is cached as its name and
// issuerRef alone, without its CSR, status or certificate, so the hub
// holds nothing of the requests it does not sign.
func CacheOptions() cluster.Option {
	return func(o *cluster.Options) {
		if o.Cache.ByObject == nil {
			o.Cache.ByObject = map[client.Object]cache.ByObject{}
		}
		o.Cache.ByObject[&cmapi.CertificateRequest{}] = cache.ByObject{Transform: stubUnlessForHub}
	}
}

// stubUnlessForHub is the CertificateRequest cache's transform: managed
// fields are dropped from every request, and all but the identity and
// issuerRef from those not for the hub.
func stubUnlessForHub(o any) (any, error) {
	cr, ok := o.(*cmapi.CertificateRequest)
	if !ok {
		return o, nil
	}
	if ForHub(cr) {
		cr.ManagedFields = nil
		return cr, nil
	}
	return &cmapi.CertificateRequest{
		TypeMeta: cr.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: cr.Name, Namespace: cr.Namespace, UID: cr.UID, ResourceVersion: cr.ResourceVersion,
			Generation: cr.Generation, DeletionTimestamp: cr.DeletionTimestamp,
		},
		Spec: cmapi.CertificateRequestSpec{IssuerRef: cr.Spec.IssuerRef},
	}, nil
}

// Signer signs the downstream CertificateRequests that name a hub issuer,
// before it is added to a manager.
type Signer struct{ opts Options }

// New validates opts and applies their defaults.
func New(opts Options) (*Signer, error) {
	opts.defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Signer{opts: opts}, nil
}

// SetupWithManager registers the signer with the multicluster manager.
func (sg *Signer) SetupWithManager(mgr mcmanager.Manager) error {
	opts := sg.opts
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return err
	}
	r := &reconciler{opts: opts, metrics: m, getCluster: mgr.GetCluster}
	base := mgr.GetLogger().WithName("crsign")
	forHub := predicate.NewPredicateFuncs(func(o client.Object) bool {
		cr, ok := o.(*cmapi.CertificateRequest)
		return ok && ForHub(cr)
	})
	return mcbuilder.ControllerManagedBy(mgr).
		Named("crsign").
		For(&cmapi.CertificateRequest{}, mcbuilder.WithPredicates(forHub)).
		WatchesRawSource(modeSource(opts.Modes, mgr.GetCluster, base)).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			NewQueue:                fairqueue.NewQueue(opts.MaxConcurrentReconcilesPerCluster), // clusters take turns, each in at most half the workers
			RateLimiter:             fairqueue.RetryBackoff(),
		}).
		WithLogConstructor(func(req *mcreconcile.Request) logr.Logger {
			if req == nil {
				return base
			}
			return base.WithValues("cluster", req.ClusterName, "namespace", req.Namespace, "name", req.Name)
		}).
		Complete(fence.RetryPaused(opts.Fence, r)) // a late fence renewal: what ran meanwhile is tried again
}

// modeSource queues every hub request of a cluster whose mode changed (to
// external or issue: they are signed now).
func modeSource(m Modes, get func(context.Context, multicluster.ClusterName) (cluster.Cluster, error), log logr.Logger) source.TypedSource[mcreconcile.Request] {
	var subscribe func(func(multicluster.ClusterName))
	if m != nil {
		subscribe = m.Subscribe
	}
	return writegate.RequeueSource(subscribe, get, func() client.ObjectList { return &cmapi.CertificateRequestList{} }, func(o client.Object) bool {
		cr, ok := o.(*cmapi.CertificateRequest)
		return ok && ForHub(cr)
	}, log)
}
