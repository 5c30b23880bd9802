package acme

import (
	"context"
	"syscall"
	"testing"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/certhub/certhub/internal/acme"
	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/fleet"
)

// Two replica processes; the one driving an order is SIGKILLed while the
// order waits between propagation and validation (--acme-dns01-settle-delay
// holds it there). The other replica takes the cluster over, resumes the
// same ACMEOrder (the CA saw one order for it, not two) and issues from
// it; no TXT record is left behind. A neighbour Certificate on the same
// account, created after the kill, is issued meanwhile with one order.
func TestACMEOrderSurvivesItsHoldersDeath(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 1)
	ca, kubeconfig := bed.CA, bed.Kubeconfig
	hub, ns := bed.Hub.Client, bed.HubNamespace()
	createWithNeighbourSolver(ctx, t, bed)

	const hold = 4 * time.Second
	cfg := fleet.Config{Binary: certhubBinary, Kubeconfig: kubeconfig, HubNamespace: ns, ArgoNamespace: bed.ArgoNamespace(),
		Args: []string{"--acme-dns01-recursive-nameservers", ca.Nameserver, "--acme-dns01-recursive-nameservers-only",
			"--acme-dns01-settle-delay", "20s", "--acme-order-hold", hold.String()}}
	replicas := map[string]*fleet.Replica{"hub-a": cfg.Start(t, "hub-a"), "hub-b": cfg.Start(t, "hub-b")}
	fixture.WaitClusterIssuer(t, hub, "pebble", "registered", fixture.IssuerReadyWith(cmmeta.ConditionTrue, acme.ReasonAccountRegistered))

	down := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, down, "shop")
	crt := fixture.Certificate("shop", "web", "pebble", fixture.WithNames("", "web."+ca.Zone))
	if err := down.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	// Wait until the order's TXT record is served and the order waits out the settle delay.
	var before hubapi.ACMEOrder
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		orders := &hubapi.ACMEOrderList{}
		if err := hub.List(ctx, orders, client.InNamespace(ns)); err != nil || len(orders.Items) != 1 {
			return false, nil // the neighbour starts after the kill
		}
		before = orders.Items[0]
		return before.Status.State == hubapi.ACMEOrderPropagating, nil
	})
	if err != nil {
		t.Fatalf("no order reached %s: %v (last %+v)", hubapi.ACMEOrderPropagating, err, before.Status)
	}
	holder := replicas[before.Status.Holder]
	if holder == nil {
		t.Fatalf("order held by %q, not a replica of this test", before.Status.Holder)
	}
	if got := ca.Count().Orders; got != 1 {
		t.Fatalf("Pebble has %d orders before the kill, want 1", got)
	}
	_ = holder.Stop(syscall.SIGKILL) // exits with "signal: killed"
	if holder.Running() {
		t.Fatalf("%s survived SIGKILL", holder.ID)
	}
	killed := time.Now()
	t.Logf("killed %s holding order %s (%s)", holder.ID, before.Name, before.Status.State)
	quiet := startNeighbour(ctx, t, bed)

	fixture.WaitReady(t, down, client.ObjectKeyFromObject(crt))
	t.Logf("Ready %s after the kill (fence lease %s, order hold %s, settle delay 20s)", time.Since(killed).Round(100*time.Millisecond), fleet.FastTimings.LeaseDuration, hold)
	after := &hubapi.ACMEOrder{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(&before), after); err != nil {
		t.Fatalf("the order the dead replica held: %v", err)
	}
	if after.UID != before.UID || after.Status.URL != before.Status.URL || after.Status.State != hubapi.ACMEOrderValid {
		t.Errorf("order after the kill: uid %s url %s state %s; want the same order (%s, %s) Valid", after.UID, after.Status.URL, after.Status.State, before.UID, before.Status.URL)
	}
	if after.Status.Holder == holder.ID {
		t.Errorf("order still held by the dead replica %s", holder.ID)
	}
	checkNeighbour(ctx, t, bed, quiet)
	if got := ca.Count().Orders; got != 2 {
		t.Errorf("Pebble has %d orders, want 2 (one per issuance): the survivor must resume the order, not place a new one", got)
	}
	sec := fixture.GetSecret(t, down, crt)
	if sec.Annotations[cmapi.CertificateNameKey] != "web" || len(sec.Data[corev1.TLSCertKey]) == 0 {
		t.Errorf("Secret %s: annotations %v, %d bytes of tls.crt", sec.Name, sec.Annotations, len(sec.Data[corev1.TLSCertKey]))
	}
	if got := txt(t, ca.Nameserver, "_acme-challenge.web."+ca.Zone+"."); len(got) != 0 {
		t.Errorf("TXT left after the resumed order: %v", got)
	}
	// The hub's record holds each certificate the CA issued through an
	// order once — the one the dead replica's order yielded included — with
	// the certificate kept for revokeCert.
	served := fixture.ManagedSerials(t, down)
	entries, undelivered := fixture.Record(t, hub, ns)
	for _, e := range entries {
		where, ok := served[fixture.DecimalSerial(e.Serial)]
		switch {
		case undelivered[e.Key()]:
			t.Errorf("ACME serial %s recorded as never delivered", e.Serial)
		case !ok:
			t.Errorf("the record holds ACME serial %s (%s/%s), which no Secret holds", e.Serial, e.Namespace, e.Name)
		case len(e.DER) == 0 || e.Issuer != "ClusterIssuer/pebble":
			t.Errorf("%s: entry %s of issuer %s keeps %d bytes of certificate", where, e.Serial, e.Issuer, len(e.DER))
		}
	}
	if len(entries) != len(served) || len(entries) != ca.Count().Orders {
		t.Errorf("the record holds %d entries, %d Secrets hold a certificate, Pebble has %d orders; want all equal", len(entries), len(served), ca.Count().Orders)
	}
}

