package certsync

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/issuers"
)

// input is what the policies decide on. secret is nil when it does not exist.
type input struct {
	crt    *cmapi.Certificate
	secret *corev1.Secret
	now    time.Time
	jitter float64 // Options.RenewalJitter
	// adopting: secret is cert-manager's, written for crt (target.adopting).
	adopting bool
	// sameIssuer, when adopting, reports whether a certificate comes from
	// the issuer identity crt names now (the same CA certificate); known is
	// false when the issuer cannot tell (issuers.Voucher).
	sameIssuer func(*x509.Certificate) (same, known bool)
	// record is what the hub's record says of crt's certificates (nil: no record).
	record *recordView
}

// secretState is the parsed content of an existing Secret.
type secretState struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// policyFunc returns violated=true and a reason/message when the Certificate
// must be (re)issued. Funcs are pure and ordered: the first violation wins.
type policyFunc func(in input, st *secretState) (reason, message string, violated bool)

type chain []policyFunc

// evaluate runs the chain. It parses the Secret once; policies after the
// parse checks may rely on st being complete.
func (c chain) evaluate(in input) (reason, message string, reissue bool, st *secretState) {
	st = parseSecret(in.secret)
	for _, f := range c {
		if reason, message, violated := f(in, st); violated {
			return reason, message, true, st
		}
	}
	return "", "", false, st
}

// triggerChain decides whether a Certificate needs a new certificate, after
// cert-manager's NewTriggerPolicyChain.
var triggerChain = chain{
	manuallyTriggered,
	secretDoesNotExist,
	secretIsMissingData,
	secretHasInvalidData,
	secretKeyMatchesCert,
	secretIssuerAnnotationsMatch,
	certificateIsRecorded,
	privateKeyMatchesSpec,
	certificateMatchesSpec,
	currentCertificateNearingExpiry,
	orderPending,
}

func parseSecret(s *corev1.Secret) *secretState {
	st := &secretState{}
	if s == nil {
		return st
	}
	if c, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey]); err == nil {
		st.cert = c
	}
	if k, err := pki.DecodePrivateKeyBytes(s.Data[corev1.TLSPrivateKeyKey]); err == nil {
		st.key = k
	}
	return st
}

func manuallyTriggered(in input, _ *secretState) (string, string, bool) {
	c := apiutil.GetCertificateCondition(in.crt, cmapi.CertificateConditionIssuing)
	if c != nil && c.Status == cmmeta.ConditionTrue && c.Reason != reasons.RateLimited && c.Reason != issuers.ReasonOrderPending { // certhub's own waits are no trigger
		if in.adopting && c.Reason != reasons.ManuallyTriggered {
			// cert-manager's own trigger, in flight when it stopped: the hub
			// decides afresh; only a user's `cmctl renew` still asks.
			return "", "", false
		}
		return reasons.ManuallyTriggered, "Issuing condition set to True: " + c.Message, true
	}
	return "", "", false
}

// orderPending keeps an issuance going while its order runs (an ACME
// order started by a trigger that no longer holds, e.g. a manual one):
// the Certificate asks the Orderer again until the order is done.
func orderPending(in input, _ *secretState) (string, string, bool) {
	c := apiutil.GetCertificateCondition(in.crt, cmapi.CertificateConditionIssuing)
	if c != nil && c.Status == cmmeta.ConditionTrue && c.Reason == issuers.ReasonOrderPending {
		return issuers.ReasonOrderPending, "Issuing certificate as its order runs: " + c.Message, true
	}
	return "", "", false
}

func secretDoesNotExist(in input, _ *secretState) (string, string, bool) {
	if in.secret == nil {
		return reasons.DoesNotExist, fmt.Sprintf("Issuing certificate as Secret %q does not exist", in.crt.Spec.SecretName), true
	}
	return "", "", false
}

