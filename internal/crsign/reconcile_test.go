package crsign_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/crsign"
	"github.com/certhub/certhub/internal/fence"
	"github.com/certhub/certhub/internal/issuers"
	"github.com/certhub/certhub/internal/policy"
	"github.com/certhub/certhub/test/fixture"
	"github.com/certhub/certhub/test/fixture/testbed"
)

var now = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

// hubWithIssuers is a hub holding a CA ClusterIssuer "ca", a SelfSigned
// "self" and an ACME "acme" (served by no ACME implementation here).
func hubWithIssuers(t *testing.T) (*issuers.Resolver, *x509.Certificate) {
	t.Helper()
	return hubWithACME(t, nil)
}

// hubWithACME is hubWithIssuers whose "acme" is served by acme (nil: not
// served, IssuerNotSupported).
func hubWithACME(t *testing.T, acme func(context.Context, *cmapi.ClusterIssuer) (issuers.Issuer, error)) (*issuers.Resolver, *x509.Certificate) {
	t.Helper()
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hub test CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	certPEM, ca, err := pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodePKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(testbed.Scheme()).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "certhub", Name: "ca-key"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: "ca-key"}}}},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "self"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}}},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "acme"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{ACME: &cmacme.ACMEIssuer{Server: "https://acme.example/directory"}}}},
	).Build()
	r, err := issuers.New(issuers.Options{Client: c, Namespace: "certhub", ACME: acme})
	if err != nil {
		t.Fatal(err)
	}
	return r, ca
}

// request is a CertificateRequest for web.example.com naming hub issuer
// issuer, with a CSR of key.
func request(t *testing.T, issuer string, key crypto.Signer) *cmapi.CertificateRequest {
	t.Helper()
	crt := fixture.Certificate("mesh", "web", issuer, fixture.WithIssuer(cmmeta.IssuerReference{Name: issuer, Kind: cmapi.ClusterIssuerKind, Group: hubapi.GroupName}))
	cr, err := fixture.CertificateRequest(crt, "web-1", key)
	if err != nil {
		t.Fatal(err)
	}
	cr.CreationTimestamp = metav1.Time{Time: now}
	return cr
}

// condition sets typ True, its transition at the test's now (apiutil's own
// clock is the wall clock, which a reconciler on a fake clock would see as
// the future).
func condition(typ cmapi.CertificateRequestConditionType) func(*cmapi.CertificateRequest) {
	return func(cr *cmapi.CertificateRequest) {
		apiutil.SetCertificateRequestCondition(cr, typ, cmmeta.ConditionTrue, "test", "test")
		for i := range cr.Status.Conditions {
			if cr.Status.Conditions[i].Type == typ {
				cr.Status.Conditions[i].LastTransitionTime = &metav1.Time{Time: now}
			}
		}
	}
}

type fakePolicy struct{ deny string }

func (p fakePolicy) Evaluate(string, *cmapi.Certificate, *x509.Certificate) (policy.Decision, bool) {
	if p.deny != "" {
		return policy.Decision{Message: p.deny}, false
	}
	return policy.Decision{Allowed: true}, false
}

type fakeBudget struct{ wait time.Duration }

func (b fakeBudget) Admit(string, budget.Tenant, time.Time, budget.Lane) time.Duration { return b.wait }

// notOwner owns nothing.
type notOwner struct{}

func (notOwner) Owns(multicluster.ClusterName) (string, bool) { return "", false }
func (notOwner) BeginWrite(multicluster.ClusterName) (string, time.Time, func(), bool) {
	return "", time.Time{}, func() {}, false
}

