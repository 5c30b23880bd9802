package certsync

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issuance"
	"github.com/certhub/certhub/internal/policy"
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

// IssuerResolver finds the Issuer for a Certificate's issuerRef. *issuance.Resolver implements it.
type IssuerResolver interface {
	Resolve(ctx context.Context, ref cmmeta.IssuerReference, namespace string, downstream client.Reader) (issuance.Issuer, error)
}

// Rotation says which clusters sign with a rotating CA's next key pair.
// *rotation.Rotator implements it.
type Rotation interface {
	// Override returns the next CA's issuer and signing certificate when
	// cluster must sign with it for ref now.
	Override(ctx context.Context, cluster multicluster.ClusterName, ref cmmeta.IssuerReference) (issuance.Issuer, *x509.Certificate, bool, error)
	// Subscribe calls fn after every phase or wave change.
	Subscribe(fn func())
}

// Budget admits issuances at the hub's rate, most urgent first.
// *budget.Budget implements it.
type Budget interface {
	// Admit returns 0 when key may be issued now, else how long to wait;
	// due is when it must be issued at the latest.
	Admit(key string, due time.Time) time.Duration
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
	// RenewalAdvice, when set, is asked when each issued certificate should
	// be renewed according to its CA (ACME renewal information, RFC 9773):
	// the earlier of its answer and the spec's renewal time is used, so a
	// CA that moves a window earlier (a revocation event) renews early.
	RenewalAdvice RenewalAdvisor
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
	// Registerer receives the certhub_certificate_* metrics. Defaults to controller-runtime's registry.
	Registerer prometheus.Registerer
	// LoopMaxIssuances is how many times one generation of a Certificate may
	// be issued within LoopWindow before the loop guard pauses it (issuances
	// after a Secret deletion or a manual trigger start the count again).
	// Defaults to DefaultLoopMaxIssuances.
	LoopMaxIssuances int
	// LoopWindow defaults to DefaultLoopWindow.
	LoopWindow time.Duration
	// LoopBackoff is the first pause after the guard trips, doubled on each
	// further trip up to LoopMaxBackoff. Defaults to DefaultLoopBackoff and
	// DefaultLoopMaxBackoff.
	LoopBackoff, LoopMaxBackoff time.Duration

	clock clock.PassiveClock // test seam; defaults to the real clock
}

func (o *Options) defaults() {
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
	if o.IssuerRetryInterval < 0 || o.MaxConcurrentReconciles < 0 || o.MaxConcurrentReconcilesPerCluster < 0 || o.ReconcileTimeout < 0 || o.MaxConcurrentLargeKeys < 0 {
		return errors.New("certsync: IssuerRetryInterval, MaxConcurrentReconciles, MaxConcurrentReconcilesPerCluster, ReconcileTimeout and MaxConcurrentLargeKeys must not be negative")
	}
	if o.LoopMaxIssuances < 0 || o.LoopWindow < 0 || o.LoopBackoff < 0 || o.LoopMaxBackoff < 0 {
		return errors.New("certsync: LoopMaxIssuances, LoopWindow, LoopBackoff and LoopMaxBackoff must not be negative")
	}
	return nil
}

// Informers are the downstream objects certsync watches, as the cache
// holds them (Certificates unstructured, Secrets label-selected by
// CacheOptions): started before a cluster is engaged, they keep a standby
// replica's cache warm.
func Informers() []client.Object {
	return []client.Object{newCertificateObject(), &corev1.Secret{}}
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
			Label: labels.SelectorFromSet(labels.Set{ManagedLabel: ManagedValue}),
		}
	}
}

// SetupWithManager registers the Certificate reconciler for every engaged downstream cluster.
func SetupWithManager(mgr mcmanager.Manager, opts Options) error {
	opts.defaults()
	if err := opts.Validate(); err != nil {
		return err
	}
	m, err := newSyncMetrics(opts.Registerer)
	if err != nil {
		return err
	}
	if err := mgr.Add(metricsJanitor{m}); err != nil {
		return fmt.Errorf("failed to add metrics janitor: %w", err)
	}
	r := newReconciler(opts, m, mgr.GetCluster)
	base := mgr.GetLogger().WithName("certsync")
	feed := newPolicyFeed(base, opts.Policy)
	if opts.Policy != nil || opts.Rotation != nil {
		if err := mgr.Add(feed); err != nil {
			return fmt.Errorf("failed to add policy feed: %w", err)
		}
	}
	if opts.Policy != nil {
		opts.Policy.Subscribe(feed.kick)
	}
	if opts.Rotation != nil {
		opts.Rotation.Subscribe(feed.kickAll) // a wave started: its clusters' Certificates are decided again
	}
	return mcbuilder.ControllerManagedBy(mgr).
		Named("certsync").
		For(newCertificateObject()). // unstructured: one undecodable Certificate must not stall the cluster (decode.go)
		Watches(&corev1.Secret{}, mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](secretToCertificate)).
		WatchesRawSource(feed.source()).                         // policy changes: every Certificate decided again
		WatchesRawSource(wakeSource(opts.Wake, mgr.GetCluster)). // an issuer's news (a finished ACME order)
		WithOptions(controller.TypedOptions[mcreconcile.Request]{MaxConcurrentReconciles: opts.MaxConcurrentReconciles, ReconciliationTimeout: opts.ReconcileTimeout,
			NewQueue: newFairQueue(opts.MaxConcurrentReconcilesPerCluster)}). // clusters take turns, each in at most half the workers (fairqueue.go)
		WithLogConstructor(func(req *mcreconcile.Request) logr.Logger {
			if req == nil {
				return base
			}
			return base.WithValues("cluster", req.ClusterName, "namespace", req.Namespace, "name", req.Name)
		}).
		Complete(r)
}

