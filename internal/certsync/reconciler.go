package certsync

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/certmetrics"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/secretcache"
	"github.com/certhub/certhub/internal/writegate"
)

type reconciler struct {
	// getCluster is the manager's GetCluster (a seam for unit tests).
	getCluster func(ctx context.Context, name multicluster.ClusterName) (cluster.Cluster, error)
	opts       Options
	metrics    *certmetrics.Metrics
	guard      loopGuard
	largeKeys  chan struct{}      // a slot per worker allowed to generate a large key
	requests   requestIndex       // cert-manager's requests, for take-overs (adopt.go)
	secrets    *secretcache.Store // managed Secrets' data by version (secrets.go)
}

// newReconciler builds the reconciler from defaulted options.
func newReconciler(opts Options, m *certmetrics.Metrics, getCluster func(context.Context, multicluster.ClusterName) (cluster.Cluster, error)) *reconciler {
	return &reconciler{getCluster: getCluster, opts: opts, metrics: m, guard: opts.loopGuard(), largeKeys: make(chan struct{}, opts.MaxConcurrentLargeKeys), secrets: opts.Secrets}
}

// target is one Certificate in one cluster, with what is needed to write there.
type target struct {
	name multicluster.ClusterName
	cl   cluster.Cluster
	crt  *cmapi.Certificate
	rec  recorder.EventRecorder

	advice advice // the CA's renewal time for the current certificate (Options.RenewalAdvice)

	override     issuers.Issuer    // a CA rotation's new CA signs for this cluster (Options.Rotation)
	ordering     bool              // the hub holds an order of this issuance (issuers.Orderer.InFlight): admitted before
	template     *x509.Certificate // what is signed: the template the policy allowed, constrained by it
	dry          bool              // the hub does not write in this cluster now (Options.Migration): decide, write nothing, plan
	adopting     bool              // the Secret is cert-manager's, written for this Certificate: taken over
	decision     policy.Decision   // the policy's decision on template (ForIssuer once the signer is known)
	violation    bool              // an issued certificate the policies no longer allow
	violationMsg string            // why
	why          string            // the trigger's reason for this issuance (the record's Why)
	replaces     string            // the serial the Secret held when it was decided (the record's Replaces)
}

// writeContext returns the writer stamp and a context for one downstream
// write, and the func that ends it (fence.WriteContext): the write's
// deadline is the instant ownership ends, so a replica that stalls (GC
// pause, SIGSTOP, a slow network) cannot complete a write after another may
// have taken the cluster over. fence.ErrNotOwner when this replica may not
// write now.
func (r *reconciler) writeContext(ctx context.Context, t *target) (string, context.Context, func(), error) {
	if t.dry {
		return "", ctx, func() {}, fence.ErrNotOwner
	}
	if r.opts.Fence == nil {
		return r.opts.Identity, ctx, func() {}, nil
	}
	return fence.WriteContext(ctx, r.opts.Fence, t.name)
}

