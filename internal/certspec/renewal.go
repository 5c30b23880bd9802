package certspec

import (
	"crypto/x509"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/cespare/xxhash/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RenewalDisabled reports whether crt asks never to be renewed
// (spec.renewal.policy Disabled).
func RenewalDisabled(crt *cmapi.Certificate) bool {
	return crt.Spec.Renewal != nil && crt.Spec.Renewal.Policy == cmapi.CertificateRenewalPolicyDisabled
}

// RenewalTime is when cert should be renewed, by cert-manager's rules; nil
// when its renewal is disabled; jitter (certsync.Options.RenewalJitter)
// renews earlier by up to that fraction of the renewal window.
func RenewalTime(crt *cmapi.Certificate, cert *x509.Certificate, jitter float64) (*metav1.Time, error) {
	rt, err := pki.RenewalTime(cert.NotBefore, cert.NotAfter, crt.Spec.RenewBefore, crt.Spec.RenewBeforePercentage, crt.Spec.Renewal)
	if err != nil || jitter <= 0 || rt == nil || !cert.NotAfter.After(rt.Time) {
		return rt, err
	}
	// Earlier by up to jitter × the renewal window (renewal time → notAfter),
	// by a fraction fixed per Certificate (its UID), so Certificates issued
	// together renew spread out, never later than cert-manager would, and
	// every reconcile computes the same time.
	u := float64(xxhash.Sum64String(string(crt.UID))>>11) / (1 << 53)
	early := time.Duration(u * jitter * float64(cert.NotAfter.Sub(rt.Time)))
	return &metav1.Time{Time: rt.Add(-early).Truncate(time.Second)}, nil
}

// IssuerKind is the kind cert-manager records for ref (default Issuer).
func IssuerKind(ref cmmeta.IssuerReference) string {
	if ref.Kind == "" {
		return cmapi.IssuerKind
	}
	return ref.Kind
}