// secretToCertificate maps a managed Secret to the Certificate named in its annotation.
func secretToCertificate(_ context.Context, s client.Object) []mcreconcile.Request {
	name := s.GetAnnotations()[cmapi.CertificateNameKey]
	if name == "" {
		return nil
	}
	return []mcreconcile.Request{{Request: reconcile.Request{NamespacedName: client.ObjectKey{Namespace: s.GetNamespace(), Name: name}}}}
}

type reconciler struct {
	// getCluster is the manager's GetCluster (a seam for unit tests).
	getCluster func(ctx context.Context, name multicluster.ClusterName) (cluster.Cluster, error)
	opts       Options
	metrics    *syncMetrics
	guard      loopGuard
	largeKeys  chan struct{} // a slot per worker allowed to generate a large key
}

// newReconciler builds the reconciler from defaulted options.
func newReconciler(opts Options, m *syncMetrics, getCluster func(context.Context, multicluster.ClusterName) (cluster.Cluster, error)) *reconciler {
	return &reconciler{getCluster: getCluster, opts: opts, metrics: m, guard: opts.loopGuard(), largeKeys: make(chan struct{}, opts.MaxConcurrentLargeKeys)}
}

func (o Options) loopGuard() loopGuard {
	return loopGuard{max: o.LoopMaxIssuances, window: o.LoopWindow, backoff: o.LoopBackoff, maxBackoff: o.LoopMaxBackoff}
}

// target is one Certificate in one cluster, with what is needed to write there.
type target struct {
	name multicluster.ClusterName
	cl   cluster.Cluster
	crt  *cmapi.Certificate
	rec  recorder.EventRecorder

	advice advice // the CA's renewal time for the current certificate (Options.RenewalAdvice)

	override     issuance.Issuer   // a CA rotation's new CA signs for this cluster (Options.Rotation)
	template     *x509.Certificate // what is signed: the template the policy allowed, constrained by it
	violation    bool              // an issued certificate the policies no longer allow
	violationMsg string            // why
}

// writeContext returns the writer stamp and a context for one downstream
// write, and the func that ends it (fence.WriteContext): the write's
// deadline is the instant ownership ends, so a replica that stalls (GC
// pause, SIGSTOP, a slow network) cannot complete a write after another may
// have taken the cluster over. fence.ErrNotOwner when this replica may not
// write now.
func (r *reconciler) writeContext(ctx context.Context, t *target) (string, context.Context, func(), error) {
	if r.opts.Fence == nil {
		return r.opts.Identity, ctx, func() {}, nil
	}
	return fence.WriteContext(ctx, r.opts.Fence, t.name)
}

// stamp returns the writer stamp if this replica may write to t's cluster now.
func (r *reconciler) stamp(t *target) (string, error) {
	if r.opts.Fence == nil {
		return r.opts.Identity, nil
	}
	s, ok := r.opts.Fence.Owns(t.name)
	if !ok {
		return "", fence.ErrNotOwner
	}
	return s, nil
}

// eventf records an Event on obj in t's cluster, only while this replica
// owns the cluster: a replica that lost it mid-reconcile says nothing there.
func (r *reconciler) eventf(t *target, obj runtime.Object, eventType, reason, format string, args ...any) {
	if _, err := r.stamp(t); err != nil {
		return
	}
	t.rec.Eventf(obj, nil, eventType, reason, "Issue", format, args...)
}

// Reconcile handles one Certificate. A conflict means someone (a user, cmctl,
// a stale cache) changed the Certificate meanwhile: it is requeued and
// decided again on fresh data, quietly.
func (r *reconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		logr.FromContextOrDiscard(ctx).V(1).Info("conflict; requeueing", "reason", apierrors.ReasonForError(err))
		return reconcile.Result{RequeueAfter: conflictRequeue}, nil
	}
	return res, err
}

