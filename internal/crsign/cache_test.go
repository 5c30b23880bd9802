package crsign

import (
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// The cache keeps a request the hub signs whole (without managed fields),
// and of any other only its identity and issuerRef: no CSR, no status.
func TestCacheKeepsOnlyHubRequests(t *testing.T) {
	full := func(group string) *cmapi.CertificateRequest {
		return &cmapi.CertificateRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u", ResourceVersion: "7",
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "istio-csr"}}, Annotations: map[string]string{"a": "b"}},
			Spec:   cmapi.CertificateRequestSpec{Request: []byte("CSR"), IssuerRef: cmmeta.IssuerReference{Name: "ca", Group: group}},
			Status: cmapi.CertificateRequestStatus{Certificate: []byte("CERT")},
		}
	}
	for _, tc := range []struct {
		group     string
		keepsBody bool
	}{{hubapi.GroupName, true}, {"cert-manager.io", false}, {"", false}, {"awspca.cert-manager.io", false}} {
		got, err := stubUnlessForHub(full(tc.group))
		if err != nil {
			t.Fatal(err)
		}
		cr, ok := got.(*cmapi.CertificateRequest)
		if !ok {
			t.Fatalf("group %q: transformed into %T", tc.group, got)
		}
		if cr.ManagedFields != nil {
			t.Errorf("group %q: managed fields kept", tc.group)
		}
		if cr.Name != "r" || cr.Namespace != "ns" || cr.UID != "u" || cr.ResourceVersion != "7" || cr.Spec.IssuerRef.Group != tc.group {
			t.Errorf("group %q: identity or issuerRef lost: %+v", tc.group, cr)
		}
		if kept := len(cr.Spec.Request) > 0 || len(cr.Status.Certificate) > 0 || len(cr.Annotations) > 0; kept != tc.keepsBody {
			t.Errorf("group %q: request, status and annotations kept = %v, want %v", tc.group, kept, tc.keepsBody)
		}
	}
}
