package revocation

import (
	"crypto/x509"
	"fmt"
	"path"
	"slices"
	"time"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/internal/issued"
)

// Serial is a certificate's serial as the API shows it: upper-case
// hexadecimal, no separators, no leading zeros.
func Serial(c *x509.Certificate) string { return fmt.Sprintf("%X", c.SerialNumber) }

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

// selectsEntry reports whether rev selects the recorded certificate e.
// A revocation never selects a certificate recorded after it was created
// (to the second, as creation is kept), nor the renewals revocations ask
// for, so a renewal it caused is not selected again.
func selectsEntry(rev *hubapi.CertificateRevocation, e issued.Entry) bool {
	s := rev.Spec
	if !glob(s.Namespace, e.Namespace) || !glob(s.Certificate, e.Name) {
		return false
	}
	if s.IssuerName != "" && e.Issuer != issued.ClusterIssuer(s.IssuerName) {
		return false
	}
	if e.Why == reasons.Revocation || !e.RecordedAt.Before(rev.CreationTimestamp.Add(time.Second)) {
		return false
	}
	if s.IssuedBefore != nil && !e.NotBefore.Before(s.IssuedBefore.Time) {
		return false
	}
	if len(s.Serials) > 0 {
		return slices.ContainsFunc(s.Serials, func(x string) bool { return issued.NormalSerial(x) == e.Serial })
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
