package certsync

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/certmetrics"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/fairqueue"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/policyfeed"
	"github.com/certhub/certhub/internal/secretcache"
	"github.com/certhub/certhub/internal/writegate"
)

// Defaults for Options.
const (
	// DefaultIssuerRetryInterval is how soon a Certificate whose issuer is missing or not ready is retried.
	DefaultIssuerRetryInterval = 30 * time.Second
	// DefaultMaxConcurrentReconciles is the number of Certificates reconciled at once, across clusters.
	DefaultMaxConcurrentReconciles = 4
	// DefaultReconcileTimeout bounds one reconcile (above RSA-8192 key
	// generation on a slow core, which cannot be interrupted).
	DefaultReconcileTimeout = 2 * time.Minute
	// DefaultMaxBudgetDelay: a renewal may wait for the issuance budget
	// for half the time between its renewal time and expiry, no longer.
	DefaultMaxBudgetDelay = 0.5
	// newCertificateBudgetDelay is how long a Certificate without a usable
	// certificate may wait for the budget after its creation: it serves
	// nothing yet, so it goes before renewals of valid ones.
	newCertificateBudgetDelay = 10 * time.Minute
	// DefaultMaxConcurrentLargeKeys is how many workers may generate a large
	// key (RSA ≥ 4096 bits) at once; the others stay free for everyone else.
	DefaultMaxConcurrentLargeKeys = 1

	// largeKeyRetry is how soon a Certificate that needs a large key is
	// tried again when every large-key slot is taken (its worker is freed
	// meanwhile).
	largeKeyRetry = 500 * time.Millisecond

	// policyPendingRequeue is how soon a Certificate is decided again when
	// the issuance policies have not been read yet (hub start-up).
	policyPendingRequeue = time.Second

	// conflictRequeue is how soon a Certificate that met a concurrent change
	// is decided again, on fresh data.
	conflictRequeue = 100 * time.Millisecond
)

// IssuerResolver finds the Issuer for a Certificate's issuerRef. *issuers.Resolver implements it.
type IssuerResolver interface {
	Resolve(ctx context.Context, ref cmmeta.IssuerReference, namespace string, downstream client.Reader) (issuers.Issuer, error)
}

// Rotation says which clusters sign with a rotating CA's next key pair.
// *rotation.Rotator implements it.
type Rotation interface {
	// Override returns the next CA's issuer and signing certificate when
	// cluster must sign with it for ref now.
	Override(ctx context.Context, cluster multicluster.ClusterName, ref cmmeta.IssuerReference) (issuers.Issuer, *x509.Certificate, bool, error)
	// Subscribe calls fn after every phase or wave change, and when a
	// cluster's bundles come to hold the next CA.
	Subscribe(fn func())
}

// Revocation says which issued certificates a CertificateRevocation in
// the hub wants replaced (renewed before their serial is revoked).
// *revocation.Controller implements it.
type Revocation interface {
	// Subscribe calls fn with each Certificate newly selected.
	Waker
	// MustRenew reports whether cert, the certificate issued for
	// cluster's namespace/name, is selected and not replaced yet.
	MustRenew(cluster, namespace, name string, cert *x509.Certificate) (message string, ok bool)
}

// Record is the hub's record of the certificates it signed.
// *issued.Record implements it.
type Record interface {
	// Add stores e, returning once it is stored.
	Add(ctx context.Context, e issued.Entry) error
	// LookupFor is the entry of serial signed by issuer as delivered to
	// o, else the serial's entry whoever it was signed for.
	LookupFor(issuer, serial string, o issued.Object) (issued.Entry, bool)
	// Rebuilding reports whether certificates found downstream that
	// verify are recorded rather than re-issued.
	Rebuilding() bool
	// Ready is closed once the record has been read: nothing is decided
	// before (an empty record would re-issue every certificate).
	Ready() <-chan struct{}
}

