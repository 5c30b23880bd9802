package certsync

import (
	"crypto/x509"
	"fmt"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"

	"github.com/certhub/certhub/internal/issuance"
)

// certificateTemplate is pki.CertificateTemplateFromCertificate with the
// fields cert-manager puts behind feature gates (literalSubject, otherNames,
// nameConstraints) switched on when the spec uses them: the hub validated
// them, and a downstream user cannot flip cert-manager's gates. A CA
// certificate gets the path-length constraint maxPathLen (the issuance
// policy's; nil: none).
func certificateTemplate(crt *cmapi.Certificate, maxPathLen *int) (*x509.Certificate, error) {
	csr, err := issuance.CertificateRequest(crt)
	if err != nil {
		return nil, fmt.Errorf("failed to build request from spec: %w", err)
	}
	keyUsage, extKeyUsage, err := pki.KeyUsagesForCertificateOrCertificateRequest(crt.Spec.Usages, crt.Spec.IsCA)
	if err != nil {
		return nil, err
	}
	return pki.CertificateTemplateFromCSR(csr,
		pki.CertificateTemplateOverrideDuration(apiutil.DefaultCertDuration(crt.Spec.Duration)),
		pki.CertificateTemplateValidateAndOverrideBasicConstraints(crt.Spec.IsCA, caPathLen(crt, maxPathLen)),
		pki.CertificateTemplateValidateAndOverrideKeyUsages(keyUsage, extKeyUsage),
	)
}

func caPathLen(crt *cmapi.Certificate, maxPathLen *int) *int {
	if !crt.Spec.IsCA {
		return nil
	}
	return maxPathLen
}
