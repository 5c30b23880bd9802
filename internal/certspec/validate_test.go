package certspec_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certhub/certhub/internal/certspec"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/test/fixture"
)

func TestValidateSpec(t *testing.T) {
	if reason, err := validateSpec(fixture.Certificate("shop", "web", "ca")); err != nil {
		t.Fatalf("a valid spec was rejected: %s %v", reason, err)
	}
	for _, tt := range fixture.InvalidSpecs() {
		t.Run(tt.Name, func(t *testing.T) {
			crt := fixture.Certificate("shop", "web", "ca")
			tt.Mutate(crt)
			reason, err := validateSpec(crt)
			if err == nil {
				t.Fatalf("accepted")
			}
			if reason != tt.Reason || !strings.Contains(err.Error(), tt.Field) {
				t.Fatalf("reason %q message %q, want reason %q mentioning %q", reason, err.Error(), tt.Reason, tt.Field)
			}
		})
	}
}

func FuzzValidateAndTemplate(f *testing.F) {
	f.Add("web.example.com", "10.0.0.1", "spiffe://x/y", "a@example.com", "CN=x", int64(3600), "RSA", 2048)
	f.Add("", "", "", "", "", int64(0), "ECDSA", 256)
	f.Fuzz(func(t *testing.T, dns, ip, uri, email, literal string, seconds int64, alg string, size int) {
		crt := fixture.Certificate("shop", "web", "ca")
		crt.Spec.CommonName = ""
		crt.Spec.DNSNames = []string{dns}
		crt.Spec.IPAddresses = []string{ip}
		crt.Spec.URIs = []string{uri}
		crt.Spec.EmailAddresses = []string{email}
		crt.Spec.LiteralSubject = literal
		crt.Spec.Duration = &metav1.Duration{Duration: time.Duration(seconds) * time.Second}
		crt.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.PrivateKeyAlgorithm(alg), Size: size % 10000}
		if reason, err := validateSpec(crt); err != nil {
			if reason == "" {
				t.Fatalf("an invalid spec without a reason: %v", err)
			}
			return
		}
		// What validation accepts, the template builder must not panic on.
		_, _ = issuers.Template(crt)
	})
}

// validateSpec is certspec.ValidateSpec as the reason and the error, or ""
// and nil.
func validateSpec(crt *cmapi.Certificate) (string, error) {
	err := certspec.ValidateSpec(crt)
	if se := (*certspec.Error)(nil); errors.As(err, &se) {
		return se.Reason, se
	}
	return "", err
}