func secretIsMissingData(in input, _ *secretState) (string, string, bool) {
	if len(in.secret.Data[corev1.TLSCertKey]) == 0 || len(in.secret.Data[corev1.TLSPrivateKeyKey]) == 0 {
		return reasons.MissingData, "Issuing certificate as Secret does not contain a certificate and private key", true
	}
	return "", "", false
}

func secretHasInvalidData(_ input, st *secretState) (string, string, bool) {
	if st.key == nil {
		return reasons.InvalidKey, "Issuing certificate as Secret contains an invalid private key", true
	}
	if st.cert == nil {
		return reasons.InvalidCertificate, "Issuing certificate as Secret contains an invalid certificate", true
	}
	return "", "", false
}

func secretKeyMatchesCert(_ input, st *secretState) (string, string, bool) {
	if ok, err := pki.PublicKeyMatchesCertificate(st.key.Public(), st.cert); err != nil || !ok {
		return reasons.KeyMismatch, "Issuing certificate as Secret contains a private key that does not match the certificate", true
	}
	return "", "", false
}

func secretIssuerAnnotationsMatch(in input, st *secretState) (string, string, bool) {
	ref := in.crt.Spec.IssuerRef
	a := in.secret.Annotations
	named := a[cmapi.IssuerNameAnnotationKey] == ref.Name && a[cmapi.IssuerKindAnnotationKey] == certspec.IssuerKind(ref) &&
		a[cmapi.IssuerGroupAnnotationKey] == ref.Group
	if in.adopting && in.sameIssuer != nil {
		// A Secret taken over from cert-manager keeps its certificate when
		// the issuer now named is the same identity (cert-manager's CA
		// issuer's key pair given to a hub ClusterIssuer), whatever the
		// names; never when it is another CA, even of the same name.
		if same, known := in.sameIssuer(st.cert); known {
			if !same {
				return reasons.IncorrectIssuer, fmt.Sprintf("Issuing certificate as the Secret cert-manager wrote was signed by another CA than %s %q", certspec.IssuerKind(ref), ref.Name), true
			}
			named = true
		}
	}
	if !named {
		return reasons.IncorrectIssuer, fmt.Sprintf("Issuing certificate as Secret was previously issued by %s %q", a[cmapi.IssuerKindAnnotationKey], a[cmapi.IssuerNameAnnotationKey]), true
	}
	if a[cmapi.CertificateNameKey] != in.crt.Name {
		return reasons.SecretMismatch, fmt.Sprintf("Issuing certificate as Secret was issued for Certificate %q", a[cmapi.CertificateNameKey]), true
	}
	return "", "", false
}

func privateKeyMatchesSpec(in input, st *secretState) (string, string, bool) {
	if v := pki.PrivateKeyMatchesSpec(st.key, in.crt.Spec); len(v) > 0 {
		return reasons.IncorrectCertificate, "Issuing certificate as Secret's private key does not match the spec: " + strings.Join(v, ", "), true
	}
	return "", "", false
}

func certificateMatchesSpec(in input, st *secretState) (string, string, bool) {
	v := certspec.Mismatches(st.cert, in.crt.Spec)
	h := requestHashOf(in, st) // ordered: compared with the request the record holds, never an annotation
	if h == "" && rebuildingUnvouched(in, st) {
		// The record is rebuilding and the issuer cannot vouch (ACME): the
		// CA chose subject and usages, so only the names are compared, as
		// for a certificate ordered for today's spec; it is recorded so.
		h, _ = certspec.RequestHash(in.crt)
	}
	if h != "" {
		v = certspec.RequestMismatches(st.cert, in.crt, h)
	}
	if len(v) > 0 {
		return reasons.IncorrectCertificate, "Issuing certificate as the existing certificate does not match the spec: " + strings.Join(v, ", "), true
	}
	return "", "", false
}

