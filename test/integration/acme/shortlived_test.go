package acme

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/acme"
	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed/acmebed"
)

// Issue 30: short-lived certificates renew through their lifetimes. The
// ClusterIssuer asks Pebble for a profile of 3-minute certificates (the
// ACME profile reaches every order); 50 Certificates renew at half their
// life, twice, under a budget: each issuance is one order at the CA (150
// in all), the budget is never paused, and no Secret ever holds an expired
// certificate (sampled every 2 s throughout).
func TestShortLivedCertificatesRenewThroughTwoLifetimes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lifetime, n = 3 * time.Minute, 50
	bed := startIssuanceBed(ctx, t, 1, func(o *acmebed.Options) { o.Profiles = map[string]time.Duration{"minutes": lifetime} })
	ca, hub, c := bed.CA, bed.Hub.Client, bed.Downstreams[0].Client
	if err := hub.Create(ctx, fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"), func(ci *cmapi.ClusterIssuer) {
			ci.Spec.ACME.Profile = "minutes"
			ci.Annotations = map[string]string{hubapi.ACMELimitsAnnotation: "orders=300/1h, set=5/1h"}
		})); err != nil {
		t.Fatal(err)
	}
	bed.runHub(t, "pebble")
	fixture.EnsureNamespace(t, c, "short")
	var crts []*cmapi.Certificate
	for i := range n {
		crt := fixture.Certificate("short", fmt.Sprintf("s-%02d", i), "pebble", fixture.WithNames("", fmt.Sprintf("s-%02d.%s", i, ca.Zone)), func(crt *cmapi.Certificate) {
			crt.Spec.RenewBeforePercentage = ptr.To[int32](50)
		})
		if err := c.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
		crts = append(crts, crt)
	}
	var expired []string
	revisions := func() (lowest int) {
		lowest = 1 << 30
		list := &cmapi.CertificateList{}
		if err := c.List(ctx, list, client.InNamespace("short")); err != nil {
			t.Fatal(err)
		}
		for _, crt := range list.Items {
			lowest = min(lowest, ptr.Deref(crt.Status.Revision, 0))
		}
		secrets := &corev1.SecretList{}
		if err := c.List(ctx, secrets, client.InNamespace("short")); err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets.Items {
			if cert, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey]); err == nil && !time.Now().Before(cert.NotAfter) {
				expired = append(expired, fmt.Sprintf("%s (expired %s)", s.Name, cert.NotAfter.Format(time.TimeOnly)))
			}
		}
		return lowest
	}
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*lifetime, true, func(context.Context) (bool, error) {
		return revisions() >= 3 || len(expired) > 0, nil
	})
	if len(expired) > 0 {
		t.Fatalf("Secrets held expired certificates: %s", strings.Join(expired, ", "))
	}
	if err != nil {
		t.Fatalf("not every Certificate renewed twice within %s (lowest revision %d)", 3*lifetime, revisions())
	}
	if got := ca.Count().Orders; got != 3*n {
		t.Errorf("Pebble created %d orders for %d Certificates issued 3 times each, want %d", got, n, 3*n)
	}
	cm := &corev1.ConfigMap{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: bed.HubNamespace(), Name: acme.LedgerPrefix + "pebble"}, cm); err == nil &&
		strings.Contains(cm.Data[budget.LedgerKey], `"pausedUntil"`) {
		t.Errorf("the budget was paused: %s", cm.Data[budget.LedgerKey])
	}
	for _, crt := range crts[:1] {
		s := fixture.GetSecret(t, c, crt)
		cert, _ := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey])
		t.Logf("%s: certificate valid %s → %s (%s)", crt.Name, cert.NotBefore.Format(time.TimeOnly), cert.NotAfter.Format(time.TimeOnly), cert.NotAfter.Sub(cert.NotBefore))
	}
}
