package certsync

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/internal/writegate"
)

// Migration says, per cluster, whether the hub writes there, and keeps
// what it would do where it does not (the plan). *writegate.Gate implements it.
type Migration interface {
	// Mode is the cluster's mode (certhub.io/mode).
	Mode(cluster multicluster.ClusterName) writegate.Mode
	// Writes reports whether the hub may write in the cluster now (its
	// mode, and cert-manager not active there).
	Writes(cluster multicluster.ClusterName) bool
	// HoldsStatus says why the hub does not write Certificate status in
	// the namespace now ("" when it may): a field manager named like
	// cert-manager's wrote a Certificate there lately. Secrets are
	// written; other namespaces are not affected.
	HoldsStatus(cluster multicluster.ClusterName, namespace string) string
	// Plan records what the hub would do with one Certificate.
	Plan(cluster multicluster.ClusterName, v writegate.Verdict)
	// Forget removes a Certificate from the plan.
	Forget(cluster multicluster.ClusterName, namespace, name string)
	// Subscribe calls fn with each cluster whose Mode or Writes changed.
	Subscribe(fn func(multicluster.ClusterName))
}

// plan records t's verdict when the hub only observes t's cluster.
func (r *reconciler) plan(t *target, action writegate.Action, reason, message string) {
	if r.opts.Migration == nil {
		return
	}
	r.opts.Migration.Plan(t.name, writegate.Verdict{Namespace: t.crt.Namespace, Name: t.crt.Name, Action: action,
		Adopting: t.adopting, Reason: reason, Message: message})
}

// migrationSource queues every Certificate of a cluster whose mode or
// Writes answer changed (observe → issue: they are issued now).
func migrationSource(m Migration, get func(context.Context, multicluster.ClusterName) (cluster.Cluster, error), log logr.Logger) source.TypedSource[mcreconcile.Request] {
	var subscribe func(func(multicluster.ClusterName))
	if m != nil {
		subscribe = m.Subscribe
	}
	return writegate.RequeueSource(subscribe, get, func() client.ObjectList {
		list := certspec.NewList()
		return list
	}, nil, log)
}

// planKeep records, in a cluster the hub does not write in, that the
// Secret's certificate stays (taken over from cert-manager when adopting).
func (r *reconciler) planKeep(_ context.Context, t *target, decision policy.Decision, d decision, now time.Time) (reconcile.Result, error) {
	action, reason, message := writegate.ActionKeep, reasons.Ready, "Certificate is up to date and has not expired"
	if t.adopting {
		action, message = writegate.ActionAdopt, "The Secret cert-manager wrote for this Certificate matches the spec and comes from the same issuer: taken over without a new certificate"
	}
	switch {
	case d.state != nil && d.state.cert != nil && !now.Before(d.state.cert.NotAfter):
		reason, message = reasons.Expired, "Certificate expired on "+d.state.cert.NotAfter.Format(time.RFC1123)
	case !decision.Allowed:
		reason, message = reasons.PolicyDenied, "Kept, but the issuance policies no longer allow it: "+decision.Message
	}
	r.plan(t, action, reason, message)
	return reconcile.Result{}, nil
}

// planIssue records, in a cluster the hub does not write in, that a
// certificate would be issued, or why not (the issuer).
func (r *reconciler) planIssue(ctx context.Context, t *target, d decision) (reconcile.Result, error) {
	iss, err := r.opts.Issuers.Resolve(ctx, t.crt.Spec.IssuerRef, t.crt.Namespace, t.cl.GetAPIReader())
	if err != nil {
		var ie *issuers.Error
		if !errors.As(err, &ie) {
			return reconcile.Result{}, err
		}
		r.plan(t, writegate.ActionRefuse, ie.Reason, ie.Message)
		return reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}, nil
	}
	if pd := t.decision.ForIssuer(issuers.SelfSigned(iss)); !pd.Allowed {
		return reconcile.Result{}, r.setNotReady(ctx, t, reasons.PolicyDenied, "Denied by issuance policy: "+pd.Message)
	}
	action := writegate.ActionReissue
	if d.state == nil || d.state.cert == nil {
		action = writegate.ActionIssue
	}
	r.plan(t, action, d.reason, d.message)
	return reconcile.Result{}, nil
}

// statusHeld reports whether a status write in namespace of t's cluster
// waits (Migration.HoldsStatus), and logs why; the Migration requeues the
// cluster's Certificates when the hold ends.
func (r *reconciler) statusHeld(ctx context.Context, t *target, namespace string) bool {
	if r.opts.Migration == nil {
		return false
	}
	why := r.opts.Migration.HoldsStatus(t.name, namespace)
	if why != "" {
		logr.FromContextOrDiscard(ctx).V(1).Info("status write held back in this namespace", "why", why)
	}
	return why != ""
}