func currentCertificateNearingExpiry(in input, st *secretState) (string, string, bool) {
	if certspec.RenewalDisabled(in.crt) {
		return "", "", false // cert-manager 1.21: renewal.policy Disabled renews never, expired or not (a manual trigger still issues)
	}
	if !in.now.Before(st.cert.NotAfter) {
		return reasons.Expired, fmt.Sprintf("Certificate expired on %s", st.cert.NotAfter.Format(time.RFC1123)), true
	}
	rt, err := certspec.RenewalTime(in.crt, st.cert, in.jitter)
	if err == nil && rt != nil && !in.now.Before(rt.Time) {
		return reasons.Renewing, fmt.Sprintf("Renewing certificate as renewal was scheduled at %s", rt.Format(time.RFC1123)), true
	}
	return "", "", false
}

// decision is whether to issue now, and why.
type decision struct {
	reissue         bool
	reason, message string
	state           *secretState
}

// decide runs the issuance triggers on what was gathered, on the live
// Secret when the cache may be behind, then a CA rotation's override and
// the CA's renewal advice (ARI). in.secret is replaced by the live Secret
// when it was read.
func (r *reconciler) decide(ctx context.Context, t *target, in *gathered) (decision, bool, reconcile.Result, error) {
	crt, now := t.crt, in.now
	if r.opts.Record != nil {
		select {
		case <-r.opts.Record.Ready():
		default:
			return decision{}, true, reconcile.Result{RequeueAfter: time.Second}, nil // the record is being read
		}
	}
	base := input{crt: crt, now: now, jitter: r.opts.RenewalJitter, adopting: t.adopting, record: r.view(t)}
	if t.adopting || base.record != nil && base.record.rebuilding {
		base.sameIssuer = r.sameIssuer(ctx, t)
	}
	withSecret := func(s *corev1.Secret) input { i := base; i.secret = s; return i }
	reason, message, reissue, st := triggerChain.evaluate(withSecret(in.secret))
	if reissue && in.secret != nil {
		// The cache may not have seen the last write to this Secret yet (ours
		// a moment ago, or the previous owner's before a handoff): decide on
		// the live object before signing, or one spec would be issued twice.
		live, err := r.liveSecret(ctx, t.cl, client.ObjectKeyFromObject(in.secret))
		if err != nil {
			return decision{}, true, reconcile.Result{}, err
		}
		if live == nil || live.ResourceVersion != in.secret.ResourceVersion {
			if live != nil && live.Labels[hubapi.ManagedByLabel] != hubapi.ManagedByValue && notAdoptable(live, crt) != "" {
				return decision{}, true, reconcile.Result{RequeueAfter: conflictRequeue}, nil // someone took the Secret over meanwhile; look again from the top
			}
			in.secret = live
			reason, message, reissue, st = triggerChain.evaluate(withSecret(live))
		}
	}
	if reissue && claimsOrder(crt) {
		// A status is output, never input: only the hub's own order shows
		// that this issuance was admitted and runs.
		inFlight, err := r.orderInFlight(ctx, t, st)
		if err != nil {
			return decision{}, true, reconcile.Result{}, err
		}
		t.ordering = inFlight
		if !inFlight && reason == issuers.ReasonOrderPending {
			logr.FromContextOrDiscard(ctx).Info("ignoring an Issuing condition that claims an order the hub does not hold", "condition", message)
			reissue, reason, message = false, "", ""
		}
	}
	if !reissue && st != nil && st.cert != nil && r.opts.Revocation != nil {
		if msg, ok := r.opts.Revocation.MustRenew(string(t.name), crt.Namespace, crt.Name, st.cert); ok {
			reissue, reason, message = true, reasons.Revocation, msg
		}
	}
	if r.opts.Rotation != nil {
		iss, ca, ok, err := r.opts.Rotation.Override(ctx, t.name, crt.Spec.IssuerRef)
		if err != nil {
			return decision{}, true, reconcile.Result{RequeueAfter: r.opts.IssuerRetryInterval}, r.setNotReady(ctx, t, issuers.ReasonIssuerNotReady, err.Error())
		}
		if ok {
			t.override = iss
			if !reissue && st != nil && st.cert != nil && st.cert.CheckSignatureFrom(ca) != nil {
				reissue, reason = true, reasons.CARotation
				message = fmt.Sprintf("Issuing certificate as ClusterIssuer %q rotates its CA and this cluster now signs with another one", crt.Spec.IssuerRef.Name)
			}
		}
	}
	if !reissue && st != nil && st.cert != nil && t.template != nil && t.decision.Allowed {
		if diff := certspec.CAPowersDiffer(st.cert, t.template); diff != "" {
			reissue, reason = true, reasons.PolicyChanged
			message = "Issuing certificate as the issuance policy now signs it with other CA powers: " + diff
		}
	}
	if !reissue && st != nil && st.cert != nil && r.opts.RenewalAdvice != nil && !certspec.RenewalDisabled(crt) {
		t.advice = askAdvice(ctx, r.opts.RenewalAdvice, t, st.cert)
		if t.advice.ok && !now.Before(t.advice.at) {
			reissue, reason = true, reasons.Renewing
			message = fmt.Sprintf("Renewing certificate as its CA's renewal window (ARI) says to renew at %s", t.advice.at.Format(time.RFC1123))
		}
	}
	return decision{reissue: reissue, reason: reason, message: message, state: st}, false, reconcile.Result{}, nil
}