// orderWaiting starts a bed whose hub replica holds each ACME order for
// settle after its TXT records are written, and creates Certificate
// shop/web in its cluster.
func orderWaiting(ctx context.Context, t *testing.T, settle string) (*issuanceBed, client.Client, *cmapi.Certificate) {
	t.Helper()
	bed := startIssuanceBed(ctx, t, 1)
	ca := bed.CA
	createWithNeighbourSolver(ctx, t, bed)
	bed.runHub(t, "pebble", "--acme-dns01-settle-delay", settle)
	down := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, down, "shop")
	crt := fixture.Certificate("shop", "web", "pebble", fixture.WithNames("", "web."+ca.Zone))
	if err := down.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	return bed, down, crt
}

// waitOrder waits until the one ACMEOrder of Certificate shop/web in the
// hub namespace is in state.
func waitOrder(ctx context.Context, t *testing.T, hub client.Client, ns, state string) hubapi.ACMEOrder {
	t.Helper()
	var ord hubapi.ACMEOrder
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, fixture.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		mine := ordersOf(ctx, t, hub, ns, "shop", "web")
		if len(mine) != 1 {
			return false, nil
		}
		ord = mine[0]
		return ord.Status.State == state, nil
	})
	if err != nil {
		t.Fatalf("no order reached %s: %v (last %+v)", state, err, ord.Status)
	}
	return ord
}

// Issue 30: a TXT clean-up that fails is tried again until the record is
// gone. The DNS server refuses the clean-up (the TSIG key the hub holds
// is changed while the order waits out its settle delay): the order is
// issued from and its record stays; the key is put back and the record
// goes, with one order at the CA. A neighbour Certificate on the same
// account (its own copy of the TSIG Secret) is issued with one order while
// the record cannot be cleaned up.
func TestFailedTXTCleanUpIsRetried(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed, down, crt := orderWaiting(ctx, t, "5s")
	ca, hub, ns := bed.CA, bed.Hub.Client, bed.HubNamespace()
	waitOrder(ctx, t, hub, ns, hubapi.ACMEOrderPropagating)
	setTSIG := func(secret string) {
		s := &corev1.Secret{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tsig"}, s); err != nil {
			t.Fatal(err)
		}
		s.Data[fixture.TSIGSecretKey] = []byte(secret)
		if err := hub.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	setTSIG("d3Jvbmcgd3Jvbmcgd3Jvbmcgd3Jvbmcgd3Jvbmc=") // valid base64, not BIND's key
	quiet := startNeighbour(ctx, t, bed)
	fixture.WaitReady(t, down, client.ObjectKeyFromObject(crt))
	checkNeighbour(ctx, t, bed, quiet) // while web's record cannot be cleaned up
	fqdn := "_acme-challenge.web." + ca.Zone + "."
	if got := txt(t, ca.Nameserver, fqdn); len(got) == 0 {
		t.Fatal("the TXT record went although the DNS server refused its clean-up: nothing was proven")
	}
	setTSIG(ca.TSIGSecret)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(txt(t, ca.Nameserver, fqdn)) == 0, nil
	})
	if err != nil {
		t.Errorf("TXT %s still there after its clean-up could succeed: %v", fqdn, txt(t, ca.Nameserver, fqdn))
	}
	if got := ca.Count().Orders; got != 2 {
		t.Errorf("Pebble has %d orders, want 2 (one per issuance)", got)
	}
}