// Budget admits issuances at the hub's rate, shared fairly by cluster and
// namespace. *budget.Budget implements it.
type Budget interface {
	// Admit returns 0 when key, of tenant, may be issued now, else how
	// long to wait; due is when it must be issued at the latest, lane how
	// pressing it is (budget.Urgent when nothing valid is served).
	Admit(key string, tenant budget.Tenant, due time.Time, lane budget.Lane) time.Duration
	// Forget says key no longer waits.
	Forget(key string)
}

// Policy decides whether a Certificate may be issued. *policy.Engine
// implements it.
type Policy interface {
	// Evaluate decides on crt in cluster; pending is true until the
	// policies have been read (the caller retries shortly).
	Evaluate(cluster string, crt *cmapi.Certificate, tmpl *x509.Certificate) (d policy.Decision, pending bool)
	// Subscribe calls fn after every change of what Evaluate decides on.
	Subscribe(fn func())
}

// Options configure the Certificate reconciler.
type Options struct {
	// Issuers resolves issuerRefs in the hub. Required.
	Issuers IssuerResolver
	// Identity names this hub replica in WriterAnnotation when Fence is nil. Defaults to the hostname.
	Identity string
	// Policy is asked before every issuance (issuance policies in the hub).
	// Nil allows everything.
	Policy Policy
	// Fence is asked before every downstream write, which carries the
	// instant ownership ends as its deadline. Nil means this replica writes
	// everywhere (a single replica), stamped with Identity.
	Fence fence.Fence
	// IssuerRetryInterval defaults to DefaultIssuerRetryInterval.
	IssuerRetryInterval time.Duration
	// MaxConcurrentReconciles defaults to DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// MaxConcurrentReconcilesPerCluster bounds the workers one cluster
	// occupies at once, so a cluster whose API server hangs mid-response
	// leaves the rest to the others (fairqueue.go). Defaults to half of
	// MaxConcurrentReconciles, rounded up.
	MaxConcurrentReconcilesPerCluster int
	// ReconcileTimeout is the deadline of one reconcile. Defaults to
	// DefaultReconcileTimeout.
	ReconcileTimeout time.Duration
	// MaxConcurrentLargeKeys bounds the workers generating RSA keys of 4096
	// bits or more at once, so a flood of them from one tenant leaves the
	// other MaxConcurrentReconciles-MaxConcurrentLargeKeys workers to
	// everyone else. Defaults to DefaultMaxConcurrentLargeKeys.
	MaxConcurrentLargeKeys int
	// Rotation, when set, moves Certificates to a rotating CA's next key
	// pair cluster by cluster (internal/rotation).
	Rotation Rotation
	// Wake, when set, queues a Certificate again when an issuer has news for
	// it (an ACME order finished), instead of waiting for its next poll.
	Wake Waker
	// Revocation, when set, re-issues the certificates a
	// CertificateRevocation selects (internal/revocation).
	Revocation Revocation
	// Record, when set, is the hub's record of what it signed
	// (internal/issued): every certificate is recorded before it is
	// written, and a Secret's certificate is kept only when it is the one
	// recorded for its Certificate (record.go). Nil: no record (tests of
	// other concerns); the issuer annotations and the certificate decide.
	Record Record
	// RenewalAdvice, when set, is asked when each issued certificate should
	// be renewed according to its CA (ACME renewal information, RFC 9773):
	// the earlier of its answer and the spec's renewal time is used, so a
	// CA that moves a window earlier (a revocation event) renews early.
	RenewalAdvice RenewalAdvisor
	// Secrets holds the data of the managed Secrets by version (the watch
	// holds only their metadata); the hub shares it with the CA rotation.
	// Defaults to a new one.
	Secrets *secretcache.Store
	// Indexer, when set, indexes every engaged cluster's Certificates by
	// spec.secretName (the hub passes its inventory.Provider): finding the
	// Certificates that share a Secret is then one lookup, not a list of
	// the namespace on every reconcile (a namespace of 1,000 Certificates
	// made that a million copies per pass). Nil: the namespace is listed.
	Indexer client.FieldIndexer
	// Budget, when set, admits every issuance (the hub's --issuance-rate);
	// a Certificate waiting for it shows Issuing=True, reason RateLimited.
	Budget Budget
	// RenewalJitter renews each certificate earlier than cert-manager would
	// by up to this fraction of its renewal window (renewal time → notAfter),
	// fixed per Certificate, so a mass of Certificates issued together does
	// not renew together. 0 (default): cert-manager's renewal time exactly.
	RenewalJitter float64
	// MaxBudgetDelay is the fraction of a certificate's remaining life at
	// its renewal time it may spend waiting for the budget; past it, it is
	// issued regardless. Defaults to DefaultMaxBudgetDelay.
	MaxBudgetDelay float64
	// MaxNames is how many names (SANs of every kind, and the attributes
	// of a literalSubject) one Certificate may ask for; more is refused
	// (InvalidNames) before anything else is done with it, so one tenant's
	// 60,000-name Certificate costs the hub nothing on every reconcile.
	// Defaults to issuers.DefaultMaxNames.
	MaxNames int
	// Registerer receives the certhub_certificate_* metrics. Defaults to controller-runtime's registry.
	Registerer prometheus.Registerer
	// CertificateMetrics says which Certificates have series of their own
	// (certmetrics.All, Problems or None; --certificate-metrics). Defaults
	// to certmetrics.DefaultMode.
	CertificateMetrics string
	// LoopMaxIssuances is how many times one generation of a Certificate may
	// be issued within LoopWindow before the loop guard pauses it (issuances
	// after a Secret deletion or a manual trigger start the count again).
	// Defaults to DefaultLoopMaxIssuances.
	LoopMaxIssuances int
	// Migration, when set, says per cluster whether the hub writes there
	// (certhub.io/mode, cert-manager still active); where it does not, every
	// Certificate is decided and nothing is written: the decision goes to
	// the plan (internal/writegate). Nil: the hub writes everywhere it owns.
	Migration Migration
	// LoopWindow defaults to DefaultLoopWindow.
	LoopWindow time.Duration
	// LoopBackoff is the first pause after the guard trips, doubled on each
	// further trip up to LoopMaxBackoff. Defaults to DefaultLoopBackoff and
	// DefaultLoopMaxBackoff.
	LoopBackoff, LoopMaxBackoff time.Duration

	clock clock.PassiveClock // test seam; defaults to the real clock
}

