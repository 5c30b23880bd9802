package acme

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/util"
	acmeapi "github.com/cert-manager/cert-manager/third_party/forked/acme"
	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"

	"github.com/certhub/certhub/internal/dns01"
)

// Reasons of an Errored order (status.reason, and the Certificate's Ready=False).
const (
	// ReasonChallengeFailed: the CA could not validate a DNS-01 challenge.
	ReasonChallengeFailed = "ChallengeFailed"
	// ReasonPropagationTimeout: the TXT records never showed on the nameservers.
	ReasonPropagationTimeout = "PropagationTimeout"
	// ReasonPresentFailed: writing a TXT record failed (e.g. the DNS server refused the update).
	ReasonPresentFailed = "PresentFailed"
	// ReasonCAError: the CA refused or failed the order itself.
	ReasonCAError = "ACMEServerError"
)

// reconcileOrder moves one order one step: every step is a few requests
// to the CA or DNS and ends by writing the status (which is the claim's
// renewal too) or by asking to be called again shortly. No step waits for
// the CA or for DNS propagation.
func (s *Service) reconcileOrder(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ord := &hubapi.ACMEOrder{}
	if err := s.hub.Get(ctx, req.NamespacedName, ord); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log := log.FromContext(ctx).WithValues("cluster", ord.Spec.Cluster, "certificate", ord.Spec.Namespace+"/"+ord.Spec.Certificate)
	ctx = logr.NewContext(ctx, log)
	now := s.opts.Clock.Now()
	if ord.DeletionTimestamp != nil {
		return s.release(ctx, ord)
	}
	if done(ord) && presented(ord) {
		return s.cleanUpDone(ctx, ord, now) // a clean-up that failed when the order ended
	}
	if done(ord) {
		s.wake(ord) // every replica: the Certificate's owner issues from it
		if ord.Status.FinishedAt == nil {
			return ctrl.Result{}, nil
		}
		expires := ord.Status.FinishedAt.Add(s.opts.OrderRetention)
		if now.Before(expires) {
			return ctrl.Result{RequeueAfter: expires.Sub(now)}, nil
		}
		return ctrl.Result{}, s.deleteOrder(ctx, ord)
	}
	if ord.Status.Holder != s.opts.Identity && ord.Status.HeldUntil != nil && now.Before(ord.Status.HeldUntil.Time) {
		return ctrl.Result{RequeueAfter: ord.Status.HeldUntil.Sub(now) + 100*time.Millisecond}, nil
	}
	// The cache may lag behind this replica's own last write: act only on
	// the order as the API server has it, so no step is done twice.
	if err := s.live.Get(ctx, req.NamespacedName, ord); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if done(ord) {
		return ctrl.Result{RequeueAfter: s.opts.PollInterval / 10}, nil // the cache lags; it handles the finished order
	}
	if ord.Status.Holder != s.opts.Identity && ord.Status.HeldUntil != nil && now.Before(ord.Status.HeldUntil.Time) {
		return ctrl.Result{RequeueAfter: ord.Status.HeldUntil.Sub(now) + 100*time.Millisecond}, nil
	}
	if ord.Status.Holder != s.opts.Identity {
		log.Info("taking over ACME order", "order", ord.Name, "from", ord.Status.Holder, "state", ord.Status.State)
	}
	if ord.Status.Holder != s.opts.Identity || s.renewDue(ord, now) {
		// The claim is renewed before the step calls the CA, so the step
		// ends (its deadline, below) before anyone else may take over.
		if !s.claim(ctx, ord) {
			return ctrl.Result{RequeueAfter: s.opts.PollInterval}, nil
		}
	}
	ci := &cmapi.ClusterIssuer{}
	if err := s.hub.Get(ctx, client.ObjectKey{Name: ord.Spec.IssuerName}, ci); err != nil || ci.Spec.ACME == nil {
		if apierrors.IsNotFound(err) || (err == nil && ci.Spec.ACME == nil) {
			return s.fail(ctx, ord, ReasonCAError, fmt.Sprintf("ClusterIssuer %s is gone or no longer an ACME issuer", ord.Spec.IssuerName))
		}
		return ctrl.Result{}, err
	}
	cl, err := s.client(ctx, ci)
	if err != nil {
		return ctrl.Result{RequeueAfter: s.opts.PollInterval}, fmt.Errorf("ACMEOrder %s: %w", ord.Name, err)
	}
	next := ord.DeepCopy()
	var res ctrl.Result
	// The step's requests together end before the claim does: a replica
	// that stalls cannot act on the order after another took it over.
	timeout := min(s.opts.RequestTimeout, ord.Status.HeldUntil.Sub(s.opts.Clock.Now())-s.opts.HoldDuration/10)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch ord.Status.State {
	case "", hubapi.ACMEOrderOrdering:
		res, err = s.authorize(ctx, cl, ci, next)
	case hubapi.ACMEOrderPresenting:
		res, err = s.present(ctx, ci, next)
	case hubapi.ACMEOrderPropagating:
		res, err = s.propagate(ctx, cl, ci, next)
	case hubapi.ACMEOrderValidating:
		res, err = s.validate(ctx, cl, ci, next)
	case hubapi.ACMEOrderFinalizing:
		res, err = s.finalize(ctx, cl, next)
	}
	if err != nil {
		return res, fmt.Errorf("ACMEOrder %s (%s): %w", ord.Name, ord.Status.State, err)
	}
	if !reflect.DeepEqual(next.Status, ord.Status) || s.renewDue(ord, now) {
		if ok := s.write(ctx, ord, next); !ok {
			return ctrl.Result{RequeueAfter: s.opts.PollInterval}, nil
		}
		if next.Status.State != ord.Status.State {
			log.V(1).Info("ACME order moved", "order", ord.Name, "state", next.Status.State)
		}
		if done(next) {
			s.wake(next)
			return ctrl.Result{}, nil
		}
		// The write's own event usually comes first; this is the floor.
		return ctrl.Result{RequeueAfter: max(res.RequeueAfter, s.opts.PollInterval/10)}, nil
	}
	return res, nil
}

