package certsync

import (
	"errors"
	"strings"
	"testing"

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
		{"duration with a word unit", ReasonInvalidLifetime, `spec.duration: Invalid value: "1 day": is not a duration`, func(o map[string]any) {
			_ = unstructured.SetNestedField(o, "1 day", "spec", "duration")
		}},
		{"renewBefore a number", ReasonInvalidLifetime, "spec.renewBefore: Invalid value: 3600: must be a duration string", func(o map[string]any) {
			_ = unstructured.SetNestedField(o, int64(3600), "spec", "renewBefore")
		}},
		{"dnsNames not a list", ReasonInvalidSpec, "cannot be decoded as a cert-manager.io/v1 Certificate", func(o map[string]any) {
			_ = unstructured.SetNestedField(o, "web.example.com", "spec", "dnsNames")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(good)}
			tt.mutate(u.Object)
			crt, err := decodeCertificate(u)
			if tt.reason == "" {
				if err != nil || crt.Spec.SecretName != "web-tls" {
					t.Fatalf("decode = %v, %v", crt, err)
				}
				return
			}
			var se *specError
			if !errors.As(err, &se) || se.reason != tt.reason || !strings.Contains(se.Error(), tt.msg) {
				t.Fatalf("decode error %v, want %s saying %q", err, tt.reason, tt.msg)
			}
		})
	}
}
