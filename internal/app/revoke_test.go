package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

func TestRevokeFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    revokeOptions
		err  string
	}{
		{name: "nothing selected is refused", o: revokeOptions{reason: "superseded"}, err: "select something"},
		{name: "unknown reason", o: revokeOptions{issuer: "ca", reason: "whim"}, err: "--reason"},
		{name: "bad time", o: revokeOptions{issuer: "ca", reason: "superseded", issuedBefore: "yesterday"}, err: "--issued-before"},
		{name: "by issuer and time", o: revokeOptions{issuer: "ca", reason: "keyCompromise", issuedBefore: "2026-12-01T00:00:00Z", clusters: []string{"prod-*"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev, err := tc.o.revocation("incident")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one about %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			if rev.Spec.IssuerName != "ca" || rev.Spec.Reason != hubapi.RevocationKeyCompromise || !rev.Spec.IssuedBefore.Time.Equal(want) || rev.Spec.Clusters[0] != "prod-*" {
				t.Errorf("spec %+v", rev.Spec)
			}
			scheme := runtime.NewScheme()
			if err := hubapi.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			hub := fake.NewClientBuilder().WithScheme(scheme).Build()
			var out bytes.Buffer
			if err := createRevocation(context.Background(), &out, hub, rev); err != nil {
				t.Fatal(err)
			}
			if err := hub.Get(context.Background(), client.ObjectKey{Name: "incident"}, &hubapi.CertificateRevocation{}); err != nil {
				t.Errorf("not created: %v", err)
			}
		})
	}
}
