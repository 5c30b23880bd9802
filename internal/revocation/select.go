package revocation

import (
	"crypto/x509"
	"fmt"
	"path"
	"slices"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// Serial is a certificate's serial as the API shows it: upper-case
// hexadecimal, no separators, no leading zeros.
func Serial(c *x509.Certificate) string { return fmt.Sprintf("%X", c.SerialNumber) }

// normalSerial reads a serial as a user writes it ("0a:1B", "A1b").
func normalSerial(s string) string {
	s = strings.ToUpper(strings.NewReplacer(":", "", " ", "", "-", "").Replace(s))
	if t := strings.TrimLeft(s, "0"); t != "" {
		return t
	}
	return "0"
}

// glob matches s against a `*` pattern; an empty pattern matches anything.
func glob(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}

// selectsCluster reports whether rev reaches cluster.
func selectsCluster(rev *hubapi.CertificateRevocation, cluster string) bool {
	if len(rev.Spec.Clusters) == 0 {
		return true
	}
	return slices.ContainsFunc(rev.Spec.Clusters, func(p string) bool { return glob(p, cluster) })
}

// selectsCertificate reports whether rev selects crt by where it is and
// the hub issuer it names (before its certificate is looked at).
func selectsCertificate(rev *hubapi.CertificateRevocation, crt *cmapi.Certificate) bool {
	s := rev.Spec
	return glob(s.Namespace, crt.Namespace) && glob(s.Certificate, crt.Name) &&
		(s.IssuerName == "" || s.IssuerName == crt.Spec.IssuerRef.Name)
}

// selectsLeaf reports whether rev selects the issued certificate leaf. A
// revocation never selects a certificate issued after it was created, so
// a renewal is not selected again; both times have a second's precision,
// so one issued in the second of its creation is (inCluster tells a
// renewal in that second apart).
func selectsLeaf(rev *hubapi.CertificateRevocation, leaf *x509.Certificate) bool {
	s := rev.Spec
	if leaf.NotBefore.After(rev.CreationTimestamp.Time) {
		return false
	}
	if s.IssuedBefore != nil && !leaf.NotBefore.Before(s.IssuedBefore.Time) {
		return false
	}
	if len(s.Serials) > 0 {
		serial := Serial(leaf)
		return slices.ContainsFunc(s.Serials, func(x string) bool { return normalSerial(x) == serial })
	}
	return true
}

// reasonCode is reason's RFC 5280 CRLReason code (superseded by default).
func reasonCode(reason hubapi.RevocationReason) int {
	switch reason {
	case hubapi.RevocationUnspecified:
		return 0
	case hubapi.RevocationKeyCompromise:
		return 1
	case hubapi.RevocationCACompromise:
		return 2
	case hubapi.RevocationAffiliationChanged:
		return 3
	case hubapi.RevocationCessationOfOperation:
		return 5
	}
	return 4 // superseded
}