// claim makes this replica ord's holder; false when another replica won.
func (s *Service) claim(ctx context.Context, ord *hubapi.ACMEOrder) bool {
	next := ord.DeepCopy()
	return s.write(ctx, ord, next)
}

// renewDue reports whether the claim should be renewed now.
func (s *Service) renewDue(ord *hubapi.ACMEOrder, now time.Time) bool {
	return ord.Status.HeldUntil == nil || ord.Status.HeldUntil.Sub(now) < s.opts.HoldDuration/2
}

// write stores next's status (with the claim renewed) if ord is still
// the version read; false on a conflict (another replica moved it).
func (s *Service) write(ctx context.Context, ord, next *hubapi.ACMEOrder) bool {
	next.Status.Holder = s.opts.Identity
	next.Status.HeldUntil = &metav1.Time{Time: s.opts.Clock.Now().Add(s.opts.HoldDuration)}
	if next.Status.State == "" {
		next.Status.State = hubapi.ACMEOrderOrdering
	}
	if err := s.hub.Status().Patch(ctx, next, client.MergeFromWithOptions(ord, client.MergeFromWithOptimisticLock{})); err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			logr.FromContextOrDiscard(ctx).Error(err, "failed to write ACMEOrder status", "order", ord.Name)
		}
		return false
	}
	*ord = *next
	return true
}

// fail ends ord as Errored, cleaning up whatever TXT records it wrote.
func (s *Service) fail(ctx context.Context, ord *hubapi.ACMEOrder, reason, message string) (ctrl.Result, error) {
	next := ord.DeepCopy()
	s.failInto(ctx, nil, next, reason, message)
	if !s.write(ctx, ord, next) {
		return ctrl.Result{RequeueAfter: s.opts.PollInterval}, nil
	}
	s.wake(next)
	return ctrl.Result{}, nil
}

func (s *Service) failInto(ctx context.Context, ci *cmapi.ClusterIssuer, next *hubapi.ACMEOrder, reason, message string) {
	if ci != nil {
		s.cleanUp(ctx, ci, next)
	}
	now := metav1.NewTime(s.opts.Clock.Now())
	next.Status.State, next.Status.Reason, next.Status.Message, next.Status.FinishedAt = hubapi.ACMEOrderErrored, reason, message, &now
	s.count(next.Spec.IssuerName, "errored")
	logr.FromContextOrDiscard(ctx).Info("ACME order failed", "order", next.Name, "reason", reason, "message", message)
}