func (r *reconciler) reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	cl, err := r.getCluster(ctx, req.ClusterName)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to get cluster %q: %w", req.ClusterName, err)
	}
	u := newCertificateObject()
	if err := cl.GetClient().Get(ctx, req.NamespacedName, u); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.forget(req.ClusterName, req.Namespace, req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if u.GetDeletionTimestamp() != nil {
		return reconcile.Result{}, nil
	}
	t := &target{name: req.ClusterName, cl: cl, rec: cl.GetEventRecorder("certhub")}
	if _, err := r.stamp(t); err != nil {
		log.V(1).Info("skipping: cluster not owned by this replica")
		return reconcile.Result{}, nil // the owner reconciles it
	}
	crt, err := decodeCertificate(u)
	if se := (*specError)(nil); errors.As(err, &se) {
		return reconcile.Result{}, r.refuseUndecodable(ctx, t, u, se)
	}
	t.crt = crt
	if se := (*specError)(nil); errors.As(validateSpec(crt), &se) {
		return reconcile.Result{}, r.setNotReady(ctx, t, se.reason, "Invalid Certificate spec: "+se.Error())
	}
	if ie := issuance.ExternalGroup(crt.Spec.IssuerRef); ie != nil {
		// Valid for cert-manager's webhook, but no issuer of the hub can sign
		// for it: terminal until the Certificate changes, decided before the
		// trigger chain so nothing is ever attempted.
		return reconcile.Result{}, r.setNotReady(ctx, t, ie.Reason, ie.Message)
	}

	// The certificate that will be signed, built once: the policy decides
	// on it and the signer gets it, so nothing is signed unseen.
	tmpl, err := issuance.Template(crt)
	if err != nil {
		return reconcile.Result{}, r.setNotReady(ctx, t, ReasonInvalidSpec, fmt.Sprintf("Cannot build certificate from spec: %v", err))
	}
	decision := policy.Decision{Allowed: true}
	if r.opts.Policy != nil {
		var pending bool
		if decision, pending = r.opts.Policy.Evaluate(string(t.name), crt, tmpl); pending {
			return reconcile.Result{RequeueAfter: policyPendingRequeue}, nil
		}
	}

	secret, foreign, err := r.getSecret(ctx, cl, crt)
	if err != nil {
		return reconcile.Result{}, err
	}
	if foreign {
		if why := notAdoptable(secret, crt); why != "" {
			// The foreign Secret is not watched (the cache holds managed
			// Secrets only): look again for an adoption grant.
			return reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}, r.setNotReady(ctx, t, ReasonSecretNotOwned, why)
		}
	}
	owner, others, err := secretOwner(ctx, cl.GetClient(), crt, secret)
	if err != nil {
		return reconcile.Result{}, err
	}
	if owner != crt.Name {
		msg := fmt.Sprintf("Secret %q is also the secretName of Certificate(s) %s in this namespace; %q owns it (the one the Secret's %s annotation names, else the oldest), so nothing is issued for this Certificate until it is the only one",
			crt.Spec.SecretName, strings.Join(others, ", "), owner, cmapi.CertificateNameKey)
		return reconcile.Result{RequeueAfter: duplicateRequeue}, r.setNotReady(ctx, t, ReasonDuplicateSecretName, msg)
	}

	pw, err := r.keystorePasswords(ctx, t)
	if err != nil {
		var nf *passwordError
		if errors.As(err, &nf) {
			return reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}, r.setNotReady(ctx, t, ReasonKeystorePasswordNotFound, nf.Error())
		}
		return reconcile.Result{}, err
	}

	now := r.opts.clock.Now()
	reason, message, reissue, st := triggerChain.evaluate(input{crt: crt, secret: secret, now: now, jitter: r.opts.RenewalJitter})
	if reissue && secret != nil {
		// The cache may not have seen the last write to this Secret yet (ours
		// a moment ago, or the previous owner's before a handoff): decide on
		// the live object before signing, or one spec would be issued twice.
		live, err := r.liveSecret(ctx, cl, client.ObjectKeyFromObject(secret))
		if err != nil {
			return reconcile.Result{}, err
		}
		if live == nil || live.ResourceVersion != secret.ResourceVersion {
			if live != nil && live.Labels[ManagedLabel] != ManagedValue && notAdoptable(live, crt) != "" {
				return reconcile.Result{RequeueAfter: conflictRequeue}, nil // someone took the Secret over meanwhile; look again from the top
			}
			secret = live
			reason, message, reissue, st = triggerChain.evaluate(input{crt: crt, secret: secret, now: now, jitter: r.opts.RenewalJitter})
		}
	}
	if r.opts.Rotation != nil {
		iss, ca, ok, err := r.opts.Rotation.Override(ctx, t.name, crt.Spec.IssuerRef)
		if err != nil {
			return reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}, r.setNotReady(ctx, t, issuance.ReasonIssuerNotReady, err.Error())
		}
		if ok {
			t.override = iss
			if !reissue && st != nil && st.cert != nil && st.cert.CheckSignatureFrom(ca) != nil {
				reissue, reason = true, ReasonCARotation
				message = fmt.Sprintf("Issuing certificate as ClusterIssuer %q rotates its CA and this cluster's wave signs with the new one", crt.Spec.IssuerRef.Name)
			}
		}
	}
	if !reissue && st != nil && st.cert != nil && r.opts.RenewalAdvice != nil {
		t.advice = askAdvice(ctx, r.opts.RenewalAdvice, t, st.cert)
		if t.advice.ok && !now.Before(t.advice.at) {
			reissue, reason = true, ReasonRenewing
			message = fmt.Sprintf("Renewing certificate as its CA's renewal window (ARI) says to renew at %s", t.advice.at.Format(time.RFC1123))
		}
	}
	if !reissue {
		if r.opts.Budget != nil {
			r.opts.Budget.Forget(budgetKey(t))
		}
		if err := r.repairSecret(ctx, t, secret, pw); err != nil {
			return reconcile.Result{}, err
		}
		// A policy changed since the issuance no longer allows it: it is
		// not revoked, but flagged (condition, metric, certhub status).
		t.violation = !decision.Allowed
		t.violationMsg = decision.Message
		return r.setReady(ctx, t, st.cert, 0)
	}
	if !decision.Allowed {
		// Nothing is signed nor written; a policy change decides it again.
		return reconcile.Result{}, r.setNotReady(ctx, t, ReasonPolicyDenied, "Denied by issuance policy: "+decision.Message)
	}
	decision.Constrain(tmpl)
	t.template = tmpl
	d := r.guard.decide(crt, secret, reason, now)
	if !d.allow {
		return r.pauseLoop(ctx, t, d, reason, message, now)
	}
	if c := apiutil.GetCertificateCondition(crt, cmapi.CertificateConditionIssuing); c != nil && c.Status == cmmeta.ConditionTrue && c.Reason == issuance.ReasonOrderPending {
		// Admitted when its order was created; now only asking after it.
		log.V(1).Info("asking after the order", "message", message)
		return r.issue(ctx, t, secret, st, pw, d.record)
	}
	if r.opts.Budget != nil {
		if wait := r.opts.Budget.Admit(budgetKey(t), r.budgetDue(crt, st)); wait > 0 {
			return r.waitForBudget(ctx, t, wait, reason)
		}
	}
	log.Info("issuing certificate", "reason", reason, "message", message)
	return r.issue(ctx, t, secret, st, pw, d.record)
}