func TestReconcile(t *testing.T) {
	ec, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		t.Fatal(err)
	}
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	approved := condition(cmapi.CertificateRequestConditionApproved)
	for _, tc := range []struct {
		name    string
		issuer  string
		key     crypto.Signer
		mutate  []func(*cmapi.CertificateRequest)
		policy  string // a denial
		wait    time.Duration
		fence   fence.Fence
		reason  string // Ready's reason; "" none
		says    string
		signed  bool
		failed  bool // failureTime set
		requeue bool
		event   string
	}{
		{name: "approved: signed", issuer: "ca", mutate: []func(*cmapi.CertificateRequest){approved},
			reason: cmapi.CertificateRequestReasonIssued, says: "Certificate fetched from issuer successfully", signed: true, event: "CertificateIssued"},
		{name: "unapproved: waits, an Event, no condition", issuer: "ca", event: crsign.ReasonWaitingForApproval},
		{name: "denied: Denied, never signed", issuer: "ca", mutate: []func(*cmapi.CertificateRequest){condition(cmapi.CertificateRequestConditionDenied)},
			reason: cmapi.CertificateRequestReasonDenied, says: "denied by an approval controller", failed: true},
		{name: "approved and denied: denied wins", issuer: "ca", mutate: []func(*cmapi.CertificateRequest){approved, condition(cmapi.CertificateRequestConditionDenied)},
			reason: cmapi.CertificateRequestReasonDenied, failed: true},
		{name: "a weak key", issuer: "ca", key: weak, mutate: []func(*cmapi.CertificateRequest){approved},
			reason: cmapi.CertificateRequestReasonFailed, says: "RSA key of 1024 bits", failed: true, event: crsign.ReasonBadCSR},
		{name: "a CSR signed by another key", issuer: "ca", mutate: []func(*cmapi.CertificateRequest){approved, func(cr *cmapi.CertificateRequest) {
			block, _ := pem.Decode(cr.Spec.Request)
			block.Bytes[len(block.Bytes)-1] ^= 0xff // the signature's last byte
			cr.Spec.Request = pem.EncodeToMemory(block)
		}}, reason: cmapi.CertificateRequestReasonFailed, says: "signature", failed: true, event: crsign.ReasonBadCSR},
		{name: "outside policy", issuer: "ca", mutate: []func(*cmapi.CertificateRequest){approved}, policy: "denied by every IssuancePolicy (team-a): dnsNames",
			reason: cmapi.CertificateRequestReasonFailed, says: "denied by every IssuancePolicy (team-a)", failed: true, event: crsign.ReasonPolicyDenied},
		{name: "the budget: pending, asked again", issuer: "ca", mutate: []func(*cmapi.CertificateRequest){approved}, wait: 3 * time.Second,
			reason: cmapi.CertificateRequestReasonPending, says: "issuance budget", requeue: true, event: crsign.ReasonRateLimited},
		{name: "issuer not found: pending, asked again", issuer: "nope", mutate: []func(*cmapi.CertificateRequest){approved},
			reason: cmapi.CertificateRequestReasonPending, says: `"nope" not found`, requeue: true, event: issuers.ReasonIssuerNotFound},
		{name: "SelfSigned needs the key: failed", issuer: "self", mutate: []func(*cmapi.CertificateRequest){approved},
			reason: cmapi.CertificateRequestReasonFailed, says: "use a CA ClusterIssuer", failed: true, event: issuers.ReasonIssuerNotSupported},
		{name: "ACME not served: failed", issuer: "acme", mutate: []func(*cmapi.CertificateRequest){approved},
			reason: cmapi.CertificateRequestReasonFailed, says: "ACME", failed: true, event: issuers.ReasonIssuerNotSupported},
		{name: "kind Issuer: failed", issuer: "ca", mutate: []func(*cmapi.CertificateRequest){approved, func(cr *cmapi.CertificateRequest) { cr.Spec.IssuerRef.Kind = cmapi.IssuerKind }},
			reason: cmapi.CertificateRequestReasonFailed, says: "kind ClusterIssuer", failed: true, event: issuers.ReasonIssuerNotSupported},
		{name: "already failed: left", issuer: "ca", mutate: []func(*cmapi.CertificateRequest){approved, func(cr *cmapi.CertificateRequest) {
			apiutil.SetCertificateRequestCondition(cr, cmapi.CertificateRequestConditionReady, cmmeta.ConditionFalse, cmapi.CertificateRequestReasonFailed, "earlier")
		}}, reason: cmapi.CertificateRequestReasonFailed, says: "earlier"},
		{name: "not owned: left", issuer: "ca", mutate: []func(*cmapi.CertificateRequest){approved}, fence: notOwner{}},
		{name: "another group: left", issuer: "ca", mutate: []func(*cmapi.CertificateRequest){approved, func(cr *cmapi.CertificateRequest) { cr.Spec.IssuerRef.Group = "cert-manager.io" }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			if key == nil {
				key = ec
			}
			cr := request(t, tc.issuer, key)
			for _, m := range tc.mutate {
				m(cr)
			}
			c := fake.NewClientBuilder().WithScheme(testbed.Scheme()).WithObjects(cr).WithStatusSubresource(&cmapi.CertificateRequest{}).Build()
			fc := fixture.NewFakeCluster(c)
			resolver, ca := hubWithIssuers(t)
			res, err := reconcileOnce(t, fc, crsign.Options{Issuers: resolver, Fence: tc.fence, Policy: fakePolicy{deny: tc.policy},
				Budget: fakeBudget{wait: tc.wait}}, "east", cr)
			if err != nil {
				t.Fatal(err)
			}
			got := &cmapi.CertificateRequest{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(cr), got); err != nil {
				t.Fatal(err)
			}
			checkOutcome(t, got, res, drain(fc), outcome{reason: tc.reason, says: tc.says, signed: tc.signed, failed: tc.failed, requeue: tc.requeue, event: tc.event})
			if len(got.Status.Certificate) > 0 {
				leaf, err := pki.DecodeX509CertificateBytes(got.Status.Certificate)
				if err != nil || leaf.CheckSignatureFrom(ca) != nil {
					t.Errorf("the certificate is not the hub CA's: %v", err)
				}
				if ok, _ := pki.PublicKeyMatchesCertificate(key.Public(), leaf); !ok {
					t.Error("the certificate is not for the CSR's key")
				}
			}
		})
	}
}

