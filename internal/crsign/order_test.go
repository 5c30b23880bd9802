package crsign_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/certhub/certhub/internal/crsign"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

// fakeOrderer answers Order with res/err and records what it was asked.
type fakeOrderer struct {
	inFlight bool
	res      issuers.Result
	err      error
	asked    []issuers.OrderRequest
}

func (o *fakeOrderer) Sign(context.Context, issuers.Request) (issuers.Result, error) {
	return issuers.Result{}, nil
}

func (o *fakeOrderer) Order(_ context.Context, req issuers.OrderRequest) (issuers.Result, error) {
	o.asked = append(o.asked, req)
	return o.res, o.err
}

func (o *fakeOrderer) InFlight(context.Context, issuers.OrderRequest) (bool, error) {
	return o.inFlight, nil
}

// leafFor is a certificate for key's public half, as an ACME CA returns it.
func leafFor(t *testing.T, pub crypto.PublicKey) []byte {
	t.Helper()
	caKey, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: "web.example.com"}, DNSNames: []string{"web.example.com"},
		NotBefore: now, NotAfter: now.Add(90 * 24 * time.Hour)}
	leaf, _, err := pki.SignCertificate(tmpl, tmpl, pub, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// An ACME ClusterIssuer orders with the request's own CSR (no key in the
// hub), once through the budget, and reports the order as cert-manager's
// ACME issuer reports one on a CertificateRequest.
func TestOrder(t *testing.T) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		orderer  fakeOrderer
		wait     time.Duration // the budget's answer
		reason   string        // Ready's
		says     string
		signed   bool
		failed   bool
		requeue  bool
		event    string
		ordered  bool // Order was asked
		errorOut bool // Reconcile returns an error
	}{
		{name: "a new order, admitted: pending", orderer: fakeOrderer{err: &issuers.Pending{Reason: issuers.ReasonOrderPending, Message: "ACME order certhub/web-1 in the hub was created", RetryAfter: time.Second}},
			reason: cmapi.CertificateRequestReasonPending, says: "was created", requeue: true, event: issuers.ReasonOrderPending, ordered: true},
		{name: "a new order, budget spent: waits without ordering", orderer: fakeOrderer{}, wait: time.Minute,
			reason: cmapi.CertificateRequestReasonPending, says: "issuance budget", requeue: true, event: crsign.ReasonRateLimited},
		{name: "an order in flight: asked again, no budget", orderer: fakeOrderer{inFlight: true, err: &issuers.Pending{Reason: issuers.ReasonOrderPending, Message: "validating"}}, wait: time.Minute,
			reason: cmapi.CertificateRequestReasonPending, says: "validating", requeue: true, event: issuers.ReasonOrderPending, ordered: true},
		{name: "the order failed: the request fails", orderer: fakeOrderer{inFlight: true, err: &issuers.Error{Reason: "OrderFailed", Message: "the CA said urn:ietf:params:acme:error:rejectedIdentifier"}},
			reason: cmapi.CertificateRequestReasonFailed, says: "rejectedIdentifier", failed: true, event: "OrderFailed", ordered: true},
		{name: "issued: Ready, the chain, no ca.crt", orderer: fakeOrderer{inFlight: true, res: issuers.Result{ChainPEM: leafFor(t, key.Public())}},
			reason: cmapi.CertificateRequestReasonIssued, signed: true, event: "CertificateIssued", ordered: true},
		{name: "a certificate for another key: never written", orderer: fakeOrderer{inFlight: true, res: issuers.Result{ChainPEM: leafFor(t, other.Public())}},
			ordered: true, errorOut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr := request(t, "acme", key)
			cr.UID = "uid-1"
			approved := condition(cmapi.CertificateRequestConditionApproved)
			approved(cr)
			c := fake.NewClientBuilder().WithScheme(testbed.Scheme()).WithObjects(cr).WithStatusSubresource(&cmapi.CertificateRequest{}).Build()
			fc := fixture.NewFakeCluster(c)
			o := tc.orderer
			resolver, _ := hubWithACME(t, func(context.Context, *cmapi.ClusterIssuer) (issuers.Issuer, error) { return &o, nil })
			res, err := reconcileOnce(t, fc, crsign.Options{Issuers: resolver, Policy: fakePolicy{}, Budget: fakeBudget{wait: tc.wait}}, "east", cr)
			if (err != nil) != tc.errorOut {
				t.Fatalf("Reconcile: %v; want an error %t", err, tc.errorOut)
			}
			if (len(o.asked) > 0) != tc.ordered {
				t.Fatalf("ordered %d times; want an order %t", len(o.asked), tc.ordered)
			}
			for _, req := range o.asked {
				csr, _ := pki.DecodeX509CertificateRequestBytes(cr.Spec.Request)
				if req.Key != nil || !bytes.Equal(req.CSR, csr.Raw) {
					t.Error("the order does not carry the request's own CSR (or carries a key)")
				}
				if req.Cluster != "east" || req.Certificate.UID != cr.UID || !strings.Contains(strings.Join(req.Certificate.Spec.DNSNames, ","), "web") {
					t.Errorf("the order is asked for %s %s/%s %s %v", req.Cluster, req.Certificate.Namespace, req.Certificate.Name, req.Certificate.UID, req.Certificate.Spec.DNSNames)
				}
			}
			got := &cmapi.CertificateRequest{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(cr), got); err != nil {
				t.Fatal(err)
			}
			checkOutcome(t, got, res, drain(fc), outcome{reason: tc.reason, says: tc.says, signed: tc.signed, failed: tc.failed, requeue: tc.requeue, event: tc.event})
			if len(got.Status.CA) > 0 {
				t.Error("status.ca set: an ACME CA names no root")
			}
		})
	}
}
