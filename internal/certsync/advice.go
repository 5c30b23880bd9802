package certsync

import (
	"context"
	"crypto/x509"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	acmeapi "github.com/cert-manager/cert-manager/third_party/forked/acme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certhub/certhub/internal/issuers"
)

// RenewalAdvisor tells when a certificate should be renewed according to
// the CA that issued it (ACME renewal information, RFC 9773; internal/acme
// implements it). It never waits for the CA: when it knows nothing yet it
// says so (ok false) and wakes the Certificate (Options.Wake) once it does.
type RenewalAdvisor interface {
	// RenewalTime returns what the CA says about renewing cert, issued by
	// ref for the Certificate cluster/namespace/name.
	RenewalTime(ctx context.Context, cluster, namespace, name string, ref cmmeta.IssuerReference, cert *x509.Certificate) issuers.RenewalAdvice
}

// advice is a RenewalAdvisor's answer for one certificate.
type advice struct {
	cert    *x509.Certificate // the certificate it is for
	at      time.Time
	ok      bool
	recheck time.Time
	status  *cmapi.CertificateACMEARIStatus // status.acme.ari
}

// acmeStatus is status.acme for cert: what the CA last said about it, nil
// when nothing is known about this certificate (a status is output: what
// was there before is replaced).
func (a advice) acmeStatus(cert *x509.Certificate) *cmapi.CertificateACMEStatus {
	if a.cert != cert || a.status == nil {
		return nil
	}
	return &cmapi.CertificateACMEStatus{ARI: a.status}
}

// askAdvice asks a for cert's renewal time. The Certificate's renewal
// windows (spec.renewal.windows) apply to the CA's time, as cert-manager
// 1.21 applies them after ARI: the renewal happens in the first window
// that opens before it, else the first after it.
func askAdvice(ctx context.Context, a RenewalAdvisor, t *target, cert *x509.Certificate) advice {
	adv := a.RenewalTime(ctx, string(t.name), t.crt.Namespace, t.crt.Name, t.crt.Spec.IssuerRef, cert)
	at, ok := adv.At, !adv.At.IsZero()
	if ok && t.crt.Spec.Renewal != nil && len(t.crt.Spec.Renewal.Windows) > 0 {
		ari := &acmeapi.RenewalInfoResponse{SuggestedWindow: acmeapi.RenewalInfoWindow{Start: at, End: at}}
		if rt, err := pki.RenewalTime(cert.NotBefore, cert.NotAfter, nil, nil, t.crt.Spec.Renewal, pki.WithARIInfo(ari)); err == nil && rt != nil {
			at = rt.Time
		}
	}
	return advice{cert: cert, at: at, ok: ok, recheck: adv.Recheck, status: adv.Status}
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
