package acme

import (
	"bytes"
	"context"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/apis/reasons"
	"github.com/certhub/certhub/test/fixture"
)

// An ACME ClusterIssuer that opts in (certhub.io/share-identical-requests)
// serves identical Certificates in three clusters with one order: Pebble
// sees one order, the hub holds one ACMEOrder, and all three Secrets hold
// the same certificate and key. A Certificate that asks for something
// else beside them gets its own order.
func TestACMESharesIdenticalRequestsWhenOptedIn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 3)
	ca, hub := bed.CA, bed.Hub.Client
	ci := fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"))
	ci.Annotations = map[string]string{hubapi.ShareIdenticalRequestsAnnotation: "true"}
	if err := hub.Create(ctx, ci); err != nil {
		t.Fatal(err)
	}
	bed.runHub(t, "pebble")

	var crts []*cmapi.Certificate
	for _, cp := range bed.Downstreams {
		fixture.EnsureNamespace(t, cp.Client, "shop")
		crt := fixture.Certificate("shop", "web", "pebble", fixture.WithNames("", "web."+ca.Zone, "www."+ca.Zone))
		crt.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
		if err := cp.Client.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
		crts = append(crts, crt)
	}
	other := fixture.Certificate("shop", "api", "pebble", fixture.WithNames("", "api."+ca.Zone))
	other.Spec.IssuerRef.Kind = cmapi.ClusterIssuerKind
	if err := bed.Downstreams[0].Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}

	var first *corev1.Secret
	for i, cp := range bed.Downstreams {
		fixture.WaitReady(t, cp.Client, client.ObjectKeyFromObject(crts[i]))
		s := fixture.GetSecret(t, cp.Client, crts[i])
		if first == nil {
			first = s
			continue
		}
		if !bytes.Equal(s.Data[corev1.TLSCertKey], first.Data[corev1.TLSCertKey]) || !bytes.Equal(s.Data[corev1.TLSPrivateKeyKey], first.Data[corev1.TLSPrivateKeyKey]) {
			t.Errorf("%s: its Secret holds another certificate or key than %s's", cp.Name, bed.Downstreams[0].Name)
		}
	}
	fixture.WaitReady(t, bed.Downstreams[0].Client, client.ObjectKeyFromObject(other))
	if s := fixture.GetSecret(t, bed.Downstreams[0].Client, other); bytes.Equal(s.Data[corev1.TLSPrivateKeyKey], first.Data[corev1.TLSPrivateKeyKey]) {
		t.Error("a Certificate with other names got the shared key")
	}

	// The record holds the shared certificate once per Certificate it was
	// delivered to: each keeps it as the one the hub issued for it.
	leaf, err := pki.DecodeX509CertificateBytes(first.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := fixture.Record(t, hub, bed.HubNamespace())
	delivered := map[string]bool{}
	for _, e := range entries {
		if fixture.DecimalSerial(e.Serial) == leaf.SerialNumber.String() {
			delivered[e.Cluster] = true
		}
	}
	if len(delivered) != len(bed.Downstreams) {
		t.Errorf("the shared certificate is recorded for clusters %v, want each of the %d", delivered, len(bed.Downstreams))
	}
	for i, cp := range bed.Downstreams {
		got := &cmapi.Certificate{}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(crts[i]), got); err != nil {
			t.Fatal(err)
		}
		if c := fixture.Condition(got, cmapi.CertificateConditionIssuing); c != nil && c.Reason == reasons.NotRecorded {
			t.Errorf("%s: re-issuing the shared certificate: %s", cp.Name, c.Message)
		}
	}
	if got := ca.Count(); got.Orders != 2 {
		t.Errorf("Pebble created %d orders, want 2: one shared by the 3 identical Certificates, one for the other", got.Orders)
	}
	orders := &hubapi.ACMEOrderList{}
	if err := hub.List(ctx, orders, client.InNamespace(bed.HubNamespace())); err != nil {
		t.Fatal(err)
	}
	var shared int
	for _, ord := range orders.Items {
		if ord.Spec.Shared {
			shared++
		}
		t.Logf("ACMEOrder %s: shared %t, %s, created for %s/%s/%s", ord.Name, ord.Spec.Shared, ord.Status.State, ord.Spec.Cluster, ord.Spec.Namespace, ord.Spec.Certificate)
	}
	if len(orders.Items) != 2 || shared != 2 {
		t.Errorf("%d ACMEOrders (%d shared), want 2, both shared (identical requests would share each)", len(orders.Items), shared)
	}
}
