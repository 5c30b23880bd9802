package acme

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/issuers"
)

// An order for a downstream CertificateRequest finalizes with the
// request's own CSR: the hub writes no key Secret, never shares the order
// (even on an issuer that shares identical requests), returns the
// certificate without a key, and never deletes the order for its missing
// key.
func TestOrderWithTheRequestsCSR(t *testing.T) {
	ctx := context.Background()
	o, hub, clk := newOrderer(t)
	o.ci.Annotations = map[string]string{hubapi.ShareIdenticalRequestsAnnotation: "true"}
	opts := o.s.opts

	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{DNSNames: []string{"web.example.test"}}
	der, err := x509.CreateCertificateRequest(nil, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	crt := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh", Name: "web-1", UID: "uid-1", CreationTimestamp: metav1.NewTime(clk.Now())},
		Spec: cmapi.CertificateSpec{DNSNames: []string{"web.example.test"}}}
	req := issuers.OrderRequest{Cluster: "east", Certificate: crt, CSR: der}

	_, err = o.Order(ctx, req)
	if p := (*issuers.Pending)(nil); !errors.As(err, &p) {
		t.Fatalf("Order: %v; want pending", err)
	}
	orders := &hubapi.ACMEOrderList{}
	if err := hub.List(ctx, orders); err != nil || len(orders.Items) != 1 {
		t.Fatalf("%d orders (%v); want one", len(orders.Items), err)
	}
	ord := orders.Items[0]
	if !ord.Spec.KeyInCluster || ord.Spec.Shared || !bytes.Equal(ord.Spec.Request, der) {
		t.Fatalf("order keyInCluster=%t shared=%t, request is the CSR: %t", ord.Spec.KeyInCluster, ord.Spec.Shared, bytes.Equal(ord.Spec.Request, der))
	}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: ord.Name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a key Secret for the order: %v", err)
	}

	// Left unclaimed past the hold: kept (no key was ever to be written).
	clk.Step(2 * opts.HoldDuration)
	ord.Status = hubapi.ACMEOrderStatus{}
	if err := hub.Status().Update(ctx, &ord); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Order(ctx, req); !errors.As(err, new(*issuers.Pending)) {
		t.Fatalf("Order of an unclaimed order: %v; want pending", err)
	}

	chain := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	if err := hub.Get(ctx, client.ObjectKeyFromObject(&ord), &ord); err != nil {
		t.Fatal(err)
	}
	ord.Status.State, ord.Status.Certificate = hubapi.ACMEOrderValid, chain
	if err := hub.Status().Update(ctx, &ord); err != nil {
		t.Fatal(err)
	}
	res, err := o.Order(ctx, req)
	if err != nil || !bytes.Equal(res.ChainPEM, chain) || res.PrivateKey != nil {
		t.Fatalf("Order of a valid order: %v, chain %t, key %v", err, bytes.Equal(res.ChainPEM, chain), res.PrivateKey)
	}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(&ord), &hubapi.ACMEOrder{}); err != nil {
		t.Fatalf("the valid order was deleted: %v", err)
	}
}

// newOrderer is an orderer of an ACME ClusterIssuer with an rfc2136
// solver, over a fake hub, at a fake clock; no CA is reached.
func newOrderer(t *testing.T) (*orderer, client.Client, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC))
	ci := issuer("acct", "", false)
	ci.Spec.ACME.Solvers = []cmacme.ACMEChallengeSolver{{DNS01: &cmacme.ACMEChallengeSolverDNS01{RFC2136: &cmacme.ACMEIssuerDNS01ProviderRFC2136{Nameserver: "127.0.0.1:53"}}}}
	hub := fakeHub(t)
	opts := Options{Namespace: ns, Identity: "replica-0", Clock: clk, Registerer: prometheus.NewRegistry()}
	opts.defaults()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		t.Fatal(err)
	}
	return &orderer{s: &Service{hub: hub, live: hub, opts: opts, metrics: m}, ci: ci}, hub, clk
}