func budgetKey(t *target) string {
	return string(t.name) + "/" + t.crt.Namespace + "/" + t.crt.Name
}

// budgetDue is when crt must be issued at the latest: with a valid
// certificate, its renewal time + MaxBudgetDelay of the rest of its life;
// without one, soon after the Certificate was created.
func (r *reconciler) budgetDue(crt *cmapi.Certificate, st *secretState) time.Time {
	if st != nil && st.cert != nil {
		if rt, err := renewalTime(crt, st.cert, r.opts.RenewalJitter); err == nil && st.cert.NotAfter.After(rt.Time) {
			rest := st.cert.NotAfter.Sub(rt.Time)
			return rt.Add(time.Duration(r.opts.MaxBudgetDelay * float64(rest)))
		}
	}
	return crt.CreationTimestamp.Add(newCertificateBudgetDelay)
}

// waitForBudget holds an issuance back until the budget admits it, saying
// so once with Issuing=True, reason RateLimited.
func (r *reconciler) waitForBudget(ctx context.Context, t *target, wait time.Duration, trigger string) (reconcile.Result, error) {
	res := reconcile.Result{RequeueAfter: wait}
	if c := apiutil.GetCertificateCondition(t.crt, cmapi.CertificateConditionIssuing); c != nil && c.Status == cmmeta.ConditionTrue && c.Reason == ReasonRateLimited {
		return res, nil // already said; the wait is short and changes every time
	}
	r.metrics.budgetWaits.WithLabelValues(string(t.name)).Inc()
	msg := fmt.Sprintf("Waiting for the hub's issuance budget (--issuance-rate), most urgent first; then issuing (%s)", trigger)
	return res, r.updateStatus(ctx, t, false, func(crt *cmapi.Certificate) {
		r.setCondition(crt, cmapi.CertificateConditionIssuing, cmmeta.ConditionTrue, ReasonRateLimited, msg)
	})
}

// pauseLoop holds back an issuance the loop guard refused. When the guard
// has just tripped it records Ready=False with the loop and the trigger, a
// Warning Event and the metric; while backing off it only waits.
func (r *reconciler) pauseLoop(ctx context.Context, t *target, d guardDecision, reason, message string, now time.Time) (reconcile.Result, error) {
	wait := reconcile.Result{RequeueAfter: max(d.retry.Sub(now), time.Second)}
	if !d.tripped {
		return wait, nil
	}
	r.metrics.loopDetected(t.name)
	msg := loopMessage(d, t.crt.Generation, reason, message, now)
	r.eventf(t, t.crt, corev1.EventTypeWarning, ReasonIssuanceLoop, "%s", msg)
	logr.FromContextOrDiscard(ctx).Info("issuance loop detected; pausing", "trigger", reason, "issuances", d.count, "attempt", d.attempts, "retryAt", d.retry)
	err := r.updateStatus(ctx, t, false, func(crt *cmapi.Certificate) {
		r.setCondition(crt, cmapi.CertificateConditionReady, cmmeta.ConditionFalse, ReasonIssuanceLoop, msg)
		removeCondition(crt, cmapi.CertificateConditionIssuing)
		crt.Status.LastFailureTime = &metav1.Time{Time: now}
		crt.Status.FailedIssuanceAttempts = &d.attempts
	})
	return wait, err
}

