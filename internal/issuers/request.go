package issuers

import (
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"strings"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
)

// CertificateRequest is the request cert-manager builds from crt, with the
// fields cert-manager puts behind feature gates (literalSubject,
// otherNames, nameConstraints) switched on when the spec uses them: the
// hub validated them, and a downstream user cannot flip cert-manager's
// gates. Signers (certsync's template), orderers (the CSR sent to an ACME
// CA) and the request hash all build it here, so they never disagree.
func CertificateRequest(crt *cmapi.Certificate) (*x509.CertificateRequest, error) {
	return pki.GenerateCSR(crt,
		pki.WithUseLiteralSubject(crt.Spec.LiteralSubject != ""),
		pki.WithOtherNames(len(crt.Spec.OtherNames) > 0),
		pki.WithNameConstraints(crt.Spec.NameConstraints != nil),
		pki.WithEncodeBasicConstraintsInRequest(crt.Spec.IsCA),
	)
}

// Template is the certificate the hub signs for crt: cert-manager's template
// from CertificateRequest(crt) with the spec's duration, basic constraints
// and key usages. A CA template carries no path length yet: the policy
// decision that allows it sets the path length and name constraints
// (policy.Decision.Constrain). Every signing path builds it here, and the
// policy evaluates exactly this template.
func Template(crt *cmapi.Certificate) (*x509.Certificate, error) {
	csr, err := CertificateRequest(crt)
	if err != nil {
		return nil, fmt.Errorf("failed to build request from spec: %w", err)
	}
	keyUsage, extKeyUsage, err := pki.KeyUsagesForCertificateOrCertificateRequest(crt.Spec.Usages, crt.Spec.IsCA)
	if err != nil {
		return nil, err
	}
	return pki.CertificateTemplateFromCSR(csr,
		pki.CertificateTemplateOverrideDuration(apiutil.DefaultCertDuration(crt.Spec.Duration)),
		pki.CertificateTemplateValidateAndOverrideBasicConstraints(crt.Spec.IsCA, nil),
		pki.CertificateTemplateValidateAndOverrideKeyUsages(keyUsage, extKeyUsage),
	)
}

// DefaultMaxNames is the default limit on names per certificate (SANs of
// every kind and literalSubject attributes): ten times the 100 Let's
// Encrypt allows, above any certificate real clients use, and small enough
// that judging one costs well under a millisecond.
const DefaultMaxNames = 1000

// NamesOf counts what crt asks to be named by: its SANs of every kind, its
// common name, and the attributes of its literalSubject (counted by '=',
// an upper bound), without parsing any of them.
func NamesOf(crt *cmapi.Certificate) int {
	s := &crt.Spec
	n := len(s.DNSNames) + len(s.IPAddresses) + len(s.URIs) + len(s.EmailAddresses) + len(s.OtherNames)
	if s.CommonName != "" {
		n++
	}
	return n + strings.Count(s.LiteralSubject, "=")
}

// NamesOfCSR counts the names a CSR asks for, as NamesOf does: every SAN
// of its SAN extension (otherNames too) and its subject's attributes.
func NamesOfCSR(csr *x509.CertificateRequest) int {
	n := len(csr.Subject.Names)
	for _, ext := range csr.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		if gns, err := pki.UnmarshalSANs(ext.Value); err == nil { // else the CSR's parse refuses it later
			n += len(gns.DNSNames) + len(gns.RFC822Names) + len(gns.UniformResourceIdentifiers) + len(gns.IPAddresses) + len(gns.OtherNames) +
				len(gns.X400Addresses) + len(gns.DirectoryNames) + len(gns.EDIPartyNames) + len(gns.RegisteredIDs)
		}
	}
	return n
}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}
