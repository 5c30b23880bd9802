package discovery

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
)

func TestInspect(t *testing.T) {
	now := time.Now()
	garbage := fixture.TLSSecret(t, "ns", "garbage")
	garbage.Data[corev1.TLSCertKey] = []byte("not a certificate")
	cases := []struct {
		name     string
		secret   *corev1.Secret
		served   bool
		managed  Managed
		alg      string
		size     int
		problems []Problem
	}{
		{name: "hand-made ECDSA", secret: fixture.TLSSecret(t, "ns", "plain"), managed: ManagedByNone, alg: "ECDSA", size: 256},
		{name: "RSA-1024 is weak", secret: fixture.TLSSecret(t, "ns", "weak", fixture.WithRSAKey(1024)), managed: ManagedByNone, alg: "RSA", size: 1024,
			problems: []Problem{ProblemWeakKey}},
		{name: "RSA-2048 is not", secret: fixture.TLSSecret(t, "ns", "ok", fixture.WithRSAKey(2048)), managed: ManagedByNone, alg: "RSA", size: 2048},
		{name: "SHA-1 signature", secret: fixture.TLSSecret(t, "ns", "sha1", fixture.WithRSAKey(2048), fixture.WithSHA1()), managed: ManagedByNone,
			alg: "RSA", size: 2048, problems: []Problem{ProblemSHA1Signature}},
		{name: "certhub's label wins over cert-manager's annotation", secret: fixture.TLSSecret(t, "ns", "ours",
			fixture.WithSecretLabel(hubapi.ManagedByLabel, hubapi.ManagedByValue), fixture.WithSecretAnnotation(cmapi.CertificateNameKey, "web")),
			managed: ManagedByCerthub, alg: "ECDSA", size: 256},
		{name: "cert-manager's annotation", secret: fixture.TLSSecret(t, "ns", "cm", fixture.WithSecretAnnotation(cmapi.CertificateNameKey, "web")),
			managed: ManagedByCertManager, alg: "ECDSA", size: 256},
		{name: "a label value other than certhub's is not certhub's", secret: fixture.TLSSecret(t, "ns", "fake",
			fixture.WithSecretLabel(hubapi.ManagedByLabel, "someone")), managed: ManagedByNone, alg: "ECDSA", size: 256},
		{name: "expired", secret: fixture.TLSSecret(t, "ns", "old", fixture.WithValidity(now.Add(-48*time.Hour), now.Add(-time.Hour))),
			managed: ManagedByNone, alg: "ECDSA", size: 256, problems: []Problem{ProblemExpired}},
		{name: "expired and served", served: true, secret: fixture.TLSSecret(t, "ns", "old", fixture.WithValidity(now.Add(-48*time.Hour), now.Add(-time.Hour))),
			managed: ManagedByNone, alg: "ECDSA", size: 256, problems: []Problem{ProblemExpired, ProblemExpiredServed}},
		{name: "not a certificate", secret: garbage, managed: ManagedByNone, problems: []Problem{ProblemUnparseable}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := inspect(tc.secret)
			r.Served = tc.served
			r = r.at(now)
			if r.Managed != tc.managed || r.KeyAlgorithm != tc.alg || r.KeySize != tc.size || !slices.Equal(r.Problems, tc.problems) {
				t.Errorf("got managed %s, key %s/%d, problems %v; want %s, %s/%d, %v", r.Managed, r.KeyAlgorithm, r.KeySize, r.Problems,
					tc.managed, tc.alg, tc.size, tc.problems)
			}
			if tc.alg != "" && (r.NotAfter.IsZero() || r.Serial == "" || len(r.DNSNames) != 1 || r.DNSNames[0] != tc.secret.Name+".example.com") {
				t.Errorf("leaf facts missing: %+v", r)
			}
		})
	}
}

// A record made before its certificate expired says Expired once the time
// has passed, without being read again.
func TestExpiredIsDecidedWhenReported(t *testing.T) {
	now := time.Now()
	r := inspect(fixture.TLSSecret(t, "ns", "soon", fixture.WithValidity(now.Add(-time.Hour), now.Add(time.Hour))))
	if got := r.at(now).Problems; len(got) != 0 {
		t.Fatalf("before notAfter: problems %v", got)
	}
	if got := r.at(now.Add(2 * time.Hour)).Problems; !slices.Equal(got, []Problem{ProblemExpired}) {
		t.Fatalf("after notAfter: problems %v, want Expired", got)
	}
}

// A tenant's Secret bounds what its record keeps: an annotation of 100 KiB
// and a name of 1,000 multi-byte runes are cut to maxString bytes, still
// valid UTF-8, and marked cut.
func TestRecordStringsAreBounded(t *testing.T) {
	long := strings.Repeat("é", 1000)
	r := inspect(fixture.TLSSecret(t, "ns", "huge", fixture.WithSecretAnnotation(cmapi.CertificateNameKey, strings.Repeat("x", 100<<10))))
	for what, s := range map[string]string{"certificate": r.Certificate, "clipped name": clip(long), "short": clip("web")} {
		if len(s) > maxString || !utf8.ValidString(s) {
			t.Errorf("%s: %d bytes (valid UTF-8: %v), want at most %d", what, len(s), utf8.ValidString(s), maxString)
		}
	}
	if !strings.HasSuffix(r.Certificate, "…") || clip("web") != "web" {
		t.Errorf("a cut string is marked, a short one kept: %q, %q", r.Certificate[len(r.Certificate)-8:], clip("web"))
	}
}
