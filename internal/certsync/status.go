package certsync

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/writegate"
)

// waitForBudget holds an issuance back until the budget admits it, saying
// so once with Issuing=True, reason RateLimited.
func (r *reconciler) waitForBudget(ctx context.Context, t *target, wait time.Duration, trigger string) (reconcile.Result, error) {
	res := reconcile.Result{RequeueAfter: wait}
	if c := apiutil.GetCertificateCondition(t.crt, cmapi.CertificateConditionIssuing); c != nil && c.Status == cmmeta.ConditionTrue && c.Reason == reasons.RateLimited {
		return res, nil // already said; the wait is short and changes every time
	}
	r.metrics.BudgetWait(t.name)
	msg := fmt.Sprintf("Waiting for the hub's issuance budget (--issuance-rate), most urgent first; then issuing (%s)", trigger)
	return res, r.updateStatus(ctx, t, false, func(crt *cmapi.Certificate) {
		r.setCondition(crt, cmapi.CertificateConditionIssuing, cmmeta.ConditionTrue, reasons.RateLimited, msg)
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
	r.metrics.LoopDetected(t.name)
	msg := loopMessage(d, t.crt.Generation, reason, message, now)
	r.eventf(t, t.crt, corev1.EventTypeWarning, reasons.IssuanceLoop, "%s", msg)
	logr.FromContextOrDiscard(ctx).Info("issuance loop detected; pausing", "trigger", reason, "issuances", d.count, "attempt", d.attempts, "retryAt", d.retry)
	err := r.updateStatus(ctx, t, false, func(crt *cmapi.Certificate) {
		r.setCondition(crt, cmapi.CertificateConditionReady, cmmeta.ConditionFalse, reasons.IssuanceLoop, msg)
		removeCondition(crt, cmapi.CertificateConditionIssuing)
		crt.Status.LastFailureTime = &metav1.Time{Time: now}
		crt.Status.FailedIssuanceAttempts = &d.attempts
	})
	return wait, err
}

// refuseUndecodable records Ready=False (and a Warning Event, when that is
// news) on a Certificate that does not decode, with a merge patch of its
// status; nothing else is written for it.
func (r *reconciler) refuseUndecodable(ctx context.Context, t *target, u *unstructured.Unstructured, se *certspec.Error) error {
	msg := "Invalid Certificate spec: " + se.Error()
	if t.dry {
		if r.opts.Migration != nil {
			r.opts.Migration.Plan(t.name, writegate.Verdict{Namespace: u.GetNamespace(), Name: u.GetName(), Action: writegate.ActionRefuse, Reason: se.Reason, Message: msg})
		}
		return nil
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == string(cmapi.CertificateConditionReady) &&
			m["status"] == "False" && m["reason"] == se.Reason && m["message"] == msg {
			return nil // already said
		}
	}
	if r.statusHeld(ctx, t, u.GetNamespace()) {
		return nil
	}
	body, err := certspec.UndecodableStatus(u.GetGeneration(), se.Reason, msg, r.opts.clock.Now())
	if err != nil {
		return err
	}
	_, wctx, cancel, err := r.writeContext(ctx, t)
	if err != nil {
		return nil // not ours to write any more
	}
	defer cancel()
	r.eventf(t, u, corev1.EventTypeWarning, se.Reason, "%s", msg)
	logr.FromContextOrDiscard(ctx).Info("certificate not ready", "reason", se.Reason, "message", msg)
	if err := t.cl.GetClient().Status().Patch(wctx, u, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("failed to update status of Certificate %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// setReady records a valid certificate in the status: Ready=True, the
// certificate's validity and renewal time, revision+revisionDelta, and clears
// Issuing and failure fields. It requeues at the renewal time.
func (r *reconciler) setReady(ctx context.Context, t *target, cert *x509.Certificate, revisionDelta int) (reconcile.Result, error) {
	rt, err := certspec.RenewalTime(t.crt, cert, r.opts.RenewalJitter)
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
		st.ACME = t.advice.acmeStatus(cert)
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
			r.setCondition(crt, ConditionPolicyViolation, cmmeta.ConditionTrue, reasons.PolicyDenied,
				"Issued before the issuance policies changed; they no longer allow it (not revoked, renewal will be denied): "+t.violationMsg)
		} else {
			removeCondition(crt, ConditionPolicyViolation)
		}
		r.setCondition(crt, cmapi.CertificateConditionReady, cmmeta.ConditionTrue, reasons.Ready, "Certificate is up to date and has not expired")
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	if rt == nil {
		return reconcile.Result{}, nil // renewal disabled: nothing to wake up for
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
	if t.dry {
		r.plan(t, writegate.ActionRefuse, reason, message)
		return nil
	}
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
			r.metrics.Observe(t.name, t.crt)
			return nil
		}
		if r.statusHeld(ctx, t, t.crt.Namespace) {
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
		r.metrics.Observe(t.name, t.crt)
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
		cur := certspec.NewObject()
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
