package issuance

import (
	"crypto/x509"

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