// refuseUndecodable records Ready=False (and a Warning Event, when that is
// news) on a Certificate that does not decode, with a merge patch of its
// status; nothing else is written for it.
func (r *reconciler) refuseUndecodable(ctx context.Context, t *target, u *unstructured.Unstructured, se *specError) error {
	msg := "Invalid Certificate spec: " + se.Error()
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == string(cmapi.CertificateConditionReady) &&
			m["status"] == "False" && m["reason"] == se.reason && m["message"] == msg {
			return nil // already said
		}
	}
	body, err := undecodableStatus(u.GetGeneration(), se.reason, msg, r.opts.clock.Now())
	if err != nil {
		return err
	}
	_, wctx, cancel, err := r.writeContext(ctx, t)
	if err != nil {
		return nil // not ours to write any more
	}
	defer cancel()
	r.eventf(t, u, corev1.EventTypeWarning, se.reason, "%s", msg)
	logr.FromContextOrDiscard(ctx).Info("certificate not ready", "reason", se.reason, "message", msg)
	if err := t.cl.GetClient().Status().Patch(wctx, u, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("failed to update status of Certificate %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// passwordError: a keystore password Secret or key is missing downstream.
type passwordError struct{ msg string }

func (e *passwordError) Error() string { return e.msg }

// keystorePasswords resolves the keystore passwords: a literal, or a key of a
// Secret in the Certificate's namespace (read live: it is the user's Secret,
// not in the managed-Secret cache).
func (r *reconciler) keystorePasswords(ctx context.Context, t *target) (keystorePasswords, error) {
	var pw keystorePasswords
	ks := t.crt.Spec.Keystores
	if ks == nil {
		return pw, nil
	}
	get := func(kind string, ref cmmeta.SecretKeySelector, literal *string) (string, error) {
		if literal != nil {
			return *literal, nil
		}
		s := &corev1.Secret{}
		key := client.ObjectKey{Namespace: t.crt.Namespace, Name: ref.Name}
		if err := t.cl.GetAPIReader().Get(ctx, key, s); err != nil {
			if apierrors.IsNotFound(err) {
				return "", &passwordError{fmt.Sprintf("%s keystore password Secret %q not found", kind, ref.Name)}
			}
			return "", fmt.Errorf("failed to get %s keystore password Secret %s: %w", kind, key, err)
		}
		if len(s.Data[ref.Key]) == 0 {
			return "", &passwordError{fmt.Sprintf("%s keystore password Secret %q contains no data for key %q", kind, ref.Name, ref.Key)}
		}
		return string(s.Data[ref.Key]), nil
	}
	var err error
	if ks.PKCS12 != nil && ks.PKCS12.Create {
		if pw.pkcs12, err = get("PKCS12", ks.PKCS12.PasswordSecretRef, ks.PKCS12.Password); err != nil {
			return pw, err
		}
	}
	if ks.JKS != nil && ks.JKS.Create {
		if pw.jks, err = get("JKS", ks.JKS.PasswordSecretRef, ks.JKS.Password); err != nil {
			return pw, err
		}
	}
	return pw, nil
}

// repairSecret re-applies a Secret whose certificate is still good but whose
// metadata or extra outputs no longer match the spec (secretTemplate,
// additionalOutputFormats, keystores changed, or someone edited them), like
// cert-manager's post-issuance policies: no new certificate is issued.
func (r *reconciler) repairSecret(ctx context.Context, t *target, s *corev1.Secret, pw keystorePasswords) error {
	d := secretData{certPEM: s.Data[corev1.TLSCertKey], keyPEM: s.Data[corev1.TLSPrivateKeyKey], caPEM: s.Data[cmmeta.TLSCAKey],
		issuances: s.Annotations[IssuancesAnnotation]} // carried over: an apply without it would remove it
	cert, err := pki.DecodeX509CertificateBytes(d.certPEM)
	if err != nil {
		return nil // the trigger chain already judged the data; nothing to repair
	}
	d.cert = cert
	extra, err := extraData(t.crt, pw, d.certPEM, d.keyPEM, d.caPEM)
	if err != nil {
		return err
	}
	d.extra = extra
	want, err := secretApply(t.crt, d, "")
	if err != nil {
		return err
	}
	why := secretDrift(want, s)
	if why == "" {
		return nil
	}
	logr.FromContextOrDiscard(ctx).Info("repairing Secret without reissuing", "drift", why)
	return r.applySecret(ctx, t, s, d)
}

// notAdoptable says why certhub may not take over s, a Secret it did not
// write, for crt ("" when it may): only an Opaque or kubernetes.io/tls
// Secret whose AdoptAnnotation names crt.
func notAdoptable(s *corev1.Secret, crt *cmapi.Certificate) string {
	switch s.Type {
	case "", corev1.SecretTypeOpaque, corev1.SecretTypeTLS:
	default:
		return fmt.Sprintf("Secret %q exists with type %s and was not written by certhub; certhub never takes over typed Secrets. Choose another secretName", s.Name, s.Type)
	}
	if s.Annotations[AdoptAnnotation] == crt.Name {
		return ""
	}
	return fmt.Sprintf("Secret %q exists and was not written by certhub; it is left untouched. To let this Certificate take it over, annotate the Secret (whoever may write it): %s: %q", s.Name, AdoptAnnotation, crt.Name)
}

// liveSecret reads Secret key from the API server, bypassing the cache; nil when it does not exist.
func (r *reconciler) liveSecret(ctx context.Context, cl cluster.Cluster, key client.ObjectKey) (*corev1.Secret, error) {
	live := &corev1.Secret{}
	if err := cl.GetAPIReader().Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("failed to get Secret %s: %w", key, err)
	}
	return live, nil
}

// getSecret returns the target Secret, or nil when it does not exist. foreign
// is true when it exists but certhub did not write it.
func (r *reconciler) getSecret(ctx context.Context, cl cluster.Cluster, crt *cmapi.Certificate) (*corev1.Secret, bool, error) {
	key := client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}
	s := &corev1.Secret{}
	err := cl.GetClient().Get(ctx, key, s)
	if err == nil {
		// The cache selects managed Secrets; the label is checked anyway, so
		// a client without that selector can never make certhub overwrite one.
		return s, s.Labels[ManagedLabel] != ManagedValue, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, fmt.Errorf("failed to get Secret %s: %w", key, err)
	}
	// The cache only holds managed Secrets: a miss may be a Secret that is not
	// ours, or one we just wrote that the cache has not seen yet.
	live, err := r.liveSecret(ctx, cl, key)
	if live == nil || err != nil {
		return nil, false, err
	}
	return live, live.Labels[ManagedLabel] != ManagedValue, nil
}