// authorize asks the CA for the order (once: a retry after a crash before
// the URL was written asks again) and records its DNS-01 challenges.
func (s *Service) authorize(ctx context.Context, cl *acmeapi.Client, ci *cmapi.ClusterIssuer, next *hubapi.ACMEOrder) (ctrl.Result, error) {
	if next.Status.URL == "" && next.Spec.Continues != "" {
		return s.continueOrder(ctx, cl, ci, next)
	}
	if next.Status.URL == "" {
		ids := acmeapi.DomainIDs(next.Spec.DNSNames...)
		var opts []acmeapi.OrderOption
		if p := ci.Spec.ACME.Profile; p != "" {
			opts = append(opts, acmeapi.WithOrderProfile(p))
		}
		if wait := s.paused(ctx, ci, next.Spec.DNSNames); wait > 0 {
			logr.FromContextOrDiscard(ctx).V(1).Info("the CA paused what this order draws from", "order", next.Name, "wait", wait)
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		replaces := next.Spec.Replaces != "" && !next.Status.ReplacesRefused
		if next.Spec.Replaces != "" && !replaces {
			// Ordered as new after all: now it takes the budget it skipped.
			wait, refused, err := s.admit(ctx, ci, next.Name, next.Spec.Cluster, next.Spec.Namespace, s.opts.Clock.Now(), next.Spec.DNSNames)
			if err != nil {
				return ctrl.Result{}, fmt.Errorf("ClusterIssuer %s budget: %w", ci.Name, err)
			}
			if wait > 0 {
				logr.FromContextOrDiscard(ctx).V(1).Info("waiting for the issuer's budget", "order", next.Name, "limit", refused, "wait", wait)
				return ctrl.Result{RequeueAfter: wait}, nil
			}
		}
		if replaces {
			opts = append(opts, acmeapi.WithOrderReplacesCertID(next.Spec.Replaces))
		}
		o, err := cl.AuthorizeOrder(ctx, ids, opts...)
		if replaces && (errors.Is(err, acmeapi.ErrCADoesNotSupportARI) || refused(err)) {
			// A CA without ARI, or a certificate it will not see replaced
			// (another account's, replaced already): order it as new.
			logr.FromContextOrDiscard(ctx).Info("the ACME server refused the order as a renewal (replaces); ordering it as a new one", "order", next.Name, "err", err.Error())
			next.Status.ReplacesRefused = true
			return ctrl.Result{}, nil
		}
		if ae := (*acmeapi.Error)(nil); errors.As(err, &ae) && ae.StatusCode == http.StatusTooManyRequests {
			wait, bucket := s.pause(ctx, ci, ae, next.Spec.DNSNames) // every replica's orders drawing from that bucket wait too
			logr.FromContextOrDiscard(ctx).Info("the ACME server is rate limiting; what it limits pauses", "order", next.Name, "bucket", bucket, "retryAfter", wait, "detail", ae.Detail)
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if err != nil {
			if refused(err) {
				s.failInto(ctx, ci, next, ReasonCAError, fmt.Sprintf("the ACME server refused the order: %v", err))
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("failed to create the order: %w", err)
		}
		s.count(ci.Name, "created")
		next.Status.URL, next.Status.FinalizeURL = o.URI, o.FinalizeURL
		for _, u := range o.AuthzURLs {
			next.Status.Challenges = append(next.Status.Challenges, hubapi.ACMEChallenge{AuthorizationURL: u})
		}
		// Stored before anything else is asked: whatever fails next, or
		// whoever takes over, continues this order at the CA, never a new one.
		return ctrl.Result{}, nil
	}
	for i := range next.Status.Challenges {
		ch := &next.Status.Challenges[i]
		if ch.Identifier != "" {
			continue
		}
		z, err := cl.GetAuthorization(ctx, ch.AuthorizationURL)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to get authorization %s: %w", ch.AuthorizationURL, err)
		}
		ch.Identifier, ch.Wildcard = z.Identifier.Value, z.Wildcard
		if z.Status == acmeapi.StatusValid {
			ch.Valid = true // reused authorization: nothing to solve
			continue
		}
		var dns01 *acmeapi.Challenge
		for _, c := range z.Challenges {
			if c.Type == "dns-01" {
				dns01 = c
			}
		}
		if dns01 == nil {
			s.failInto(ctx, ci, next, ReasonUnsupportedSolver, fmt.Sprintf("the ACME server offers no dns-01 challenge for %q", ch.Identifier))
			return ctrl.Result{}, nil
		}
		name := ch.Identifier
		if ch.Wildcard {
			name = "*." + name
		}
		idx, err := chooseSolver(ci.Spec.ACME.Solvers, name, next.Spec.SolverLabels) // as the order was checked (orderer.identify)
		if err != nil {
			s.failInto(ctx, ci, next, ReasonNoSolver, err.Error())
			return ctrl.Result{}, nil
		}
		sol := ci.Spec.ACME.Solvers[idx]
		follow := sol.DNS01 != nil && sol.DNS01.CNAMEStrategy == "Follow"
		fqdn, err := util.DNS01LookupFQDN(ctx, ch.Identifier, follow, s.opts.DNS01Nameservers...)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to find the TXT record name of %q: %w", ch.Identifier, err)
		}
		zone, err := util.FindZoneByFqdn(ctx, fqdn, s.opts.DNS01Nameservers)
		if err != nil {
			s.failInto(ctx, ci, next, ReasonSolverConfig, fmt.Sprintf("cannot find the DNS zone of %s on %v: %v", fqdn, s.opts.DNS01Nameservers, err))
			return ctrl.Result{}, nil
		}
		value, err := cl.DNS01ChallengeRecord(dns01.Token)
		if err != nil {
			return ctrl.Result{}, err
		}
		ch.URL, ch.Token, ch.Key, ch.FQDN, ch.Zone, ch.Solver = dns01.URI, dns01.Token, value, fqdn, zone, idx
	}
	next.Status.State = hubapi.ACMEOrderPresenting
	return ctrl.Result{}, nil
}

// present writes every TXT record not written yet.
func (s *Service) present(ctx context.Context, ci *cmapi.ClusterIssuer, next *hubapi.ACMEOrder) (ctrl.Result, error) {
	for i := range next.Status.Challenges {
		ch := &next.Status.Challenges[i]
		if ch.Valid || ch.Presented {
			continue
		}
		p, err := s.provider(ctx, ci, ch.Solver)
		if err != nil {
			s.failInto(ctx, ci, next, ReasonSolverConfig, err.Error())
			return ctrl.Result{}, nil
		}
		if err := p.Present(ctx, ch.Identifier, ch.FQDN, ch.Zone, ch.Key); err != nil {
			msg := fmt.Sprintf("writing TXT %s in zone %s failed: %v", ch.FQDN, ch.Zone, err)
			if unanswered(err) && s.opts.Clock.Since(next.CreationTimestamp.Time) < s.opts.PropagationTimeout {
				// No answer (a timeout, a refused connection): the DNS server
				// may be busy or restarting. The same order tries again
				// rather than spending a new one from the budget.
				next.Status.Message = msg + "; retrying"
				logr.FromContextOrDiscard(ctx).Info("DNS update not answered, retrying", "order", next.Name, "message", msg)
				return ctrl.Result{RequeueAfter: presentRetry}, nil
			}
			s.failInto(ctx, ci, next, ReasonPresentFailed, msg)
			return ctrl.Result{}, nil
		}
		ch.Presented = true
	}
	now := metav1.NewTime(s.opts.Clock.Now())
	next.Status.PresentedAt, next.Status.State = &now, hubapi.ACMEOrderPropagating
	return ctrl.Result{}, nil
}

// propagate checks (one query per record and nameserver) that the TXT
// records are served; when they all are, and after the configured settle
// delay, it accepts the challenges.
func (s *Service) propagate(ctx context.Context, cl *acmeapi.Client, ci *cmapi.ClusterIssuer, next *hubapi.ACMEOrder) (ctrl.Result, error) {
	for _, ch := range next.Status.Challenges {
		if ch.Valid {
			continue
		}
		ok, err := util.PreCheckDNS(ctx, ch.FQDN, ch.Key, s.opts.DNS01Nameservers, s.opts.DNS01CheckAuthoritative)
		if err == nil && ok {
			continue
		}
		if s.opts.Clock.Since(next.Status.PresentedAt.Time) > s.opts.PropagationTimeout {
			msg := fmt.Sprintf("TXT %s not served by the nameservers within %s", ch.FQDN, s.opts.PropagationTimeout)
			if err != nil {
				msg += ": " + err.Error()
			}
			s.failInto(ctx, ci, next, ReasonPropagationTimeout, msg)
			return ctrl.Result{}, nil
		}
		logr.FromContextOrDiscard(ctx).V(1).Info("TXT record not propagated yet", "fqdn", ch.FQDN, "err", err)
		return ctrl.Result{RequeueAfter: s.opts.DNS01CheckInterval}, nil
	}
	if wait := next.Status.PresentedAt.Add(s.opts.DNS01Settle).Sub(s.opts.Clock.Now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	for _, ch := range next.Status.Challenges {
		if ch.Valid {
			continue
		}
		if _, err := cl.Accept(ctx, &acmeapi.Challenge{URI: ch.URL, Token: ch.Token, Type: "dns-01"}); err != nil {
			if refused(err) {
				s.failInto(ctx, ci, next, ReasonChallengeFailed, fmt.Sprintf("the ACME server refused the challenge of %q: %v", ch.Identifier, err))
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("failed to accept the challenge of %q: %w", ch.Identifier, err)
		}
	}
	next.Status.State = hubapi.ACMEOrderValidating
	return ctrl.Result{RequeueAfter: s.opts.PollInterval / 2}, nil
}

// validate polls the authorizations once; when all are valid it removes
// the TXT records and moves on, when one is invalid it fails the order.
func (s *Service) validate(ctx context.Context, cl *acmeapi.Client, ci *cmapi.ClusterIssuer, next *hubapi.ACMEOrder) (ctrl.Result, error) {
	for i := range next.Status.Challenges {
		ch := &next.Status.Challenges[i]
		if ch.Valid {
			continue
		}
		z, err := cl.GetAuthorization(ctx, ch.AuthorizationURL)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to get authorization %s: %w", ch.AuthorizationURL, err)
		}
		switch z.Status {
		case acmeapi.StatusValid:
			ch.Valid = true
		case acmeapi.StatusPending, acmeapi.StatusProcessing:
			return ctrl.Result{RequeueAfter: s.opts.PollInterval / 2}, nil
		default:
			detail := z.Status
			for _, c := range z.Challenges {
				if c.Type == "dns-01" && c.Error != nil {
					detail = c.Error.Error()
				}
			}
			s.failed(ctx, ci, []string{ch.Identifier})
			s.failInto(ctx, ci, next, ReasonChallengeFailed, fmt.Sprintf("the ACME server could not validate %q: %s", ch.Identifier, detail))
			return ctrl.Result{}, nil
		}
	}
	s.cleanUp(ctx, ci, next)
	next.Status.State = hubapi.ACMEOrderFinalizing
	return ctrl.Result{}, nil
}

// finalize submits the CSR when the order is ready and fetches the
// certificate when it is valid.
func (s *Service) finalize(ctx context.Context, cl *acmeapi.Client, next *hubapi.ACMEOrder) (ctrl.Result, error) {
	o, err := cl.GetOrder(ctx, next.Status.URL)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to get the order: %w", err)
	}
	switch o.Status {
	case acmeapi.StatusReady:
		// The fork waits for the order after finalize; bounded by
		// FinalizeWait, and Pebble's answers without a Location header end
		// its wait at once: the next step polls the order itself.
		fctx, cancel := context.WithTimeout(ctx, s.opts.FinalizeWait)
		defer cancel()
		der, certURL, err := cl.CreateOrderCert(fctx, next.Status.FinalizeURL, next.Spec.Request, true)
		if err != nil {
			if refused(err) {
				s.failInto(ctx, nil, next, ReasonCAError, fmt.Sprintf("the ACME server refused to finalize the order: %v", err))
				return ctrl.Result{}, nil
			}
			return ctrl.Result{RequeueAfter: s.opts.PollInterval / 2}, nil
		}
		s.valid(next, der, certURL)
		return ctrl.Result{}, nil
	case acmeapi.StatusProcessing, acmeapi.StatusPending:
		return ctrl.Result{RequeueAfter: s.opts.PollInterval / 2}, nil
	case acmeapi.StatusValid:
		der, err := cl.FetchCert(ctx, o.CertURL, true)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("failed to fetch the certificate: %w", err)
		}
		s.valid(next, der, o.CertURL)
		return ctrl.Result{}, nil
	default:
		msg := "the order is " + o.Status
		if o.Error != nil {
			msg += ": " + o.Error.Error()
		}
		s.failInto(ctx, nil, next, ReasonCAError, msg)
		return ctrl.Result{}, nil
	}
}

