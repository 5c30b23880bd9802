package drpair

import (
	"crypto/x509"
	"fmt"
	"slices"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
)

// leafOf is the leaf certificate of a Secret written by certhub (nil when
// it holds none that parses).
func leafOf(s *corev1.Secret) *x509.Certificate {
	if s == nil || len(s.Data[corev1.TLSCertKey]) == 0 {
		return nil
	}
	c, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
	if err != nil {
		return nil
	}
	return c
}

// namesOf is every name a certificate is for, sorted: its subject's
// common name and each subject alternative name, by kind.
func namesOf(c *x509.Certificate) []string {
	var out []string
	if c.Subject.CommonName != "" {
		out = append(out, "cn:"+c.Subject.CommonName)
	}
	for _, n := range c.DNSNames {
		out = append(out, "dns:"+n)
	}
	for _, ip := range c.IPAddresses {
		out = append(out, "ip:"+ip.String())
	}
	for _, u := range c.URIs {
		out = append(out, "uri:"+u.String())
	}
	for _, e := range c.EmailAddresses {
		out = append(out, "email:"+e)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// check decides whether the standby's certificate (leaf, of the standby's
// Certificate spec) stands in for the primary's entry at now: the same
// names, valid, and not expiring before the primary's — unless it is not
// due for renewal yet (cert-manager's renewal time for its spec), since
// the hub renews it then: two clusters renew at their own times, and a
// standby renewed a day after its primary is ready all along. It returns
// "" when ready, else a reason and a message.
func check(e Entry, spec *cmapi.CertificateSpec, leaf *x509.Certificate, now time.Time) (reason, message string) {
	if leaf == nil {
		return ReasonNotIssued, "its Secret holds no certificate yet"
	}
	if got := namesOf(leaf); !slices.Equal(got, e.Names) {
		return ReasonNamesDiffer, fmt.Sprintf("the standby's certificate is for %v, the primary's for %v", got, e.Names)
	}
	if now.Before(leaf.NotBefore) || !now.Before(leaf.NotAfter) {
		return ReasonNotValid, fmt.Sprintf("the standby's certificate is valid from %s to %s", leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
	}
	if leaf.NotAfter.Before(e.NotAfter) {
		if spec == nil {
			spec = &cmapi.CertificateSpec{}
		}
		rt, err := pki.RenewalTime(leaf.NotBefore, leaf.NotAfter, spec.RenewBefore, spec.RenewBeforePercentage, nil)
		if err != nil || rt == nil || !now.Before(rt.Time) {
			return ReasonExpiresFirst, fmt.Sprintf("the standby's certificate expires at %s, before the primary's (%s), and is due for renewal", leaf.NotAfter.Format(time.RFC3339), e.NotAfter.Format(time.RFC3339))
		}
	}
	return "", ""
}
