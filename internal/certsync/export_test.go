package certsync

import (
	"crypto/x509"
	"errors"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
)

// ValidateSpec exposes validateSpec to the external tests: the reason and the
// error, or "" and nil.
func ValidateSpec(crt *cmapi.Certificate) (string, error) {
	err := validateSpec(crt)
	if se := (*specError)(nil); errors.As(err, &se) {
		return se.reason, se
	}
	return "", err
}

// CertificateTemplate exposes certificateTemplate to the external tests.
func CertificateTemplate(crt *cmapi.Certificate) (*x509.Certificate, error) {
	return certificateTemplate(crt, nil)
}