func (s *Service) valid(next *hubapi.ACMEOrder, der [][]byte, certURL string) {
	var b strings.Builder
	for _, d := range der {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: d})
	}
	now := metav1.NewTime(s.opts.Clock.Now())
	next.Status.State, next.Status.Certificate, next.Status.CertificateURL, next.Status.FinishedAt = hubapi.ACMEOrderValid, []byte(b.String()), certURL, &now
	s.count(next.Spec.IssuerName, "valid")
}

// provider builds the DNS provider of solver idx of ci.
func (s *Service) provider(ctx context.Context, ci *cmapi.ClusterIssuer, idx int) (dns01.Provider, error) {
	if idx < 0 || idx >= len(ci.Spec.ACME.Solvers) {
		return nil, fmt.Errorf("ClusterIssuer %s has no solver %d any more", ci.Name, idx)
	}
	if s.opts.newProvider != nil {
		return s.opts.newProvider(ci.Spec.ACME.Solvers[idx])
	}
	return newProvider(ctx, dns01.Env{Hub: s.hub, Namespace: s.opts.Namespace, Nameservers: s.opts.DNS01Nameservers, UserAgent: s.opts.UserAgent,
		Ambient: s.opts.AmbientCredentials, Webhook: s.webhook}, ci.Spec.ACME.Solvers[idx])
}

