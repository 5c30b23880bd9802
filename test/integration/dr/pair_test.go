package dr

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/drpair"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// A DR pair on real API servers. The standby (its Secret labelled
// certhub.io/standby-for=<primary>, selecting dr=true) holds valid
// certificates for every selected Certificate of its primary before the
// primary is stopped — and only for those; once the primary's API server
// is stopped, TLS handshakes with the standby's Secrets verify for the
// primary's names against the hub CA. Then a replacement cluster is
// registered under the primary's name with a new server URL: its
// Certificates (delivered again, as Argo CD would) are issued in the
// urgent lane of --issuance-rate, ahead of another cluster's standing
// backlog of renewals.
func TestStandbyHoldsThePrimarysCertificatesBeforeFailover(t *testing.T) {
	ctx := context.Background()
	bed, err := testbed.Start(ctx, testbed.Options{Downstreams: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.Stop() })
	prod, dr, other, replacement := bed.Downstreams[0], bed.Downstreams[1], bed.Downstreams[2], bed.Downstreams[3]
	ca, err := bed.CreateCAIssuer(ctx, "platform-ca")
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	for _, cp := range []*testbed.ControlPlane{prod, other} {
		if _, err := bed.Register(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := bed.RegisterLabelled(ctx, dr, map[string]string{hubapi.StandbyForLabel: prod.Name})
	if err != nil {
		t.Fatal(err)
	}
	reg.Annotations = map[string]string{hubapi.StandbySelectorAnnotation: "dr=true"}
	if err := bed.Hub.Client.Update(ctx, reg); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := bed.Hub.WriteKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := fleet.Config{Binary: certhubBinary, Kubeconfig: kubeconfig, HubNamespace: bed.HubNamespace(), ArgoNamespace: bed.ArgoNamespace(),
		Args: []string{"--standby-pair-interval=1s", "--issuance-rate=2"}}
	replica := cfg.Start(t, "replica-0")

	// The primary's Certificates: five selected for the standby, one not.
	const selected = 5
	for _, cp := range []*testbed.ControlPlane{prod, dr, replacement} {
		fixture.EnsureNamespace(t, cp.Client, "apps")
	}
	primaryCerts := func(c client.Client) []*cmapi.Certificate {
		var out []*cmapi.Certificate
		for i := range selected + 1 {
			crt := fixture.Certificate("apps", fmt.Sprintf("svc-%02d", i), "platform-ca", fixture.WithNames("", fmt.Sprintf("svc-%02d.apps.example.com", i)))
			crt.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
			if i < selected {
				crt.Labels = map[string]string{"dr": "true"}
			}
			if err := c.Create(ctx, crt); err != nil {
				t.Fatal(err)
			}
			out = append(out, crt)
		}
		return out
	}
	crts := primaryCerts(prod.Client)
	st := waitStandby(t, bed, dr.Name, func(st *drpair.Status) bool { return st.Ready && st.Selected == selected })
	t.Logf("standby %s ready: %d of %d selected Certificates of %s", dr.Name, st.ReadyCertificates, st.Selected, st.Primary)
	if err := dr.Client.Get(ctx, client.ObjectKeyFromObject(crts[selected]), &cmapi.Certificate{}); err == nil {
		t.Errorf("%s (not selected) was created in the standby", crts[selected].Name)
	}
	if m, err := replica.Metrics(ctx); err != nil || m.Sum("certhub_standby_ready", map[string]string{"standby": dr.Name, "primary": prod.Name}) != 1 {
		t.Errorf("certhub_standby_ready{standby=%s} is not 1 (%v)", dr.Name, err)
	}

	// Failover: the primary's API server stops; the standby's Secrets serve.
	if err := prod.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	for _, crt := range crts[:selected] {
		s := &corev1.Secret{}
		if err := dr.Client.Get(ctx, client.ObjectKey{Namespace: "apps", Name: crt.Spec.SecretName}, s); err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			t.Fatalf("%s in the standby: %v", crt.Spec.SecretName, err)
		}
		if err := fixture.TLSHandshake(pair, caPEM, crt.Spec.DNSNames[0]); err != nil {
			t.Errorf("TLS handshake for %s with the standby's Secret: %v", crt.Spec.DNSNames[0], err)
		}
	}

	// Another cluster's standing backlog of renewals: 20 certificates
	// renewed ~10 s after each issuance, 2/s wanted at a rate of 2/s.
	fixture.EnsureNamespace(t, other.Client, "busy")
	for i := range 20 {
		crt := fixture.Certificate("busy", fmt.Sprintf("r-%02d", i), "platform-ca", fixture.WithNames("", fmt.Sprintf("r-%02d.busy.example.com", i)),
			fixture.WithDuration(time.Hour), fixture.WithRenewBefore(time.Hour-10*time.Second))
		crt.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
		if err := other.Client.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
	}
	audit := fleet.StartAuditor(t, []*testbed.ControlPlane{other, replacement})
	waitFor(t, "the busy cluster renewing", func() bool { return audit.IssuedIn(other.Name) >= 40 })

	// The replacement: the primary's name, a new server, nothing issued.
	if err := bed.Reregister(ctx, replacement, prod.Name); err != nil {
		t.Fatal(err)
	}
	replaced := primaryCerts(replacement.Client)
	for _, crt := range replaced {
		fixture.WaitReady(t, replacement.Client, client.ObjectKeyFromObject(crt))
	}
	during := audit.IssuedBetween(replacement.Name, other.Name)
	t.Logf("the replacement's %d issuances came with %d of the busy cluster's renewals between its first and last", len(replaced), during)
	// Fair shares without a lane would interleave one renewal per
	// replacement certificate (~5); the urgent lane admits at most the one
	// already admitted.
	if during > 1 {
		t.Errorf("%d renewals of another cluster were issued while the replacement's certificates waited; want them first (urgent lane)", during)
	}
}

// waitStandby polls the standby's status until ok.
func waitStandby(t *testing.T, bed *testbed.Bed, name string, ok func(*drpair.Status) bool) *drpair.Status {
	t.Helper()
	var last *drpair.Status
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		sts, err := drpair.ReadStatuses(ctx, bed.Hub.Client, bed.HubNamespace())
		if err != nil {
			return false, nil
		}
		last = sts[name]
		return last != nil && ok(last), nil
	})
	if err != nil {
		t.Fatalf("standby %s: %+v", name, last)
	}
	return last
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*fixture.WaitTimeout, true, func(context.Context) (bool, error) {
		return ok(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
