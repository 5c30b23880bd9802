package acme

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed/acmebed"
)

// Issue 30: a CA's 429 for one registered domain pauses that domain's
// orders only. BIND serves the zone "test", so www.blocked.test and
// www.shop-N.test are different registered domains. The CA answers every
// order for blocked.test 429 (Let's Encrypt's wording, Retry-After 10
// minutes); three other domains' Certificates, created after that 429,
// are issued meanwhile, and the blocked one is not asked again.
func TestA429ForOneDomainLeavesTheOthersRunning(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 1, func(o *acmebed.Options) { o.Zone = "test" })
	ca, hub, c := bed.CA, bed.Hub.Client, bed.Downstreams[0].Client
	proxy, err := ca.StartProxy(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.LimitDomain("blocked.test", 10*time.Minute)
	if err := hub.Create(ctx, fixture.ACMEClusterIssuer("pebble", proxy.DirectoryURL, proxy.ServerCA, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"))); err != nil {
		t.Fatal(err)
	}
	bed.runHub(t, "pebble")
	fixture.EnsureNamespace(t, c, "shop")
	blocked := fixture.Certificate("shop", "blocked", "pebble", fixture.WithNames("", "www.blocked.test"))
	if err := c.Create(ctx, blocked); err != nil {
		t.Fatal(err)
	}
	fixture.WaitFor(t, c, client.ObjectKeyFromObject(blocked), "its order answered 429", func(*cmapi.Certificate) bool { return proxy.Limited() > 0 })
	var others []*cmapi.Certificate
	for _, n := range []string{"shop-1", "shop-2", "shop-3"} {
		crt := fixture.Certificate("shop", n, "pebble", fixture.WithNames("", "www."+n+".test"))
		if err := c.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
		others = append(others, crt)
	}
	for _, crt := range others {
		fixture.WaitReady(t, c, client.ObjectKeyFromObject(crt)) // a whole-account pause would hold them 10 minutes
	}
	if n := len(proxy.Orders()); n != len(others) {
		t.Errorf("%d orders reached the CA, want %d (the other domains')", n, len(others))
	}
	if n := proxy.Limited(); n != 1 {
		t.Errorf("the blocked domain was asked %d times within its Retry-After, want once", n)
	}
	got := &cmapi.Certificate{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(blocked), got); err != nil || fixture.IsReady(got) {
		t.Errorf("the blocked domain's Certificate: Ready %v (%v)", fixture.IsReady(got), err)
	}
}

// Issue 30: shared orders are keyed by hub facts only. On an issuer that
// shares identical requests, cluster A's Certificate is issued; in
// cluster B a tenant pastes A's tls.crt into the Secret of a Certificate
// for the same names (another key type, so not identical), and another
// asks for exactly A's request with rotationPolicy Never. Each gets an
// order and a key of its own (with a healthy neighbour's, four orders at
// the CA), and neither receives A's key.
func TestPastedCertificateJoinsNoOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 2)
	ca, hub := bed.CA, bed.Hub.Client
	ci := fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"))
	ci.Annotations = map[string]string{hubapi.ShareIdenticalRequestsAnnotation: "true"}
	if err := hub.Create(ctx, ci); err != nil {
		t.Fatal(err)
	}
	bed.runHub(t, "pebble")
	a, b := bed.Downstreams[0].Client, bed.Downstreams[1].Client
	names := fixture.WithNames("", "web."+ca.Zone)
	fixture.EnsureNamespace(t, a, "shop")
	fixture.EnsureNamespace(t, b, "shop")
	first := fixture.Certificate("shop", "web", "pebble", names)
	if err := a.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	fixture.WaitReady(t, a, client.ObjectKeyFromObject(first))
	theirs := fixture.GetSecret(t, a, first)

	pasted := fixture.Certificate("shop", "paste", "pebble", names, func(crt *cmapi.Certificate) {
		crt.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm}
	})
	if err := b.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: pasted.Spec.SecretName,
		Annotations: map[string]string{hubapi.AdoptSecretAnnotation: pasted.Name}}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: theirs.Data[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: nil}}); err != nil {
		t.Fatal(err)
	}
	never := fixture.Certificate("shop", "never", "pebble", names, func(crt *cmapi.Certificate) {
		crt.Spec.PrivateKey = &cmapi.CertificatePrivateKey{RotationPolicy: cmapi.RotationPolicyNever}
	})
	neighbour := fixture.Certificate("shop", "neighbour", "pebble", fixture.WithNames("", "neighbour."+ca.Zone))
	start := time.Now()
	for _, crt := range []*cmapi.Certificate{pasted, never, neighbour} {
		if err := b.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
	}
	fixture.WaitReady(t, b, client.ObjectKeyFromObject(neighbour))
	t.Logf("a healthy neighbour in cluster B Ready %s after it was created beside them", time.Since(start).Round(10*time.Millisecond))
	for _, crt := range []*cmapi.Certificate{pasted, never} {
		fixture.WaitReady(t, b, client.ObjectKeyFromObject(crt))
		if s := fixture.GetSecret(t, b, crt); bytes.Equal(s.Data[corev1.TLSPrivateKeyKey], theirs.Data[corev1.TLSPrivateKeyKey]) ||
			bytes.Equal(s.Data[corev1.TLSCertKey], theirs.Data[corev1.TLSCertKey]) {
			t.Errorf("%s received cluster A's certificate and key", crt.Name)
		}
	}
	if got := ca.Count(); got.Orders != 4 {
		t.Errorf("Pebble created %d orders, want 4 (one each, the neighbour's too)", got.Orders)
	}
}