func (r *reconciler) issue(ctx context.Context, t *target, existing *corev1.Secret, st *secretState, pw keystorePasswords, rec loopRecord) (_ reconcile.Result, err error) {
	crt := t.crt
	start := time.Now()
	defer func() {
		result := "success"
		if ready := apiutil.GetCertificateCondition(t.crt, cmapi.CertificateConditionReady); err != nil || ready == nil || ready.Status != cmmeta.ConditionTrue {
			result = "failed"
		}
		r.metrics.issued(t.name, result, start)
	}()
	issuer, err := t.override, error(nil)
	if issuer == nil {
		issuer, err = r.opts.Issuers.Resolve(ctx, crt.Spec.IssuerRef, crt.Namespace, t.cl.GetAPIReader())
	}
	if ie := (*issuance.Error)(nil); errors.As(err, &ie) {
		return r.issuerError(ctx, t, ie)
	}
	if err != nil {
		return reconcile.Result{}, err
	}

	key := st.key
	reuse := crt.Spec.PrivateKey != nil && crt.Spec.PrivateKey.RotationPolicy == cmapi.RotationPolicyNever &&
		key != nil && len(pki.PrivateKeyMatchesSpec(key, crt.Spec)) == 0
	if o, ok := issuer.(issuance.Orderer); ok {
		if !reuse {
			key = nil // the Orderer generates the key and keeps it in the hub until issued
		}
		return r.order(ctx, t, o, key, existing, st, pw, rec)
	}
	if !reuse {
		if largeKey(crt) {
			select {
			case r.largeKeys <- struct{}{}:
				defer func() { <-r.largeKeys }()
			default:
				logr.FromContextOrDiscard(ctx).V(1).Info("large-key slots taken; freeing the worker", "retryIn", largeKeyRetry)
				return reconcile.Result{RequeueAfter: largeKeyRetry}, nil
			}
		}
		if key, err = pki.GeneratePrivateKeyForCertificate(crt); err != nil {
			return reconcile.Result{}, r.setNotReady(ctx, t, ReasonInvalidSpec, fmt.Sprintf("Cannot generate private key: %v", err))
		}
	}
	keyPEM, err := encodeKey(crt, key)
	if err != nil {
		return reconcile.Result{}, r.setNotReady(ctx, t, ReasonInvalidSpec, fmt.Sprintf("Cannot encode private key: %v", err))
	}
	res, err := issuer.Sign(ctx, issuance.Request{Template: t.template, PublicKey: key.Public(), PrivateKey: key})
	if err != nil {
		return reconcile.Result{}, errors.Join(err, r.setNotReady(ctx, t, ReasonIssuanceFailed, err.Error()))
	}
	return r.write(ctx, t, existing, pw, rec, res, keyPEM, "")
}

// issuerError records an issuer's typed refusal as Ready=False and retries
// after its RetryAfter, the issuer retry interval, or (terminal) never.
func (r *reconciler) issuerError(ctx context.Context, t *target, ie *issuance.Error) (reconcile.Result, error) {
	res := reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}
	switch {
	case ie.Terminal:
		res = reconcile.Result{}
	case ie.RetryAfter > 0:
		res.RequeueAfter = ie.RetryAfter
	}
	return res, r.setNotReady(ctx, t, ie.Reason, ie.Message)
}

// order asks an Orderer (ACME) for the certificate. While the order runs
// the Certificate shows Issuing=True with the order's reason and the
// reconcile returns at once, to be called again; a failed order is
// Ready=False with the CA's error; an issued one is written like a signed one.
func (r *reconciler) order(ctx context.Context, t *target, o issuance.Orderer, key crypto.Signer, existing *corev1.Secret, st *secretState, pw keystorePasswords, rec loopRecord) (reconcile.Result, error) {
	crt := t.crt
	res, err := o.Order(ctx, issuance.OrderRequest{Cluster: string(t.name), Certificate: crt, Template: t.template, Key: key, Current: st.cert})
	if p := (*issuance.Pending)(nil); errors.As(err, &p) {
		wait := reconcile.Result{RequeueAfter: max(p.RetryAfter, 100*time.Millisecond)}
		if c := apiutil.GetCertificateCondition(crt, cmapi.CertificateConditionIssuing); c != nil && c.Status == cmmeta.ConditionTrue && c.Reason == p.Reason && c.Message == p.Message {
			return wait, nil
		}
		return wait, r.updateStatus(ctx, t, false, func(crt *cmapi.Certificate) {
			r.setCondition(crt, cmapi.CertificateConditionIssuing, cmmeta.ConditionTrue, p.Reason, p.Message)
		})
	}
	if ie := (*issuance.Error)(nil); errors.As(err, &ie) {
		return r.issuerError(ctx, t, ie)
	}
	if err != nil {
		return reconcile.Result{}, errors.Join(err, r.setNotReady(ctx, t, ReasonIssuanceFailed, err.Error()))
	}
	if res.PrivateKey == nil {
		res.PrivateKey = key
	}
	if res.PrivateKey == nil {
		return reconcile.Result{}, errors.New("the orderer returned a certificate without its private key")
	}
	keyPEM, err := encodeKey(crt, res.PrivateKey)
	if err != nil {
		return reconcile.Result{}, r.setNotReady(ctx, t, ReasonInvalidSpec, fmt.Sprintf("Cannot encode private key: %v", err))
	}
	hash, err := requestHash(crt)
	if err != nil {
		return reconcile.Result{}, r.setNotReady(ctx, t, ReasonInvalidSpec, fmt.Sprintf("Cannot build the request from spec: %v", err))
	}
	return r.write(ctx, t, existing, pw, rec, res, keyPEM, hash)
}

