package acme

import (
	"context"
	"crypto/x509"
	"errors"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	acmeapi "github.com/cert-manager/cert-manager/third_party/forked/acme"
	"github.com/cespare/xxhash/v2"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/issuers"
)

// ACME Renewal Information (ARI, RFC 9773): the CA suggests a window in
// which each certificate should be renewed, and may move it earlier (a
// revocation event, a CA incident). certsync asks RenewalTime for every
// issued ACME certificate; the answer comes from a per-replica cache
// refreshed in the background, so no reconcile waits for the CA:
//
//	RenewalTime ──▶ cached and fresh? ──yes──▶ the point chosen in the window
//	                     │ no
//	                     ▼
//	          fetch in the background (one per certificate at a time,
//	          at most MaxConcurrentOrders at once) ──▶ changed? wake the Certificate
//
// The point in the window is fixed per certificate (a hash of its ARI
// identifier), so every replica and every reconcile chooses the same one
// and certificates issued together renew spread over the window. A window
// that ended already means "renew now". Each certificate is asked again
// after the CA's Retry-After, at most RenewalInfoInterval later.

// ariEntry is what the cache knows about one certificate.
type ariEntry struct {
	at       time.Time // the chosen renewal time; zero: the CA offers no window
	next     time.Time // when to ask the CA again
	asked    time.Time // when certsync last asked (entries not asked for are dropped)
	fetching bool
	// status is what the last answer shows in status.acme.ari; nil before
	// the first answer and when the CA has no ARI.
	status *cmapi.CertificateACMEARIStatus
}

// ariCache maps ARI certificate identifiers to what their CA said.
type ariCache struct {
	m      map[string]*ariEntry
	pruned time.Time
}

// prune drops the entries nobody asked for in two intervals (renewed or
// deleted certificates), at most once per interval. Callers hold s.mu.
func (c *ariCache) prune(now time.Time, interval time.Duration) {
	if now.Sub(c.pruned) < interval {
		return
	}
	c.pruned = now
	for id, e := range c.m {
		if !e.fetching && now.Sub(e.asked) > 2*interval {
			delete(c.m, id)
		}
	}
}

// RenewalTime returns what cert's CA says about renewing it, cert being
// issued for the downstream Certificate cluster/namespace/name by ref: the
// renewal time chosen in its window (zero when ref is no ACME
// ClusterIssuer, the CA offers no ARI, or nothing is known yet: a
// background fetch then wakes the Certificate when the answer arrives),
// when the answer goes stale, and status.acme.ari. It never waits for the CA.
func (s *Service) RenewalTime(ctx context.Context, cluster, namespace, name string, ref cmmeta.IssuerReference, cert *x509.Certificate) issuers.RenewalAdvice {
	if ref.Kind != cmapi.ClusterIssuerKind || s.opts.RenewalInfoInterval < 0 {
		return issuers.RenewalAdvice{}
	}
	ci := &cmapi.ClusterIssuer{}
	if err := s.hub.Get(ctx, client.ObjectKey{Name: ref.Name}, ci); err != nil || ci.Spec.ACME == nil {
		return issuers.RenewalAdvice{}
	}
	id, err := acmeapi.CertificateARIID(cert)
	if err != nil {
		return issuers.RenewalAdvice{}
	}
	now := s.opts.Clock.Now()
	var adv issuers.RenewalAdvice
	s.mu.Lock()
	e, ok := s.ari.m[id]
	if !ok {
		e = &ariEntry{}
		s.ari.m[id] = e
	}
	e.asked = now
	stale := !e.fetching && !now.Before(e.next)
	if stale {
		e.fetching = true
	} else if !e.fetching {
		adv.Recheck = e.next
	}
	adv.At, adv.Status = e.at, e.status.DeepCopy()
	s.mu.Unlock()
	if stale {
		go s.fetchRenewalInfo(ci.DeepCopy(), id, cert, cluster, namespace, name)
	}
	return adv
}