// Issue 30: one namespace's backlog takes its share of the ACME account,
// not the account. A namespace of cluster A creates 500 Certificates on an
// issuer whose budget allows 4 new orders and one more every 2 s; then
// cluster B creates 10. B's 10 are all issued while A's namespace has had
// at most its share meanwhile: B's 10, A's 10 alongside (fair queuing
// alternates), the 4 A took before B asked and a few orders in flight.
// Order, not wall time: the count of A's issued certificates when B's
// last one is Ready.
func TestAFloodTakesItsShareOfTheAccount(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bed := startIssuanceBed(ctx, t, 2)
	ca, hub := bed.CA, bed.Hub.Client
	if err := hub.Create(ctx, fixture.ACMEClusterIssuer("pebble", ca.DirectoryURL, ca.ServerCAs, "pebble-account",
		fixture.RFC2136Solver(ca.Nameserver, ca.TSIGKeyName, ca.TSIGAlgorithm, "tsig"), func(ci *cmapi.ClusterIssuer) {
			ci.Annotations = map[string]string{hubapi.ACMELimitsAnnotation: "orders=4/8s"}
		})); err != nil {
		t.Fatal(err)
	}
	bed.runHub(t, "pebble")
	a, b := bed.Downstreams[0].Client, bed.Downstreams[1].Client
	fixture.EnsureNamespace(t, a, "flood")
	fixture.EnsureNamespace(t, b, "quiet")
	const flood, quiet = 500, 10
	for i := range flood {
		crt := fixture.Certificate("flood", fmt.Sprintf("f-%03d", i), "pebble", fixture.WithNames("", fmt.Sprintf("f-%03d.%s", i, ca.Zone)))
		if err := a.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
	}
	issued := func(c client.Client, ns string) int {
		list := &cmapi.CertificateList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for i := range list.Items {
			if fixture.IsReady(&list.Items[i]) {
				n++
			}
		}
		return n
	}
	// B asks once A's backlog is queued: A took the full bucket.
	fixture.WaitFor(t, a, client.ObjectKey{Namespace: "flood", Name: "f-000"}, "the flood's first orders issued", func(*cmapi.Certificate) bool { return issued(a, "flood") >= 4 })
	var quietCrts []*cmapi.Certificate
	for i := range quiet {
		crt := fixture.Certificate("quiet", fmt.Sprintf("q-%d", i), "pebble", fixture.WithNames("", fmt.Sprintf("q-%d.%s", i, ca.Zone)))
		if err := b.Create(ctx, crt); err != nil {
			t.Fatal(err)
		}
		quietCrts = append(quietCrts, crt)
	}
	for _, crt := range quietCrts {
		fixture.WaitReady(t, b, client.ObjectKeyFromObject(crt))
	}
	floodIssued := issued(a, "flood")
	t.Logf("when the quiet cluster's %d were issued, the flood had %d of %d (%d orders at the CA)", quiet, floodIssued, flood, ca.Count().Orders)
	if most := 4 + quiet + 4; floodIssued > most {
		t.Errorf("the flood had %d issued when the quiet cluster's %d were done; its fair share is at most %d", floodIssued, quiet, most)
	}
}
