package acme

import (
	"context"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
)

// ARI (RFC 9773): an issued ACME certificate's renewal time comes from
// Pebble's renewal window; when the window is moved (Pebble's management
// API, as a CA does after a revocation event), status.renewalTime follows
// it without a renewal while it lies ahead (status.acme.ari shows the
// window, as cert-manager 1.21 fills it), and once it has passed the
// hub renews at once with an order that Pebble accepts as replacing the
// old certificate ("replaces").
func TestACMERenewsWhenTheCAMovesTheWindow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 1)
	ca, hub, cp := bed.CA, bed.Hub.Client, bed.Downstreams[0]
	ci := fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"))
	if err := hub.Create(ctx, ci); err != nil {
		t.Fatal(err)
	}
	bed.runHub(t, "pebble", "--acme-renewal-info-interval=1s") // Pebble says 6 h; the test moves windows by hand

	fixture.EnsureNamespace(t, cp.Client, "shop")
	crt := fixture.Certificate("shop", "web", "pebble", fixture.WithNames("", "web."+ca.Zone))
	crt.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
	if err := cp.Client.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(crt)
	fixture.WaitReady(t, cp.Client, key)
	first := fixture.GetSecret(t, cp.Client, crt)
	cert, err := pki.DecodeX509CertificateBytes(first.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}

	// A window ahead, earlier than the spec's renewal time: followed, no renewal.
	start := time.Now().Add(time.Hour).Truncate(time.Second)
	end := start.Add(time.Hour)
	if err := ca.SetRenewalInfo(ctx, first.Data[corev1.TLSCertKey], start, end); err != nil {
		t.Fatal(err)
	}
	fixture.WaitFor(t, cp.Client, key, fmt.Sprintf("status.renewalTime in the CA's window [%s, %s)", start.Format(time.RFC3339), end.Format(time.RFC3339)),
		func(c *cmapi.Certificate) bool {
			rt := c.Status.RenewalTime
			return fixture.IsReady(c) && rt != nil && !rt.Time.Before(start) && rt.Time.Before(end)
		})
	// status.acme.ari shows the CA's window, as cert-manager 1.21 fills it.
	fixture.WaitFor(t, cp.Client, key, "status.acme.ari with the CA's window", func(c *cmapi.Certificate) bool {
		ari := (*cmapi.CertificateACMEARIStatus)(nil)
		if c.Status.ACME != nil {
			ari = c.Status.ACME.ARI
		}
		return ari != nil && ari.SuggestedWindow != nil && ari.SuggestedWindow.Start.Time.Equal(start) && ari.SuggestedWindow.End.Time.Equal(end) &&
			ari.LastChecked != nil && ari.NextCheck != nil && ari.NextCheck.After(ari.LastChecked.Time) && ari.LastError == ""
	})
	if got := fixture.GetSecret(t, cp.Client, crt); string(got.Data[corev1.TLSCertKey]) != string(first.Data[corev1.TLSCertKey]) {
		t.Fatal("the certificate was renewed for a window that lies ahead")
	}

	// The window moved into the past (a revocation event; it still opens
	// after the certificate was issued, or it would describe an earlier
	// one and be ignored, as cert-manager does): renewed at once, as a
	// replacement.
	if err := ca.SetRenewalInfo(ctx, first.Data[corev1.TLSCertKey], cert.NotBefore.Add(time.Second), time.Now()); err != nil {
		t.Fatal(err)
	}
	renewed := fixture.WaitFor(t, cp.Client, key, "renewed (revision 2)", func(c *cmapi.Certificate) bool {
		return fixture.IsReady(c) && c.Status.Revision != nil && *c.Status.Revision == 2
	})
	next, err := pki.DecodeX509CertificateBytes(fixture.GetSecret(t, cp.Client, crt).Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	if next.SerialNumber.Cmp(cert.SerialNumber) == 0 {
		t.Fatal("revision 2 holds the same certificate")
	}
	if got := ca.Count(); got.Orders != 2 || got.Replacements != 1 {
		t.Errorf("Pebble counted %d orders and %d replacements, want 2 orders, the second replacing the first certificate", got.Orders, got.Replacements)
	}
	orders := &hubapi.ACMEOrderList{}
	if err := hub.List(ctx, orders, client.InNamespace(bed.HubNamespace())); err != nil {
		t.Fatal(err)
	}
	var replacing int
	for _, ord := range orders.Items {
		if ord.Spec.Replaces != "" {
			replacing++
			if ord.Status.State != hubapi.ACMEOrderValid || ord.Status.ReplacesRefused {
				t.Errorf("ACMEOrder %s replaces %s: %s (replaces refused: %t)", ord.Name, ord.Spec.Replaces, ord.Status.State, ord.Status.ReplacesRefused)
			}
		}
	}
	if replacing != 1 {
		t.Errorf("%d ACMEOrders carry spec.replaces, want 1 (the renewal)", replacing)
	}
	t.Logf("renewed by ARI: serial %x → %x, renewal time now %s", cert.SerialNumber, next.SerialNumber, renewed.Status.RenewalTime)
}