// sameIssuer returns whether a certificate comes from the issuer identity
// t's Certificate names (issuers.Voucher: the CA's own certificate signed
// it), and whether the issuer can tell at all (not when it does not vouch,
// as ACME, or cannot be resolved: the issuer annotations decide then).
func (r *reconciler) sameIssuer(ctx context.Context, t *target) func(*x509.Certificate) (bool, bool) {
	return func(cert *x509.Certificate) (bool, bool) {
		iss, err := r.opts.Issuers.Resolve(ctx, t.crt.Spec.IssuerRef, t.crt.Namespace, t.cl.GetAPIReader())
		if err != nil {
			return false, false
		}
		v, ok := iss.(issuers.Voucher)
		if !ok || cert == nil {
			return false, false
		}
		return v.Issued(cert), true
	}
}

// claimsOrder reports whether crt's status says an order of the hub runs
// for it (Issuing=True, reason OrderPending): a claim to check, since a
// downstream user can write it.
func claimsOrder(crt *cmapi.Certificate) bool {
	c := apiutil.GetCertificateCondition(crt, cmapi.CertificateConditionIssuing)
	return c != nil && c.Status == cmmeta.ConditionTrue && c.Reason == issuers.ReasonOrderPending
}

// orderInFlight asks crt's issuer, when it orders (ACME), whether the hub
// holds the order of this issuance. Issuers that sign at once hold none.
func (r *reconciler) orderInFlight(ctx context.Context, t *target, st *secretState) (bool, error) {
	iss, err := r.opts.Issuers.Resolve(ctx, t.crt.Spec.IssuerRef, t.crt.Namespace, t.cl.GetAPIReader())
	if err != nil {
		return false, nil //nolint:nilerr // the issuance reports the issuer's error on the Certificate
	}
	o, ok := iss.(issuers.Orderer)
	if !ok {
		return false, nil
	}
	return o.InFlight(ctx, orderRequest(t, nil, st))
}

// orderRequest is the issuance asked of an Orderer. Current, the
// certificate replaced, is the Secret's only when the Secret also holds its
// private key: a pasted tls.crt proves nothing, and must not lend its
// identity to the order (its name, its ARI replacement).
func orderRequest(t *target, key crypto.Signer, st *secretState) issuers.OrderRequest {
	req := issuers.OrderRequest{Cluster: string(t.name), Certificate: t.crt, Template: t.template, Key: key}
	if st != nil && st.cert != nil && st.key != nil {
		if ok, err := pki.PublicKeyMatchesCertificate(st.key.Public(), st.cert); err == nil && ok {
			req.Current = st.cert
		}
	}
	return req
}
