package acme

import (
	"context"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// cleanupRetry is how long a failed TXT clean-up waits to be tried again.
const cleanupRetry = 10 * time.Second

// presented reports whether a TXT record of ord may still be in its zone.
func presented(ord *hubapi.ACMEOrder) bool {
	for _, ch := range ord.Status.Challenges {
		if ch.Presented {
			return true
		}
	}
	return false
}

// cleanUp removes every TXT record the order wrote; failures are logged
// and the record kept marked, to be tried again.
func (s *Service) cleanUp(ctx context.Context, ci *cmapi.ClusterIssuer, next *hubapi.ACMEOrder) {
	for i := range next.Status.Challenges {
		ch := &next.Status.Challenges[i]
		if !ch.Presented {
			continue
		}
		p, err := s.provider(ctx, ci, ch.Solver)
		if err == nil {
			err = p.CleanUp(ctx, ch.Identifier, ch.FQDN, ch.Zone, ch.Key)
		}
		if err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "failed to remove TXT record", "fqdn", ch.FQDN, "zone", ch.Zone)
			continue
		}
		ch.Presented = false
	}
}

// cleanUpDone removes the TXT records a finished order left (its clean-up
// failed when it ended), again every cleanupRetry until none is left; the
// holder does it, or anyone once its claim has expired.
func (s *Service) cleanUpDone(ctx context.Context, ord *hubapi.ACMEOrder, now time.Time) (ctrl.Result, error) {
	if ord.Status.Holder != s.opts.Identity && ord.Status.HeldUntil != nil && now.Before(ord.Status.HeldUntil.Time) {
		return ctrl.Result{RequeueAfter: ord.Status.HeldUntil.Sub(now) + 100*time.Millisecond}, nil
	}
	ci, ok := s.issuerOf(ctx, ord)
	if !ok {
		return ctrl.Result{RequeueAfter: cleanupRetry}, nil
	}
	next := ord.DeepCopy()
	s.cleanUp(ctx, ci, next)
	if !s.write(ctx, ord, next) {
		return ctrl.Result{RequeueAfter: s.opts.PollInterval}, nil
	}
	if presented(next) {
		return ctrl.Result{RequeueAfter: cleanupRetry}, nil
	}
	s.wake(next)
	return ctrl.Result{}, nil
}

// release lets a deleted order go once its TXT records are gone (tried
// again every cleanupRetry); an order whose ClusterIssuer is gone cannot
// reach its DNS provider any more, and goes with a log line naming them.
func (s *Service) release(ctx context.Context, ord *hubapi.ACMEOrder) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(ord, hubapi.TXTCleanupFinalizer) {
		return ctrl.Result{}, nil
	}
	if presented(ord) {
		if ci, ok := s.issuerOf(ctx, ord); ok {
			next := ord.DeepCopy()
			s.cleanUp(ctx, ci, next)
			if err := s.hub.Status().Patch(ctx, next, client.MergeFromWithOptions(ord, client.MergeFromWithOptimisticLock{})); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(err)
			}
			if presented(next) {
				return ctrl.Result{RequeueAfter: cleanupRetry}, nil
			}
			*ord = *next
		} else {
			for _, ch := range ord.Status.Challenges {
				if ch.Presented {
					logr.FromContextOrDiscard(ctx).Info("ClusterIssuer gone: the TXT record of a deleted order cannot be removed", "order", ord.Name, "issuer", ord.Spec.IssuerName, "fqdn", ch.FQDN, "zone", ch.Zone)
				}
			}
		}
	}
	if !done(ord) && ord.Status.URL != "" {
		if err := s.handOver(ctx, ord); err != nil { // its CA order goes to the issuance's next ACMEOrder
			return ctrl.Result{}, err
		}
	}
	patch := client.MergeFrom(ord.DeepCopy())
	controllerutil.RemoveFinalizer(ord, hubapi.TXTCleanupFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(s.hub.Patch(ctx, ord, patch))
}

// issuerOf reads ord's ClusterIssuer; false when it is gone or no longer
// an ACME issuer (its solvers are what reach the DNS).
func (s *Service) issuerOf(ctx context.Context, ord *hubapi.ACMEOrder) (*cmapi.ClusterIssuer, bool) {
	ci := &cmapi.ClusterIssuer{}
	if err := s.hub.Get(ctx, client.ObjectKey{Name: ord.Spec.IssuerName}, ci); err != nil || ci.Spec.ACME == nil {
		return nil, false
	}
	return ci, true
}