// stamp returns the writer stamp if this replica may write to t's cluster now.
func (r *reconciler) stamp(t *target) (string, error) {
	if t.dry {
		return "", fence.ErrNotOwner
	}
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
	t, res, err := r.load(ctx, req)
	if t == nil {
		return res, err
	}
	decision, stop, res, err := r.admit(ctx, t)
	if stop {
		return res, err
	}
	t.decision = decision
	in, stop, res, err := r.gather(ctx, t)
	if stop {
		return res, err
	}
	d, stop, res, err := r.decide(ctx, t, &in)
	if stop {
		return res, err
	}
	if t.adopting && !t.dry {
		if err := r.dropStaleRequests(ctx, t); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !d.reissue {
		if decision.SelfSignedOnly { // a CA the default policy allows if self-signed: is the kept one?
			decision = decision.ForIssuer(issuers.IsSelfSigned(d.state.cert))
		}
		if t.adopting && !decision.Allowed {
			// cert-manager's certificate is judged as one the hub would sign
			// today: a certificate the policy denies is never taken over
			// (nothing is written; a policy change decides it again).
			return reconcile.Result{}, r.setNotReady(ctx, t, reasons.PolicyDenied, "Not taken over from cert-manager: denied by issuance policy: "+decision.Message)
		}
		if t.dry {
			return r.planKeep(ctx, t, decision, d, in.now)
		}
		if r.opts.Budget != nil {
			r.opts.Budget.Forget(budgetKey(t))
		}
		if err := r.recordKept(ctx, t, d.state.cert); err != nil {
			return reconcile.Result{}, r.setNotReady(ctx, t, reasons.IssuanceFailed, "The certificate kept could not be recorded: "+err.Error())
		}
		if err := r.repairSecret(ctx, t, in.secret, in.passwords); err != nil {
			return reconcile.Result{}, err
		}
		// A policy changed since the issuance no longer allows it: it is
		// not revoked, but flagged (condition, metric, certhub status).
		t.violation = !decision.Allowed
		t.violationMsg = decision.Message
		if na := d.state.cert.NotAfter; !in.now.Before(na) { // only with renewal disabled: kept, but not ready (cert-manager's readiness)
			return reconcile.Result{}, r.setNotReady(ctx, t, reasons.Expired, "Certificate expired on "+na.Format(time.RFC1123))
		}
		return r.setReady(ctx, t, d.state.cert, 0)
	}
	if !decision.Allowed {
		// Nothing is signed nor written; a policy change decides it again.
		return reconcile.Result{}, r.setNotReady(ctx, t, reasons.PolicyDenied, "Denied by issuance policy: "+decision.Message)
	}
	if t.dry {
		return r.planIssue(ctx, t, d)
	}
	crt, now := t.crt, in.now
	t.why = d.reason
	if d.state != nil && d.state.cert != nil {
		t.replaces = issued.Serial(d.state.cert)
	}
	g := r.guard.decide(crt, in.secret, d.reason, now)
	if !g.allow {
		return r.pauseLoop(ctx, t, g, d.reason, d.message, now)
	}
	if t.ordering {
		// Admitted when its order was created (the hub holds it); now only
		// asking after it.
		log.V(1).Info("asking after the order", "message", d.message)
		return r.issue(ctx, t, in.secret, d.state, in.passwords, g.record)
	}
	if r.opts.Budget != nil {
		if wait := r.opts.Budget.Admit(budgetKey(t), budget.Tenant{Cluster: string(t.name), Namespace: crt.Namespace}, r.budgetDue(crt, d.state), budgetLane(d.reason, d.state, now)); wait > 0 {
			return r.waitForBudget(ctx, t, wait, d.reason)
		}
	}
	log.Info("issuing certificate", "reason", d.reason, "message", d.message)
	return r.issue(ctx, t, in.secret, d.state, in.passwords, g.record)
}

// load reads the Certificate and checks that this replica owns its cluster
// and that its spec is one the hub can issue; a nil target means the
// reconcile ends with res and err (a refusal recorded, or nothing to do).
func (r *reconciler) load(ctx context.Context, req mcreconcile.Request) (*target, reconcile.Result, error) {
	cl, err := r.getCluster(ctx, req.ClusterName)
	if err != nil {
		return nil, reconcile.Result{}, fmt.Errorf("failed to get cluster %q: %w", req.ClusterName, err)
	}
	u := certspec.NewObject()
	if err := cl.GetClient().Get(ctx, req.NamespacedName, u); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.Forget(req.ClusterName, req.Namespace, req.Name)
			if r.opts.Migration != nil {
				r.opts.Migration.Forget(req.ClusterName, req.Namespace, req.Name)
			}
		}
		return nil, reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if u.GetDeletionTimestamp() != nil {
		return nil, reconcile.Result{}, nil
	}
	t := &target{name: req.ClusterName, cl: cl, rec: cl.GetEventRecorder("certhub")}
	if _, err := r.stamp(t); err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("skipping: cluster not owned by this replica")
		return nil, reconcile.Result{}, nil // the owner reconciles it
	}
	if m := r.opts.Migration; m != nil {
		if mode := m.Mode(req.ClusterName); mode == writegate.Off || mode == writegate.External {
			// Left alone; in external mode cert-manager runs the
			// Certificates and the hub signs their requests (crsign).
			m.Forget(req.ClusterName, req.Namespace, req.Name)
			r.secrets.Drop(req.ClusterName)     // nothing of its Secrets is kept either
			return nil, reconcile.Result{}, nil // left alone
		}
		t.dry = !m.Writes(req.ClusterName)
	}
	if g, _, _ := unstructured.NestedString(u.Object, "spec", "issuerRef", "group"); g == hubapi.GroupName {
		// cert-manager's controllers run it downstream and send its
		// requests to the hub (crsign): its key never leaves the cluster,
		// and the hub writes nothing on it, valid or not.
		return nil, reconcile.Result{}, nil
	}
	crt, err := certspec.Decode(u)
	if se := (*certspec.Error)(nil); errors.As(err, &se) {
		return nil, reconcile.Result{}, r.refuseUndecodable(ctx, t, u, se)
	}
	t.crt = crt
	if n := issuers.NamesOf(crt); n > r.opts.MaxNames {
		return nil, reconcile.Result{}, r.setNotReady(ctx, t, reasons.InvalidNames,
			fmt.Sprintf("Invalid Certificate spec: %d names (SANs and literalSubject attributes) exceed the hub's limit of %d per certificate (--max-names-per-certificate)", n, r.opts.MaxNames))
	}
	if se := (*certspec.Error)(nil); errors.As(certspec.ValidateSpec(crt), &se) {
		return nil, reconcile.Result{}, r.setNotReady(ctx, t, se.Reason, "Invalid Certificate spec: "+se.Error())
	}
	if ie := issuers.ExternalGroup(crt.Spec.IssuerRef); ie != nil {
		// Valid for cert-manager's webhook, but no issuer of the hub can sign
		// for it: terminal until the Certificate changes, decided before the
		// trigger chain so nothing is ever attempted.
		return nil, reconcile.Result{}, r.setNotReady(ctx, t, ie.Reason, ie.Message)
	}
	return t, reconcile.Result{}, nil
}