// write stores an issued certificate and its key in the Secret and marks
// the Certificate Ready.
func (r *reconciler) write(ctx context.Context, t *target, existing *corev1.Secret, pw keystorePasswords, rec loopRecord, res issuance.Result, keyPEM []byte, requestHash string) (reconcile.Result, error) {
	crt := t.crt
	cert, err := pki.DecodeX509CertificateBytes(res.ChainPEM)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to decode signed certificate: %w", err)
	}

	d := secretData{certPEM: res.ChainPEM, keyPEM: keyPEM, caPEM: res.CAPEM, cert: cert, issuances: rec.String(), requestHash: requestHash}
	if d.extra, err = extraData(crt, pw, d.certPEM, d.keyPEM, d.caPEM); err != nil {
		return reconcile.Result{}, r.setNotReady(ctx, t, ReasonIssuanceFailed, err.Error())
	}
	if err := r.applySecret(ctx, t, existing, d); err != nil {
		if errors.Is(err, fence.ErrNotOwner) {
			return reconcile.Result{}, nil // ownership moved while signing; the new owner issues
		}
		return reconcile.Result{}, errors.Join(err, r.setNotReady(ctx, t, ReasonIssuanceFailed, err.Error()))
	}
	r.eventf(t, crt, corev1.EventTypeNormal, ReasonIssuing, "The certificate has been successfully issued")
	return r.setReady(ctx, t, cert, 1)
}

// encodeKey is key in the encoding crt asks for (PKCS#1 by default).
func encodeKey(crt *cmapi.Certificate, key crypto.Signer) ([]byte, error) {
	var encoding cmapi.PrivateKeyEncoding
	if crt.Spec.PrivateKey != nil {
		encoding = crt.Spec.PrivateKey.Encoding
	}
	return pki.EncodePrivateKey(key, encoding)
}

// largeKey reports whether crt needs an RSA key of 4096 bits or more
// (seconds of CPU each; RSA-8192 tens of seconds).
func largeKey(crt *cmapi.Certificate) bool {
	pk := crt.Spec.PrivateKey
	return pk != nil && (pk.Algorithm == "" || pk.Algorithm == cmapi.RSAKeyAlgorithm) && pk.Size >= 4096
}

// applySecret writes the Secret with server-side apply, stamped with this
// replica's ownership; existing (may be nil) decides the immutable type.
func (r *reconciler) applySecret(ctx context.Context, t *target, existing *corev1.Secret, d secretData) error {
	writer, ctx, cancel, err := r.writeContext(ctx, t)
	if err != nil {
		return err
	}
	defer cancel()
	ac, err := secretApply(t.crt, d, writer)
	if err != nil {
		return err
	}
	if existing != nil && existing.Type != "" {
		ac.WithType(existing.Type) // the type of an existing Secret is immutable
	}
	if err := t.cl.GetClient().Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to apply Secret %s/%s: %w", t.crt.Namespace, t.crt.Spec.SecretName, err)
	}
	return nil
}

