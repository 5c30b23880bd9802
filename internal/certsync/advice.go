package certsync

import (
	"context"
	"crypto/x509"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RenewalAdvisor tells when a certificate should be renewed according to
// the CA that issued it (ACME renewal information, RFC 9773; internal/acme
// implements it). It never waits for the CA: when it knows nothing yet it
// says so (ok false) and wakes the Certificate (Options.Wake) once it does.
type RenewalAdvisor interface {
	// RenewalTime returns the CA's renewal time for cert, issued by ref
	// for the Certificate cluster/namespace/name; ok is false when the CA
	// gives none. recheck, when not zero, is when to ask again.
	RenewalTime(ctx context.Context, cluster, namespace, name string, ref cmmeta.IssuerReference, cert *x509.Certificate) (at time.Time, ok bool, recheck time.Time)
}

// advice is a RenewalAdvisor's answer for one certificate.
type advice struct {
	cert    *x509.Certificate // the certificate it is for
	at      time.Time
	ok      bool
	recheck time.Time
}

func askAdvice(ctx context.Context, a RenewalAdvisor, t *target, cert *x509.Certificate) advice {
	at, ok, recheck := a.RenewalTime(ctx, string(t.name), t.crt.Namespace, t.crt.Name, t.crt.Spec.IssuerRef, cert)
	return advice{cert: cert, at: at, ok: ok, recheck: recheck}
}

// renewalTime is the earlier of the spec's renewal time rt and the CA's,
// when the advice is for cert: a CA's window never postpones what the
// spec asks for.
func (a advice) renewalTime(cert *x509.Certificate, rt *metav1.Time) *metav1.Time {
	if a.cert != cert || !a.ok || (rt != nil && !a.at.Before(rt.Time)) {
		return rt
	}
	return &metav1.Time{Time: a.at}
}