// admit builds the certificate that will be signed, once, and asks the
// policy about it (templateFor): the signer gets exactly the template the
// policy decided on (t.template), so nothing is signed unseen.
func (r *reconciler) admit(ctx context.Context, t *target) (policy.Decision, bool, reconcile.Result, error) {
	tmpl, decision, pending, err := templateFor(r.opts.Policy, t.name, t.crt)
	if err != nil {
		return policy.Decision{}, true, reconcile.Result{}, r.setNotReady(ctx, t, reasons.InvalidSpec, fmt.Sprintf("Cannot build certificate from spec: %v", err))
	}
	if pending {
		return decision, true, reconcile.Result{RequeueAfter: policyPendingRequeue}, nil
	}
	t.template = tmpl
	return decision, false, reconcile.Result{}, nil
}

// templateFor builds the certificate to sign for crt in cluster and p's
// decision on it; an allowed CA template carries the decision's path
// length and name constraints (Decision.Constrain). A nil p allows
// everything; pending means p has not loaded its policies yet.
func templateFor(p Policy, cluster multicluster.ClusterName, crt *cmapi.Certificate) (*x509.Certificate, policy.Decision, bool, error) {
	tmpl, err := issuers.Template(crt)
	if err != nil {
		return nil, policy.Decision{}, false, err
	}
	decision := policy.Decision{Allowed: true}
	if p != nil {
		var pending bool
		if decision, pending = p.Evaluate(string(cluster), crt, tmpl); pending {
			return nil, decision, true, nil
		}
	}
	decision.Constrain(tmpl)
	return tmpl, decision, false, nil
}

func budgetKey(t *target) string {
	return string(t.name) + "/" + t.crt.Namespace + "/" + t.crt.Name
}

// budgetDue is when crt must be issued at the latest: with a valid
// certificate, its renewal time + MaxBudgetDelay of the rest of its life;
// without one, soon after the Certificate was created.
// budgetLane is budget.Urgent when the Secret serves nothing valid — it
// is missing, unusable or expired, or the certificate is revoked — and
// budget.Routine when a valid certificate waits for its renewal or a spec
// change: a replacement or restored cluster is issued ahead of the
// fleet's renewals (docs/operations.md, "Disaster recovery").
func budgetLane(reason string, st *secretState, now time.Time) budget.Lane {
	if st == nil || st.cert == nil || st.key == nil || now.Before(st.cert.NotBefore) || !now.Before(st.cert.NotAfter) {
		return budget.Urgent
	}
	switch reason {
	case reasons.DoesNotExist, reasons.MissingData, reasons.InvalidCertificate, reasons.InvalidKey, reasons.KeyMismatch, reasons.Expired, reasons.Revocation:
		return budget.Urgent
	}
	return budget.Routine
}

func (r *reconciler) budgetDue(crt *cmapi.Certificate, st *secretState) time.Time {
	if st != nil && st.cert != nil {
		if rt, err := certspec.RenewalTime(crt, st.cert, r.opts.RenewalJitter); err == nil && rt != nil && st.cert.NotAfter.After(rt.Time) {
			rest := st.cert.NotAfter.Sub(rt.Time)
			return rt.Add(time.Duration(r.opts.MaxBudgetDelay * float64(rest)))
		}
	}
	return crt.CreationTimestamp.Add(newCertificateBudgetDelay)
}