// fetchRenewalInfo asks ci's CA for cert's window, stores the point chosen
// in it and wakes the Certificate when it moved. It is bounded by the
// request timeout and shares the order steps' concurrency.
func (s *Service) fetchRenewalInfo(ci *cmapi.ClusterIssuer, id string, cert *x509.Certificate, cluster, namespace, name string) {
	s.ariSlots <- struct{}{}
	defer func() { <-s.ariSlots }()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.RequestTimeout)
	defer cancel()
	log := ctrl.Log.WithName("acme").WithValues("cluster", cluster, "certificate", namespace+"/"+name, "issuer", ci.Name)
	at, ri, err := s.renewalInfo(ctx, ci, id, cert)
	now := s.opts.Clock.Now()
	interval := s.opts.RenewalInfoInterval
	s.mu.Lock()
	e := s.ari.m[id]
	status := e.status.DeepCopy()
	s.mu.Unlock()
	switch {
	case errors.Is(err, acmeapi.ErrCADoesNotSupportARI):
		status = nil // as cert-manager: no status.acme
	case err != nil:
		log.V(1).Info("failed to get the certificate's renewal information", "err", err.Error())
		interval = min(interval, s.opts.RetryBase)
		if status == nil {
			status = &cmapi.CertificateACMEARIStatus{}
		}
		status.LastError = err.Error()
	default:
		if ri.RetryAfter > 0 {
			interval = min(interval, ri.RetryAfter)
		}
		status = &cmapi.CertificateACMEARIStatus{ExplanationURL: ri.ExplanationURL}
		if w := ri.SuggestedWindow; !w.Start.IsZero() && !w.End.IsZero() {
			status.SuggestedWindow = &cmapi.ACMERenewalWindow{Start: wholeSeconds(w.Start), End: wholeSeconds(w.End)}
		}
	}
	if status != nil {
		status.LastChecked, status.NextCheck = wholeSeconds(now), wholeSeconds(now.Add(interval))
	}
	s.mu.Lock()
	moved := e.at != at || !apiequality.Semantic.DeepEqual(e.status, status)
	e.at, e.next, e.fetching, e.status = at, now.Add(interval), false, status
	s.ari.prune(now, s.opts.RenewalInfoInterval)
	s.mu.Unlock()
	if moved {
		log.V(1).Info("renewal time from the CA's renewal information", "renewalTime", at)
		s.wakeCertificate(cluster, namespace, name)
	}
}

// renewalInfo returns the renewal time chosen in cert's ARI window (zero
// when the CA has none) and the CA's answer.
func (s *Service) renewalInfo(ctx context.Context, ci *cmapi.ClusterIssuer, id string, cert *x509.Certificate) (time.Time, *acmeapi.RenewalInfoResponse, error) {
	cl, err := s.client(ctx, ci)
	if err != nil {
		return time.Time{}, nil, err
	}
	ri, err := cl.GetRenewalInfo(ctx, cert)
	if err != nil {
		return time.Time{}, nil, err
	}
	w := ri.SuggestedWindow
	if w.Start.IsZero() || w.End.IsZero() {
		return time.Time{}, ri, nil
	}
	if !w.Start.After(cert.NotBefore) {
		// A window that opens at or before the certificate was issued does
		// not describe it (cert-manager 1.21 ignores it the same way,
		// internal/controller/certificates/policies): renewing by it would
		// re-issue at once, again and again. The spec's renewal time holds.
		return time.Time{}, ri, nil
	}
	return pointInWindow(id, w.Start, w.End), ri, nil
}

// wholeSeconds is t as the API stores a time.
func wholeSeconds(t time.Time) *metav1.Time {
	return &metav1.Time{Time: t.UTC().Truncate(time.Second)}
}

// pointInWindow is a time in [start, end) fixed by id.
func pointInWindow(id string, start, end time.Time) time.Time {
	u := float64(xxhash.Sum64String(id)>>11) / (1 << 53)
	return start.Add(time.Duration(u * float64(end.Sub(start)))).Truncate(time.Second)
}
