package crsign

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	crutil "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/util"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issued"
	"github.com/certhub/certhub/internal/issuers"
)

// Event reasons (the condition's reason is cert-manager's: Pending, Failed,
// Denied, Issued).
const (
	// ReasonWaitingForApproval is cert-manager's Event for an unapproved request.
	ReasonWaitingForApproval = "WaitingForApproval"
	// ReasonBadCSR: the CSR does not parse, its signature does not verify,
	// or its key is of a type or size the hub does not sign.
	ReasonBadCSR = "BadCSR"
	// ReasonPolicyDenied: no IssuancePolicy allows the certificate.
	ReasonPolicyDenied = "PolicyDenied"
	// ReasonSigningError is cert-manager's CA issuer's reason.
	ReasonSigningError = "SigningError"
	// ReasonRateLimited: waiting for the hub's issuance budget.
	ReasonRateLimited = "RateLimited"
	// ReasonNotBeforeAhead: the request's creation or approval lies ahead
	// of the hub's clock by more than MaxClockSkew; it is signed later.
	ReasonNotBeforeAhead = "NotBeforeAhead"
)

type reconciler struct {
	opts       Options
	metrics    *signMetrics
	getCluster func(context.Context, multicluster.ClusterName) (cluster.Cluster, error)
}

// Reconcile decides one CertificateRequest; see the package doc.
func (r *reconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	if _, ok := r.opts.Fence.Owns(req.ClusterName); !ok {
		return reconcile.Result{}, nil // the owner signs it, or the mode says no (a change requeues it)
	}
	cl, err := r.getCluster(ctx, req.ClusterName)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("failed to get cluster %q: %w", req.ClusterName, err)
	}
	cr := &cmapi.CertificateRequest{}
	if err := cl.GetClient().Get(ctx, req.NamespacedName, cr); err != nil { // the cache
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !ForHub(cr) || cr.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	rec := recorderFor(cl.GetEventRecorder("certhub"))
	out := cr.DeepCopy()
	res, err := r.sync(ctx, req.ClusterName, cl, out, crutil.NewReporter(r.opts.clock, rec), rec)
	if saveErr := r.save(ctx, req.ClusterName, cl, cr, out); saveErr != nil {
		if apierrors.IsConflict(saveErr) {
			return reconcile.Result{RequeueAfter: time.Second}, nil // decided again on the fresh object
		}
		return reconcile.Result{}, errors.Join(saveErr, err)
	}
	return res, err
}

// sync decides on cr (a copy, updated in place) as cert-manager's
// certificaterequests controller does for its own issuers.
func (r *reconciler) sync(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, cr *cmapi.CertificateRequest, rep *crutil.Reporter, rec record.EventRecorder) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	switch {
	case apiutil.CertificateRequestIsDenied(cr):
		if apiutil.CertificateRequestReadyReason(cr) != cmapi.CertificateRequestReasonDenied {
			rep.Denied(cr)
			r.metrics.result(name, cmapi.CertificateRequestReasonDenied)
		}
		return reconcile.Result{}, nil
	case apiutil.CertificateRequestHasInvalidRequest(cr):
		return reconcile.Result{}, nil
	case !apiutil.CertificateRequestIsApproved(cr):
		// As cert-manager: an Event, no condition (approval changes the
		// request, which brings it back).
		rec.Event(cr, corev1.EventTypeNormal, ReasonWaitingForApproval, "Not signing CertificateRequest until it is Approved")
		return reconcile.Result{}, nil
	}
	switch apiutil.CertificateRequestReadyReason(cr) {
	case cmapi.CertificateRequestReasonFailed, cmapi.CertificateRequestReasonIssued:
		return reconcile.Result{}, nil
	}
	if len(cr.Status.Certificate) > 0 {
		return reconcile.Result{}, nil
	}

	ref := cr.Spec.IssuerRef
	if ref.Kind != cmapi.ClusterIssuerKind {
		rep.Failed(cr, fmt.Errorf("kind %q", ref.Kind), issuers.ReasonIssuerNotSupported,
			"certhub.io names the hub's ClusterIssuers only (kind ClusterIssuer)")
		r.metrics.result(name, cmapi.CertificateRequestReasonFailed)
		return reconcile.Result{}, nil
	}
	hubRef := cmmeta.IssuerReference{Name: ref.Name, Kind: cmapi.ClusterIssuerKind, Group: cmapi.SchemeGroupVersion.Group}
	iss, err := r.opts.Issuers.Resolve(ctx, hubRef, cr.Namespace, cl.GetAPIReader())
	if err != nil {
		var ie *issuers.Error
		if !errors.As(err, &ie) {
			return reconcile.Result{}, err
		}
		if ie.Terminal || ie.Reason == issuers.ReasonIssuerNotSupported {
			rep.Failed(cr, errors.New(ie.Message), ie.Reason, "The hub issuer cannot sign")
			r.metrics.result(name, cmapi.CertificateRequestReasonFailed)
			return reconcile.Result{}, nil
		}
		rep.Pending(cr, nil, ie.Reason, ie.Message)
		return reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}, nil
	}
	tmpl, csr, err := checkCSR(cr, r.opts.MaxNames)
	if err != nil {
		rep.Failed(cr, err, ReasonBadCSR, "The CSR cannot be signed")
		r.metrics.result(name, cmapi.CertificateRequestReasonFailed)
		return reconcile.Result{}, nil
	}
	if p := r.opts.Policy; p != nil {
		d, pending := p.Evaluate(string(name), asCertificate(cr), tmpl)
		if pending {
			return reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}, nil
		}
		if d = d.ForIssuer(issuers.SelfSigned(iss)); !d.Allowed {
			rep.Failed(cr, errors.New(d.Message), ReasonPolicyDenied, "Denied by issuance policy")
			r.metrics.result(name, cmapi.CertificateRequestReasonFailed)
			return reconcile.Result{}, nil
		}
		d.Constrain(tmpl)
	}
	if o, ok := iss.(issuers.Orderer); ok {
		return r.order(ctx, name, cr, o, tmpl, csr, rep)
	}
	if s, ok := iss.(issuers.Sealer); ok {
		if wait := fixTBS(name, cr, s, csr.Raw, tmpl, r.opts.clock.Now()); wait > 0 {
			rep.Pending(cr, nil, ReasonNotBeforeAhead, fmt.Sprintf("The request's creation or approval lies more than %s ahead of the hub's clock; it is signed in %s, never valid from the future", MaxClockSkew, wait.Round(time.Second)))
			return reconcile.Result{RequeueAfter: min(wait, 5*time.Minute)}, nil
		}
	}
	if wait := r.admit(name, cr, rep); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	res, err := iss.Sign(ctx, issuers.Request{Template: tmpl, PublicKey: tmpl.PublicKey})
	if errors.Is(err, issuers.ErrNeedsPrivateKey) {
		rep.Failed(cr, err, issuers.ReasonIssuerNotSupported,
			"A SelfSigned ClusterIssuer signs with the certificate's own key, which stays in the cluster; use a CA ClusterIssuer")
		r.metrics.result(name, cmapi.CertificateRequestReasonFailed)
		return reconcile.Result{}, nil
	}
	if err != nil {
		rep.Failed(cr, err, ReasonSigningError, "Error signing certificate")
		r.metrics.result(name, cmapi.CertificateRequestReasonFailed)
		return reconcile.Result{}, nil
	}
	leaf, err := pki.DecodeX509CertificateBytes(res.ChainPEM)
	if err != nil {
		rep.Failed(cr, err, "DecodeError", "Failed to decode returned certificate")
		return reconcile.Result{}, nil
	}
	if err := r.record(ctx, name, cr, leaf, false); err != nil {
		return reconcile.Result{}, err
	}
	cr.Status.Certificate, cr.Status.CA = res.ChainPEM, res.CAPEM
	rep.Ready(cr)
	r.metrics.result(name, cmapi.CertificateRequestReasonIssued)
	log.Info("signed CertificateRequest", "issuer", ref.Name, "serial", leaf.SerialNumber.Text(16))
	return reconcile.Result{}, nil
}

