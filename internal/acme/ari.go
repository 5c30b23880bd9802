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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// RenewalTime returns when cert, issued for the downstream Certificate
// cluster/namespace/name by ref, should be renewed according to its CA's
// renewal information; ok is false when ref is no ACME ClusterIssuer, the
// CA offers no ARI, or nothing is known yet (a background fetch then
// wakes the Certificate when the answer arrives); recheck is when the
// answer goes stale and should be asked for again. It never waits for the CA.
func (s *Service) RenewalTime(ctx context.Context, cluster, namespace, name string, ref cmmeta.IssuerReference, cert *x509.Certificate) (at time.Time, ok bool, recheck time.Time) {
	if ref.Kind != cmapi.ClusterIssuerKind || s.opts.RenewalInfoInterval < 0 {
		return time.Time{}, false, time.Time{}
	}
	ci := &cmapi.ClusterIssuer{}
	if err := s.hub.Get(ctx, client.ObjectKey{Name: ref.Name}, ci); err != nil || ci.Spec.ACME == nil {
		return time.Time{}, false, time.Time{}
	}
	id, err := acmeapi.CertificateARIID(cert)
	if err != nil {
		return time.Time{}, false, time.Time{}
	}
	now := s.opts.Clock.Now()
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
		recheck = e.next
	}
	at = e.at
	s.mu.Unlock()
	if stale {
		go s.fetchRenewalInfo(ci.DeepCopy(), id, cert, cluster, namespace, name)
	}
	return at, !at.IsZero(), recheck
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
	at, retry, err := s.renewalInfo(ctx, ci, id, cert)
	now := s.opts.Clock.Now()
	interval := s.opts.RenewalInfoInterval
	if err != nil {
		if !errors.Is(err, acmeapi.ErrCADoesNotSupportARI) {
			log.V(1).Info("failed to get the certificate's renewal information", "err", err.Error())
			interval = min(interval, s.opts.RetryBase)
		}
	} else if retry > 0 {
		interval = min(interval, retry)
	}
	s.mu.Lock()
	e := s.ari.m[id]
	moved := e.at != at
	e.at, e.next, e.fetching = at, now.Add(interval), false
	s.ari.prune(now, s.opts.RenewalInfoInterval)
	s.mu.Unlock()
	if moved {
		log.V(1).Info("renewal time from the CA's renewal information", "renewalTime", at)
		s.wakeCertificate(cluster, namespace, name)
	}
}

// renewalInfo returns the renewal time chosen in cert's ARI window (zero
// when the CA has none) and the CA's Retry-After.
func (s *Service) renewalInfo(ctx context.Context, ci *cmapi.ClusterIssuer, id string, cert *x509.Certificate) (time.Time, time.Duration, error) {
	cl, err := s.client(ctx, ci)
	if err != nil {
		return time.Time{}, 0, err
	}
	ri, err := cl.GetRenewalInfo(ctx, cert)
	if err != nil {
		return time.Time{}, 0, err
	}
	w := ri.SuggestedWindow
	if w.Start.IsZero() || w.End.IsZero() {
		return time.Time{}, ri.RetryAfter, nil
	}
	if !w.Start.After(cert.NotBefore) {
		// A window that opens at or before the certificate was issued does
		// not describe it (cert-manager 1.21 ignores it the same way,
		// internal/controller/certificates/policies): renewing by it would
		// re-issue at once, again and again. The spec's renewal time holds.
		return time.Time{}, ri.RetryAfter, nil
	}
	return pointInWindow(id, w.Start, w.End), ri.RetryAfter, nil
}

// pointInWindow is a time in [start, end) fixed by id.
func pointInWindow(id string, start, end time.Time) time.Time {
	u := float64(xxhash.Sum64String(id)>>11) / (1 << 53)
	return start.Add(time.Duration(u * float64(end.Sub(start)))).Truncate(time.Second)
}