func (o *Options) defaults() {
	if o.Secrets == nil {
		o.Secrets = &secretcache.Store{}
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
	if o.IssuerRetryInterval == 0 {
		o.IssuerRetryInterval = DefaultIssuerRetryInterval
	}
	if o.MaxConcurrentReconciles == 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if o.MaxConcurrentReconcilesPerCluster == 0 {
		o.MaxConcurrentReconcilesPerCluster = (o.MaxConcurrentReconciles + 1) / 2
	}
	if o.MaxBudgetDelay == 0 {
		o.MaxBudgetDelay = DefaultMaxBudgetDelay
	}
	if o.ReconcileTimeout == 0 {
		o.ReconcileTimeout = DefaultReconcileTimeout
	}
	if o.MaxConcurrentLargeKeys == 0 {
		o.MaxConcurrentLargeKeys = DefaultMaxConcurrentLargeKeys
	}
	if o.LoopMaxIssuances == 0 {
		o.LoopMaxIssuances = DefaultLoopMaxIssuances
	}
	if o.MaxNames == 0 {
		o.MaxNames = issuers.DefaultMaxNames
	}
	if o.LoopWindow == 0 {
		o.LoopWindow = DefaultLoopWindow
	}
	if o.LoopBackoff == 0 {
		o.LoopBackoff = DefaultLoopBackoff
	}
	if o.LoopMaxBackoff == 0 {
		o.LoopMaxBackoff = DefaultLoopMaxBackoff
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
	if o.CertificateMetrics == "" {
		o.CertificateMetrics = certmetrics.DefaultMode
	}
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
}

// Validate reports whether the options are usable.
func (o Options) Validate() error {
	if o.Issuers == nil {
		return errors.New("certsync: Issuers is required")
	}
	if o.RenewalJitter < 0 || o.RenewalJitter > 1 {
		return errors.New("certsync: RenewalJitter must be in [0, 1]")
	}
	if o.CertificateMetrics != "" && !slices.Contains(certmetrics.Modes, o.CertificateMetrics) {
		return fmt.Errorf("certsync: CertificateMetrics %q: want one of %v", o.CertificateMetrics, certmetrics.Modes)
	}
	if o.IssuerRetryInterval < 0 || o.MaxConcurrentReconciles < 0 || o.MaxConcurrentReconcilesPerCluster < 0 || o.ReconcileTimeout < 0 || o.MaxConcurrentLargeKeys < 0 {
		return errors.New("certsync: IssuerRetryInterval, MaxConcurrentReconciles, MaxConcurrentReconcilesPerCluster, ReconcileTimeout and MaxConcurrentLargeKeys must not be negative")
	}
	if o.MaxNames < 0 {
		return errors.New("certsync: MaxNames must not be negative")
	}
	if o.LoopMaxIssuances < 0 || o.LoopWindow < 0 || o.LoopBackoff < 0 || o.LoopMaxBackoff < 0 {
		return errors.New("certsync: LoopMaxIssuances, LoopWindow, LoopBackoff and LoopMaxBackoff must not be negative")
	}
	return nil
}

// Informers are the downstream objects certsync watches, as the cache
// holds them (Certificates unstructured, Secrets' metadata label-selected
// by CacheOptions): started before a cluster is engaged, they keep a standby
// replica's cache warm.
func Informers() []client.Object {
	return []client.Object{certspec.NewObject(), secretcache.Meta()}
}

// CacheOptions makes a downstream cluster cache only the Secrets certhub
// manages, never every Secret (cert-manager's memory lesson), and makes its
// client read unstructured objects from the cache: Certificates are cached
// unstructured (decode.go), and controller-runtime's client otherwise reads
// every unstructured object live — a GET per reconcile and a LIST of the
// namespace's Certificates for the Secret-owner check.
func CacheOptions() cluster.Option {
	return func(o *cluster.Options) {
		if o.Client.Cache == nil {
			o.Client.Cache = &client.CacheOptions{}
		}
		o.Client.Cache.Unstructured = true
		if o.Cache.ByObject == nil {
			o.Cache.ByObject = map[client.Object]cache.ByObject{}
		}
		o.Cache.ByObject[&corev1.Secret{}] = cache.ByObject{
			Label: labels.SelectorFromSet(labels.Set{hubapi.ManagedByLabel: hubapi.ManagedByValue}),
		}
	}
}

// Syncer is the Certificate reconciler of every engaged downstream
// cluster, before it is added to a manager.
type Syncer struct{ opts Options }

// New validates opts and applies their defaults.
func New(opts Options) (*Syncer, error) {
	opts.defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Syncer{opts: opts}, nil
}

// SetupWithManager registers the Certificate reconciler for every engaged downstream cluster.
func (s *Syncer) SetupWithManager(mgr mcmanager.Manager) error {
	opts := s.opts
	m, err := certmetrics.New(certmetrics.Options{Registerer: opts.Registerer, Mode: opts.CertificateMetrics, Clock: opts.clock})
	if err != nil {
		return err
	}
	if err := mgr.Add(metricsJanitor{m: m, secrets: opts.Secrets}); err != nil {
		return fmt.Errorf("failed to add metrics janitor: %w", err)
	}
	if opts.Indexer != nil {
		if err := opts.Indexer.IndexField(context.Background(), certspec.NewObject(), certspec.SecretNameField, certspec.SecretNameOf); err != nil {
			return fmt.Errorf("failed to index Certificates by %s: %w", certspec.SecretNameField, err)
		}
	}
	r := newReconciler(opts, m, mgr.GetCluster)
	base := mgr.GetLogger().WithName("certsync")
	feed, err := policyfeed.New(policyfeed.Options{Policy: opts.Policy, Log: base})
	if err != nil {
		return err
	}
	if opts.Policy != nil || opts.Rotation != nil {
		if err := feed.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("failed to add policy feed: %w", err)
		}
	}
	if opts.Policy != nil {
		opts.Policy.Subscribe(feed.Kick)
	}
	if m := opts.Migration; m != nil {
		opts.Secrets.SetReadable(func(name multicluster.ClusterName) bool {
			mode := m.Mode(name)
			return mode != writegate.Off && mode != writegate.External
		})
		m.Subscribe(func(name multicluster.ClusterName) {
			if mode := m.Mode(name); mode == writegate.Off || mode == writegate.External {
				opts.Secrets.Drop(name) // keys stay downstream: none is kept here either
			}
		})
	}
	if opts.Rotation != nil {
		opts.Rotation.Subscribe(feed.KickAll) // a wave started, or a cluster's bundles hold the next CA: its Certificates are decided again
	}
	return mcbuilder.ControllerManagedBy(mgr).
		Named("certsync").
		For(certspec.NewObject()). // unstructured: one undecodable Certificate must not stall the cluster (decode.go)
		Watches(secretcache.Meta(), mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](secretToCertificate)).
		WatchesRawSource(feed.Source()).                                                // policy changes: every Certificate decided again
		WatchesRawSource(wakeSource(opts.Wake, mgr.GetCluster)).                        // an issuer's news (a finished ACME order)
		WatchesRawSource(wakeSource(revocationWaker(opts.Revocation), mgr.GetCluster)). // a certificate selected for revocation
		WatchesRawSource(migrationSource(opts.Migration, mgr.GetCluster, base)).        // a cluster's mode or conflict changed
		WithOptions(controller.TypedOptions[mcreconcile.Request]{MaxConcurrentReconciles: opts.MaxConcurrentReconciles, ReconciliationTimeout: opts.ReconcileTimeout,
			NewQueue:    fairqueue.NewQueue(opts.MaxConcurrentReconcilesPerCluster), // clusters take turns, each in at most half the workers (fairqueue.go)
			RateLimiter: fairqueue.RetryBackoff()}).
		WithLogConstructor(func(req *mcreconcile.Request) logr.Logger {
			if req == nil {
				return base
			}
			return base.WithValues("cluster", req.ClusterName, "namespace", req.Namespace, "name", req.Name)
		}).
		Complete(fence.RetryPaused(opts.Fence, r)) // a late fence renewal: what ran meanwhile is tried again
}

// revocationWaker is r as a Waker; nil when r is.
func revocationWaker(r Revocation) Waker {
	if r == nil {
		return nil
	}
	return r
}

// secretToCertificate maps a managed Secret to the Certificate named in its annotation.
func secretToCertificate(_ context.Context, s client.Object) []mcreconcile.Request {
	name := s.GetAnnotations()[cmapi.CertificateNameKey]
	if name == "" {
		return nil
	}
	return []mcreconcile.Request{{Request: reconcile.Request{NamespacedName: client.ObjectKey{Namespace: s.GetNamespace(), Name: name}}}}
}

func (o Options) loopGuard() loopGuard {
	return loopGuard{max: o.LoopMaxIssuances, window: o.LoopWindow, backoff: o.LoopBackoff, maxBackoff: o.LoopMaxBackoff}
}
