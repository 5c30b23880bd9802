package certspec

import (
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Jitter renews earlier than cert-manager by up to the fraction of the
// renewal window, fixed per Certificate, spread across Certificates.
func TestRenewalJitter(t *testing.T) {
	nb := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cert := &x509.Certificate{NotBefore: nb, NotAfter: nb.Add(90 * 24 * time.Hour)}
	crt := func(uid string) *cmapi.Certificate {
		return &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}}
	}
	exact, err := RenewalTime(crt("a"), cert, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := nb.Add(60 * 24 * time.Hour); !exact.Time.Equal(want) {
		t.Fatalf("no jitter: %s, want cert-manager's 2/3 of the life (%s)", exact, want)
	}
	window := cert.NotAfter.Sub(exact.Time)
	seen := map[time.Time]bool{}
	for i := range 50 {
		uid := fmt.Sprintf("uid-%d", i)
		rt, _ := RenewalTime(crt(uid), cert, 0.2)
		if rt.After(exact.Time) || rt.Time.Before(exact.Add(-window/5-time.Second)) {
			t.Fatalf("%s: %s outside [%s - 20%% of the window, %s]", uid, rt, exact, exact)
		}
		if again, _ := RenewalTime(crt(uid), cert, 0.2); !again.Equal(rt) {
			t.Fatalf("%s: %s then %s; want the same every time", uid, rt, again)
		}
		seen[rt.Time] = true
	}
	if len(seen) < 45 {
		t.Errorf("50 Certificates renew at %d distinct times; want them spread", len(seen))
	}
}