// reconcileOnce is one reconcile of cr in cluster clusterName by a fresh
// reconciler of opts (the Static fence replica-0 unless opts has one, a
// registry of its own) over fc, its clock at now.
func reconcileOnce(t *testing.T, fc *fixture.FakeCluster, opts crsign.Options, clusterName multicluster.ClusterName, cr *cmapi.CertificateRequest) (reconcile.Result, error) {
	t.Helper()
	if opts.Fence == nil {
		opts.Fence = fence.Static{Identity: "replica-0"}
	}
	opts.Registerer = prometheus.NewRegistry()
	r, err := crsign.NewReconciler(opts, clocktesting.NewFakeClock(now),
		func(context.Context, multicluster.ClusterName) (cluster.Cluster, error) { return fc, nil })
	if err != nil {
		t.Fatal(err)
	}
	return r.Reconcile(context.Background(), mcreconcile.Request{ClusterName: clusterName, Request: reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cr)}})
}

// outcome is what one reconcile should leave: Ready's reason (none when
// "") saying says, a certificate or not, failureTime set or not, a requeue
// or not, and the Events (none when "") including event.
type outcome struct {
	reason, says            string
	signed, failed, requeue bool
	event                   string
}

func checkOutcome(t *testing.T, got *cmapi.CertificateRequest, res reconcile.Result, events string, want outcome) {
	t.Helper()
	ready := apiutil.GetCertificateRequestCondition(got, cmapi.CertificateRequestConditionReady)
	switch {
	case want.reason == "" && ready != nil:
		t.Errorf("Ready %s/%s %q; want no condition", ready.Status, ready.Reason, ready.Message)
	case want.reason != "" && (ready == nil || ready.Reason != want.reason || !strings.Contains(ready.Message, want.says)):
		t.Errorf("Ready %+v; want reason %s saying %q", ready, want.reason, want.says)
	}
	if signed := len(got.Status.Certificate) > 0; signed != want.signed {
		t.Errorf("signed %t; want %t", signed, want.signed)
	}
	if (got.Status.FailureTime != nil) != want.failed {
		t.Errorf("failureTime %v; want set %t", got.Status.FailureTime, want.failed)
	}
	if (res.RequeueAfter > 0) != want.requeue {
		t.Errorf("requeue after %s; want one %t", res.RequeueAfter, want.requeue)
	}
	if (want.event == "") != (events == "") || !strings.Contains(events, want.event) {
		t.Errorf("Events %q; want %q", events, want.event)
	}
}

func drain(fc *fixture.FakeCluster) string {
	var out []string
	for {
		select {
		case e := <-fc.Recorder.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}
