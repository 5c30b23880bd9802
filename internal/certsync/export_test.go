package certsync

import (
	"crypto/x509"
	"errors"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/certhub/certhub/internal/issuance"
	"github.com/certhub/certhub/internal/policy"
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

// ValidateSpecErr is validateSpec.
func ValidateSpecErr(crt *cmapi.Certificate) error { return validateSpec(crt) }

// Admit decides on crt in cluster with set through the reconciler's own
// templateFor and returns the template that would be signed.
func Admit(set *policy.Set, cluster string, crt *cmapi.Certificate) (*x509.Certificate, policy.Decision, error) {
	tmpl, d, _, err := templateFor(evaluator{set}, multicluster.ClusterName(cluster), crt)
	return tmpl, d, err
}

// CertificateTemplate is issuance.Template, for the external tests.
func CertificateTemplate(crt *cmapi.Certificate) (*x509.Certificate, error) {
	return issuance.Template(crt)
}