// setReady records a valid certificate in the status: Ready=True, the
// certificate's validity and renewal time, revision+revisionDelta, and clears
// Issuing and failure fields. It requeues at the renewal time.
func (r *reconciler) setReady(ctx context.Context, t *target, cert *x509.Certificate, revisionDelta int) (reconcile.Result, error) {
	rt, err := renewalTime(t.crt, cert, r.opts.RenewalJitter)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to compute renewal time: %w", err)
	}
	rt = t.advice.renewalTime(cert, rt)
	// After an issuance the new certificate is a fact: the status is re-applied
	// onto a fresh copy on conflict so the revision is never lost. Otherwise a
	// conflict requeues, so a concurrent change (Issuing=True) is decided on.
	err = r.updateStatus(ctx, t, revisionDelta > 0, func(crt *cmapi.Certificate) {
		st := &crt.Status
		st.NotBefore = &metav1.Time{Time: cert.NotBefore}
		st.NotAfter = &metav1.Time{Time: cert.NotAfter}
		st.RenewalTime = rt
		if revisionDelta > 0 || st.Revision == nil {
			rev := 1
			if st.Revision != nil {
				rev = *st.Revision + revisionDelta
			}
			st.Revision = &rev
		}
		st.LastFailureTime = nil
		st.FailedIssuanceAttempts = nil
		removeCondition(crt, cmapi.CertificateConditionIssuing)
		if t.violation {
			r.setCondition(crt, ConditionPolicyViolation, cmmeta.ConditionTrue, ReasonPolicyDenied,
				"Issued before the issuance policies changed; they no longer allow it (not revoked, renewal will be denied): "+t.violationMsg)
		} else {
			removeCondition(crt, ConditionPolicyViolation)
		}
		r.setCondition(crt, cmapi.CertificateConditionReady, cmmeta.ConditionTrue, ReasonReady, "Certificate is up to date and has not expired")
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	next := rt.Time
	if t.advice.cert == cert && !t.advice.recheck.IsZero() && t.advice.recheck.Before(next) {
		next = t.advice.recheck // ask the CA again before then
	}
	return reconcile.Result{RequeueAfter: max(next.Sub(r.opts.clock.Now()), time.Second)}, nil
}

// setNotReady records why the Certificate cannot be issued, and emits a
// Warning Event when that is news.
func (r *reconciler) setNotReady(ctx context.Context, t *target, reason, message string) error {
	prev := apiutil.GetCertificateCondition(t.crt, cmapi.CertificateConditionReady)
	if prev == nil || prev.Status != cmmeta.ConditionFalse || prev.Reason != reason || prev.Message != message {
		r.eventf(t, t.crt, corev1.EventTypeWarning, reason, "%s", message)
		logr.FromContextOrDiscard(ctx).Info("certificate not ready", "reason", reason, "message", message)
	}
	return r.updateStatus(ctx, t, false, func(crt *cmapi.Certificate) {
		r.setCondition(crt, cmapi.CertificateConditionReady, cmmeta.ConditionFalse, reason, message)
	})
}

// updateStatus applies mutate to the Certificate and writes the status if it
// changed. With retryFresh, a conflict re-applies mutate onto a fresh copy;
// without, the conflict is returned. Status is written with Update, not
// server-side apply: the Issuing condition `cmctl renew` sets must be removable.
func (r *reconciler) updateStatus(ctx context.Context, t *target, retryFresh bool, mutate func(*cmapi.Certificate)) error {
	c := t.cl.GetClient()
	first := true
	backoff := retry.DefaultRetry
	if !retryFresh {
		backoff.Steps = 1
	}
	return retry.RetryOnConflict(backoff, func() error {
		if !first {
			fresh := &cmapi.Certificate{}
			if err := t.cl.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(t.crt), fresh); err != nil {
				return err
			}
			t.crt = fresh
		}
		first = false
		updated := t.crt.DeepCopy()
		mutate(updated)
		if apiequality.Semantic.DeepEqual(updated.Status, t.crt.Status) {
			r.metrics.observe(t.name, t.crt)
			return nil
		}
		_, wctx, cancel, err := r.writeContext(ctx, t)
		if err != nil {
			return nil // not ours to write any more
		}
		replaced := t.crt.ResourceVersion
		err = c.Status().Update(wctx, updated)
		cancel()
		if err != nil {
			return fmt.Errorf("failed to update status of Certificate %s/%s: %w", t.crt.Namespace, t.crt.Name, err)
		}
		t.crt = updated
		r.metrics.observe(t.name, t.crt)
		awaitCache(ctx, c, client.ObjectKeyFromObject(updated), replaced)
		return nil
	})
}

// awaitCache waits, briefly, until the cache has moved past the version of
// the Certificate this replica just replaced. The next reconcile of it is
// already queued (by this write, or by the Secret written just before), and
// deciding on the stale copy would send a status update the API server
// refuses with 409 (measured: 0.31 extra writes per certificate). Gives up
// after 2s; the worst case is that refused update.
func awaitCache(ctx context.Context, c client.Reader, key client.ObjectKey, replaced string) {
	_ = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		cur := newCertificateObject()
		if err := c.Get(ctx, key, cur); err != nil {
			return true, nil // gone, or the cache cannot answer: nothing to wait for
		}
		return cur.GetResourceVersion() != replaced, nil
	})
}

// setCondition sets a condition, keeping lastTransitionTime when the status is unchanged.
func (r *reconciler) setCondition(crt *cmapi.Certificate, typ cmapi.CertificateConditionType, status cmmeta.ConditionStatus, reason, message string) {
	now := metav1.NewTime(r.opts.clock.Now())
	c := cmapi.CertificateCondition{Type: typ, Status: status, Reason: reason, Message: message, LastTransitionTime: &now, ObservedGeneration: crt.Generation}
	for i, old := range crt.Status.Conditions {
		if old.Type != typ {
			continue
		}
		if old.Status == status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		crt.Status.Conditions[i] = c
		return
	}
	crt.Status.Conditions = append(crt.Status.Conditions, c)
}

func removeCondition(crt *cmapi.Certificate, typ cmapi.CertificateConditionType) {
	out := crt.Status.Conditions[:0]
	for _, c := range crt.Status.Conditions {
		if c.Type != typ {
			out = append(out, c)
		}
	}
	crt.Status.Conditions = out
}
