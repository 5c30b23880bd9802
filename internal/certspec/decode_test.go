package certspec

import (
	"errors"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/certhub/certhub/internal/apis/reasons"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDecodeCertificate(t *testing.T) {
	good, err := runtime.DefaultUnstructuredConverter.ToUnstructured(testCertificate())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, reason, msg string
		mutate            func(map[string]any)
	}{
		{"valid", "", "", func(map[string]any) {}},
		{"duration with a word unit", reasons.InvalidLifetime, `spec.duration: Invalid value: "1 day": is not a duration`, func(o map[string]any) {
			_ = unstructured.SetNestedField(o, "1 day", "spec", "duration")
		}},
		{"renewBefore a number", reasons.InvalidLifetime, "spec.renewBefore: Invalid value: 3600: must be a duration string", func(o map[string]any) {
			_ = unstructured.SetNestedField(o, int64(3600), "spec", "renewBefore")
		}},
		{"dnsNames not a list", reasons.InvalidSpec, "cannot be decoded as a cert-manager.io/v1 Certificate", func(o map[string]any) {
			_ = unstructured.SetNestedField(o, "web.example.com", "spec", "dnsNames")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(good)}
			tt.mutate(u.Object)
			crt, err := Decode(u)
			if tt.reason == "" {
				if err != nil || crt.Spec.SecretName != "web-tls" {
					t.Fatalf("decode = %v, %v", crt, err)
				}
				return
			}
			var se *Error
			if !errors.As(err, &se) || se.Reason != tt.reason || !strings.Contains(se.Error(), tt.msg) {
				t.Fatalf("decode error %v, want %s saying %q", err, tt.reason, tt.msg)
			}
		})
	}
}

// testCertificate is a valid Certificate (certsync's test fixture of the
// same name; certspec's own tests cannot import test/fixture, which
// imports certsync).
func testCertificate() *cmapi.Certificate {
	return &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: cmapi.CertificateSpec{
			SecretName: "web-tls", CommonName: "web.example.com", DNSNames: []string{"web.example.com"},
			Duration:   &metav1.Duration{Duration: 90 * 24 * time.Hour},
			IssuerRef:  cmmeta.IssuerReference{Name: "ca", Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"},
			PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256},
		},
	}
}