// presentRetry is how long an order waits to write a TXT record again after
// the DNS server did not answer.
const presentRetry = 5 * time.Second

// unanswered reports whether a provider's error is a transport failure — no
// answer from the DNS server or API — rather than an answer refusing the
// update (a wrong TSIG key, a zone not served), which trying again cannot
// fix. cert-manager's providers format the transport error into their own
// (%v), so its text is what is left to go by.
func unanswered(err error) bool {
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"i/o timeout", "connection refused", "connection reset", "no route to host", "Client.Timeout exceeded"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// refused reports whether the CA answered err with a 4xx other than 429:
// asking again cannot help.
func refused(err error) bool {
	ae := (*acmeapi.Error)(nil)
	return errors.As(err, &ae) && ae.StatusCode >= 400 && ae.StatusCode < 500 && ae.StatusCode != http.StatusTooManyRequests
}

// done reports whether ord is Valid or Errored.
func done(ord *hubapi.ACMEOrder) bool {
	return ord.Status.State == hubapi.ACMEOrderValid || ord.Status.State == hubapi.ACMEOrderErrored
}

// wake tells the subscribers that ord's Certificate has something to pick up.
func (s *Service) wake(ord *hubapi.ACMEOrder) {
	s.wakeCertificate(ord.Spec.Cluster, ord.Spec.Namespace, ord.Spec.Certificate)
}

// wakeCertificate tells the subscribers that a downstream Certificate has news.
func (s *Service) wakeCertificate(cluster, namespace, name string) {
	s.mu.Lock()
	subs := s.subs
	s.mu.Unlock()
	for _, f := range subs {
		f(cluster, namespace, name)
	}
}

// clientCache keeps one ACME client per issuer, account and server, so
// its directory and nonces are reused.
type clientCache struct {
	mu sync.Mutex
	m  map[string]*acmeapi.Client
}