// Issue 30: an ACMEOrder deleted while its TXT record is in the zone
// (waiting out its settle delay) goes only once the record is gone; the
// issuance's next ACMEOrder continues the deleted one's CA order (its URL
// and key were kept), so Pebble, which hands back no pending order for the
// same names (Let's Encrypt would), counts one order; no record is left.
// A neighbour Certificate on the same account, created when the order is
// deleted, is issued meanwhile with one order.
func TestDeletedACMEOrderLeavesNoRecord(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed, down, crt := orderWaiting(ctx, t, "20s")
	ca, hub, ns := bed.CA, bed.Hub.Client, bed.HubNamespace()
	ord := waitOrder(ctx, t, hub, ns, hubapi.ACMEOrderPropagating)
	fqdn := "_acme-challenge.web." + ca.Zone + "."
	if len(txt(t, ca.Nameserver, fqdn)) == 0 {
		t.Fatal("no TXT record while propagating")
	}
	if err := hub.Delete(ctx, &ord); err != nil {
		t.Fatal(err)
	}
	quiet := startNeighbour(ctx, t, bed)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(hub.Get(ctx, client.ObjectKeyFromObject(&ord), &hubapi.ACMEOrder{})), nil
	})
	if err != nil {
		t.Fatalf("the deleted order never went: %v", err)
	}
	if got := txt(t, ca.Nameserver, fqdn); len(got) != 0 {
		t.Errorf("the deleted order went with its TXT record still in the zone: %v", got)
	}
	fixture.WaitReady(t, down, client.ObjectKeyFromObject(crt))
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(txt(t, ca.Nameserver, fqdn)) == 0, nil
	}); err != nil {
		t.Errorf("TXT left after the new order: %v", txt(t, ca.Nameserver, fqdn))
	}
	checkNeighbour(ctx, t, bed, quiet)
	if got := ca.Count().Orders; got != 2 {
		t.Errorf("Pebble has %d orders, want 2 (one per issuance: the deleted ACMEOrder's, continued, and the neighbour's)", got)
	}
	next := &hubapi.ACMEOrder{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(&ord), next); err != nil {
		t.Fatal(err)
	}
	if next.UID == ord.UID || next.Status.URL != ord.Status.URL {
		t.Errorf("ACMEOrder %s (uid %s) at %s; want a new object continuing %s", next.Name, next.UID, next.Status.URL, ord.Status.URL)
	}
	key := &corev1.Secret{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(&ord), key); err != nil {
		t.Fatal(err)
	}
	if len(key.OwnerReferences) != 1 || key.OwnerReferences[0].UID != next.UID || key.Annotations[hubapi.ResumeOrderAnnotation] != "" {
		t.Errorf("the key Secret is owned by %+v with marks %v; want the new order's, unmarked", key.OwnerReferences, key.Annotations)
	}
}

// The healthy neighbour of each fault: Certificate other/quiet in the same
// cluster, on the same ACME account, solved with its own copy of the TSIG
// Secret (a fault made in "tsig" does not reach it). It must be issued,
// with one order, while the fault lasts.

// createWithNeighbourSolver creates ClusterIssuer "pebble": the "tsig"
// solver, and for quiet.<zone> a solver reading "tsig-neighbour".
func createWithNeighbourSolver(ctx context.Context, t *testing.T, bed *issuanceBed) {
	t.Helper()
	ca := bed.CA
	bed.createTSIGSecret(ctx, t, "tsig-neighbour", ca.TSIGSecret)
	ci := fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"))
	quiet := ci.DeepCopy()
	fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig-neighbour")(quiet)
	s := quiet.Spec.ACME.Solvers[0]
	s.Selector = &cmacme.CertificateDNSNameSelector{DNSNames: []string{"quiet." + ca.Zone}}
	ci.Spec.ACME.Solvers = append(ci.Spec.ACME.Solvers, s)
	if err := bed.Hub.Client.Create(ctx, ci); err != nil {
		t.Fatal(err)
	}
}

// startNeighbour creates Certificate other/quiet.
func startNeighbour(ctx context.Context, t *testing.T, bed *issuanceBed) *cmapi.Certificate {
	t.Helper()
	down := bed.Downstreams[0].Client
	fixture.EnsureNamespace(t, down, "other")
	crt := fixture.Certificate("other", "quiet", "pebble", fixture.WithNames("", "quiet."+bed.CA.Zone))
	if err := down.Create(ctx, crt); err != nil {
		t.Fatal(err)
	}
	return crt
}

// checkNeighbour waits for the neighbour to be Ready and checks it took one
// order and left no TXT record.
func checkNeighbour(ctx context.Context, t *testing.T, bed *issuanceBed, crt *cmapi.Certificate) {
	t.Helper()
	fixture.WaitReady(t, bed.Downstreams[0].Client, client.ObjectKeyFromObject(crt))
	if got := ordersOf(ctx, t, bed.Hub.Client, bed.HubNamespace(), crt.Namespace, crt.Name); len(got) != 1 {
		t.Errorf("the neighbour took %d ACMEOrders, want 1", len(got))
	}
	if got := txt(t, bed.CA.Nameserver, "_acme-challenge.quiet."+bed.CA.Zone+"."); len(got) != 0 {
		t.Errorf("the neighbour's TXT record is left: %v", got)
	}
}

// ordersOf lists the ACMEOrders of downstream Certificate namespace/name.
func ordersOf(ctx context.Context, t *testing.T, hub client.Client, ns, namespace, name string) []hubapi.ACMEOrder {
	t.Helper()
	orders := &hubapi.ACMEOrderList{}
	if err := hub.List(ctx, orders, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []hubapi.ACMEOrder
	for _, o := range orders.Items {
		if o.Spec.Namespace == namespace && o.Spec.Certificate == name {
			out = append(out, o)
		}
	}
	return out
}