// record stores leaf, signed for cr, in the hub's record before the
// request's status carries it. Its serial is derived from the request
// (tbs.go): a request signed again after a crash is the same entry.
func (r *reconciler) record(ctx context.Context, name multicluster.ClusterName, cr *cmapi.CertificateRequest, leaf *x509.Certificate, ordered bool) error {
	if r.opts.Record == nil {
		return nil
	}
	obj := issued.Object{Cluster: string(name), Kind: issued.KindCertificateRequest, Namespace: cr.Namespace, Name: cr.Name}
	e := issued.For(leaf, issued.ClusterIssuer(cr.Spec.IssuerRef.Name), obj, string(cr.UID))
	e.Why = issued.WhyRequest
	if ordered {
		e.DER = leaf.Raw // ACME: revokeCert needs the certificate
	}
	if err := r.opts.Record.Add(ctx, e); err != nil {
		return fmt.Errorf("failed to record the certificate of CertificateRequest %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	return nil
}

// admit asks the hub's issuance budget for cr's signature: 0 when
// admitted, else how long to wait (the request is Pending, RateLimited).
func (r *reconciler) admit(name multicluster.ClusterName, cr *cmapi.CertificateRequest, rep *crutil.Reporter) time.Duration {
	b := r.opts.Budget
	if b == nil {
		return 0
	}
	key := string(name) + "/" + cr.Namespace + "/certificaterequest/" + cr.Name
	// Urgent: a request is a signature someone waits for now.
	wait := b.Admit(key, budget.Tenant{Cluster: string(name), Namespace: cr.Namespace}, cr.CreationTimestamp.Time, budget.Urgent)
	if wait > 0 && apiutil.CertificateRequestReadyReason(cr) != cmapi.CertificateRequestReasonPending {
		rep.Pending(cr, nil, ReasonRateLimited, "Waiting for the hub's issuance budget (--issuance-rate)")
	}
	return wait
}

// save writes out's status when it differs from cr's, within the fence's
// deadline for the cluster. A conflict (someone wrote first) is returned.
func (r *reconciler) save(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster, cr, out *cmapi.CertificateRequest) error {
	if apiequality.Semantic.DeepEqual(cr.Status, out.Status) {
		return nil
	}
	_, wctx, done, err := fence.WriteContext(ctx, r.opts.Fence, name)
	if err != nil {
		return nil //nolint:nilerr // not ours any more: the owner decides again
	}
	defer done()
	if err := cl.GetClient().Status().Update(wctx, out); err != nil {
		return fmt.Errorf("failed to update status of CertificateRequest %s/%s: %w", out.Namespace, out.Name, err)
	}
	return nil
}

// asCertificate is what the IssuancePolicy selects and decides on: the
// request's namespace, name and issuer (group certhub.io: a policy may
// select external requests apart), and isCA.
func asCertificate(cr *cmapi.CertificateRequest) *cmapi.Certificate {
	return &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: cr.Namespace, Name: cr.Name},
		Spec: cmapi.CertificateSpec{IssuerRef: cr.Spec.IssuerRef, IsCA: cr.Spec.IsCA, Duration: cr.Spec.Duration,
			Usages: cr.Spec.Usages, SecretName: cr.Name},
	}
}
