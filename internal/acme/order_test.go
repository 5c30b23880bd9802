package acme

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
	"github.com/certhub/certhub/internal/dns01"
)

// fakeCA is an RFC 8555 server for one order of web.example.test with one
// dns-01 challenge. It reads the JWS payloads and checks no signature.
type fakeCA struct {
	*httptest.Server
	t *testing.T

	mu            sync.Mutex
	nonce         int
	orders        int  // new orders accepted
	limited       bool // answer new orders 429
	failChallenge bool // the validation fails
	authzFails    int  // answer this many authorization reads 500
	accepted      bool
	finalized     bool
	caKey         any
	caCert        *x509.Certificate
	leaf          []byte
}

func newFakeCA(t *testing.T) *fakeCA {
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fake CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), SubjectKeyId: []byte{9, 9, 9}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca := &fakeCA{t: t, caKey: key}
	if ca.caCert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.Server = httptest.NewTLSServer(http.HandlerFunc(ca.serve))
	t.Cleanup(ca.Close)
	return ca
}

func (ca *fakeCA) serve(w http.ResponseWriter, r *http.Request) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	ca.nonce++
	w.Header().Set("Replay-Nonce", base64.RawURLEncoding.EncodeToString([]byte{byte(ca.nonce), 1, 2, 3}))
	u := ca.URL
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	var payload struct{ CSR string }
	if r.Method == http.MethodPost {
		var jws struct{ Payload string }
		_ = json.NewDecoder(r.Body).Decode(&jws)
		raw, _ := base64.RawURLEncoding.DecodeString(jws.Payload)
		_ = json.Unmarshal(raw, &payload)
	}
	authz := "pending"
	switch {
	case ca.accepted && ca.failChallenge:
		authz = "invalid"
	case ca.accepted:
		authz = "valid"
	}
	order := func() map[string]any {
		status := "pending"
		switch {
		case ca.finalized:
			status = "valid"
		case authz == "valid":
			status = "ready"
		case authz == "invalid":
			status = "invalid"
		}
		o := map[string]any{"status": status, "identifiers": []map[string]string{{"type": "dns", "value": "web.example.test"}},
			"authorizations": []string{u + "/authz/1"}, "finalize": u + "/finalize/1"}
		if ca.finalized {
			o["certificate"] = u + "/cert/1"
		}
		return o
	}
	switch r.URL.Path {
	case "/dir":
		reply(http.StatusOK, map[string]string{"newNonce": u + "/nonce", "newAccount": u + "/acct", "newOrder": u + "/new-order"})
	case "/nonce":
		w.WriteHeader(http.StatusOK)
	case "/new-order":
		if ca.limited {
			w.Header().Set("Retry-After", "7")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"type":"urn:ietf:params:acme:error:rateLimited","detail":"too many new orders","status":429}`))
			return
		}
		ca.orders++
		w.Header().Set("Location", u+"/order/1")
		reply(http.StatusCreated, order())
	case "/order/1":
		w.Header().Set("Location", u+"/order/1")
		reply(http.StatusOK, order())
	case "/authz/1":
		if ca.authzFails > 0 {
			ca.authzFails--
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"type":"urn:ietf:params:acme:error:serverInternal","detail":"try again","status":500}`))
			return
		}
		ch := map[string]any{"type": "dns-01", "url": u + "/chall/1", "token": "tok-1", "status": authz}
		if authz == "invalid" {
			ch["error"] = map[string]any{"type": "urn:ietf:params:acme:error:unauthorized", "detail": "no TXT record found at _acme-challenge.web.example.test", "status": 403}
		}
		reply(http.StatusOK, map[string]any{"status": authz, "identifier": map[string]string{"type": "dns", "value": "web.example.test"}, "challenges": []any{ch}})
	case "/chall/1":
		ca.accepted = true
		reply(http.StatusOK, map[string]any{"type": "dns-01", "url": u + "/chall/1", "token": "tok-1", "status": "processing"})
	case "/finalize/1":
		der, err := base64.RawURLEncoding.DecodeString(payload.CSR)
		csr, perr := x509.ParseCertificateRequest(der)
		if err != nil || perr != nil {
			reply(http.StatusBadRequest, map[string]any{"type": "urn:ietf:params:acme:error:badCSR", "status": 400})
			return
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(42), DNSNames: csr.DNSNames, NotBefore: time.Now(), NotAfter: time.Now().Add(90 * 24 * time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if ca.leaf, err = x509.CreateCertificate(rand.Reader, tmpl, ca.caCert, csr.PublicKey, ca.caKey); err != nil {
			ca.t.Error(err)
		}
		ca.finalized = true
		w.Header().Set("Location", u+"/order/1")
		reply(http.StatusOK, order())
	case "/cert/1":
		w.Header().Set("Content-Type", "application/pem-certificate-chain")
		_ = pem.Encode(w, &pem.Block{Type: "CERTIFICATE", Bytes: ca.leaf})
		_ = pem.Encode(w, &pem.Block{Type: "CERTIFICATE", Bytes: ca.caCert.Raw})
	default:
		http.NotFound(w, r)
	}
}

// flakyProvider fails the first fails Presents with err.
type flakyProvider struct {
	dns01.Provider
	err          error
	fails        int
	cleanupFails int // fail this many clean-ups
}

func (f *flakyProvider) CleanUp(ctx context.Context, domain, fqdn, zone, value string) error {
	if f.cleanupFails > 0 {
		f.cleanupFails--
		return errors.New("DNS update failed: read udp 127.0.0.1:53: i/o timeout")
	}
	return f.Provider.CleanUp(ctx, domain, fqdn, zone, value)
}

func (f *flakyProvider) Present(ctx context.Context, domain, fqdn, zone, value string) error {
	if f.fails > 0 {
		f.fails--
		return fmt.Errorf("DNS update failed: %w", f.err)
	}
	return f.Provider.Present(ctx, domain, fqdn, zone, value)
}

// timeoutErr is a net.Error timing out, as a DNS exchange nobody answers.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "read udp 127.0.0.1:53: i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// newTestOrder is an unclaimed ACMEOrder of web.example.test for ClusterIssuer "le".
func newTestOrder(t *testing.T) *hubapi.ACMEOrder {
	t.Helper()
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{"web.example.test"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &hubapi.ACMEOrder{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0123"},
		Spec: hubapi.ACMEOrderSpec{IssuerName: "le", Cluster: "east", Namespace: "shop", Certificate: "web", DNSNames: []string{"web.example.test"}, Request: csr}}
}

// The order state machine, one step per reconcile against a fake CA and a
// fake DNS zone: a good order goes (claimed and ordered in the first step)
// Presenting → Propagating →
// Validating → Finalizing → Valid with its chain and the TXT record gone;
// a failed validation ends Errored/ChallengeFailed with the CA's detail,
// the TXT record gone too; a 429 on the new order pauses the issuer's
// orders in the budget and asks again after Retry-After; an order another
// replica holds is left alone until its claim expires, then taken over; a
// DNS server that does not answer is asked again within the same order, one
// that refuses the update fails it (PresentFailed).
func TestOrderSteps(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(ca *fakeCA, ord *hubapi.ACMEOrder, clk *clocktesting.FakeClock)
		states  []string // the states written, in order
		reason  string   // status.reason at the end
		detail  string   // in status.message
		paused  bool     // the budget's orders bucket is paused
		requeue time.Duration
		holder  string // status.holder after the first reconcile
		// present fails the first presentFails writes of a TXT record with presentErr.
		presentErr   error
		presentFails int
		cleanupFails int // the first clean-ups of the TXT record fail
	}{
		{name: "a good order", states: []string{hubapi.ACMEOrderOrdering, hubapi.ACMEOrderPresenting, hubapi.ACMEOrderPropagating, hubapi.ACMEOrderValidating, hubapi.ACMEOrderFinalizing, hubapi.ACMEOrderValid}},
		{name: "the validation fails", setup: func(ca *fakeCA, _ *hubapi.ACMEOrder, _ *clocktesting.FakeClock) { ca.failChallenge = true },
			states: []string{hubapi.ACMEOrderOrdering, hubapi.ACMEOrderPresenting, hubapi.ACMEOrderPropagating, hubapi.ACMEOrderValidating, hubapi.ACMEOrderErrored}, reason: ReasonChallengeFailed, detail: "no TXT record found"},
		{name: "the CA rate limits new orders", setup: func(ca *fakeCA, _ *hubapi.ACMEOrder, _ *clocktesting.FakeClock) { ca.limited = true },
			states: []string{hubapi.ACMEOrderOrdering}, paused: true, requeue: 7 * time.Second},
		{name: "the authorizations cannot be read at first: the same order goes on", setup: func(ca *fakeCA, _ *hubapi.ACMEOrder, _ *clocktesting.FakeClock) { ca.authzFails = 2 },
			states: []string{hubapi.ACMEOrderOrdering, hubapi.ACMEOrderPresenting, hubapi.ACMEOrderPropagating, hubapi.ACMEOrderValidating, hubapi.ACMEOrderFinalizing, hubapi.ACMEOrderValid}},
		{name: "the TXT clean-up fails at first: tried again until the record is gone", cleanupFails: 2,
			states: []string{hubapi.ACMEOrderOrdering, hubapi.ACMEOrderPresenting, hubapi.ACMEOrderPropagating, hubapi.ACMEOrderValidating, hubapi.ACMEOrderFinalizing, hubapi.ACMEOrderValid}},
		{name: "the TXT clean-up of a failed order fails at first", cleanupFails: 2, setup: func(ca *fakeCA, _ *hubapi.ACMEOrder, _ *clocktesting.FakeClock) { ca.failChallenge = true },
			states: []string{hubapi.ACMEOrderOrdering, hubapi.ACMEOrderPresenting, hubapi.ACMEOrderPropagating, hubapi.ACMEOrderValidating, hubapi.ACMEOrderErrored}, reason: ReasonChallengeFailed, detail: "no TXT record found"},
		{name: "the DNS server does not answer, then does", presentErr: timeoutErr{}, presentFails: 2,
			states: []string{hubapi.ACMEOrderOrdering, hubapi.ACMEOrderPresenting, hubapi.ACMEOrderPropagating, hubapi.ACMEOrderValidating, hubapi.ACMEOrderFinalizing, hubapi.ACMEOrderValid}},
		{name: "the DNS server refuses the update", presentErr: errors.New("DNS update failed. Server replied: NOTAUTH"), presentFails: 1,
			states: []string{hubapi.ACMEOrderOrdering, hubapi.ACMEOrderPresenting, hubapi.ACMEOrderErrored}, reason: ReasonPresentFailed, detail: "NOTAUTH"},
		{name: "another replica holds it", setup: func(_ *fakeCA, ord *hubapi.ACMEOrder, clk *clocktesting.FakeClock) {
			ord.Status = hubapi.ACMEOrderStatus{State: hubapi.ACMEOrderOrdering, Holder: "replica-1", HeldUntil: &metav1.Time{Time: clk.Now().Add(10 * time.Second)}}
		}, states: []string{hubapi.ACMEOrderOrdering}, holder: "replica-1", requeue: 10*time.Second + 100*time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ca := newFakeCA(t)
			zone := newFakeZone(t, "example.test.")
			clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second)) // status times are whole seconds
			s, hub := newTestService(t, ca.Server, clk, func(o *Options) {
				o.DNS01Nameservers = []string{zone.addr}
				dns := &flakyProvider{Provider: zone, err: tc.presentErr, fails: tc.presentFails, cleanupFails: tc.cleanupFails}
				o.newProvider = func(cmacme.ACMEChallengeSolver) (dns01.Provider, error) { return dns, nil }
			})
			ord := newTestOrder(t)
			ord.CreationTimestamp = metav1.NewTime(clk.Now()) // as the API server sets it; the fake client does not
			status := ord.Status
			if tc.setup != nil {
				tc.setup(ca, ord, clk)
				status = ord.Status
			}
			ctx := context.Background()
			if err := hub.Create(ctx, ord); err != nil {
				t.Fatal(err)
			}
			ord.Status = status
			if err := hub.Status().Update(ctx, ord); err != nil {
				t.Fatal(err)
			}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ord)}
			var seen []string
			var res ctrl.Result
			for range 16 {
				var err error
				if res, err = s.reconcileOrder(ctx, req); err != nil {
					t.Logf("step after %v: %v (asked again, as the controller would)", seen, err)
				}
				got := &hubapi.ACMEOrder{}
				if err := hub.Get(ctx, req.NamespacedName, got); err != nil {
					t.Fatal(err)
				}
				if st := got.Status.State; st != "" && (len(seen) == 0 || seen[len(seen)-1] != st) {
					seen = append(seen, st)
				}
				if tc.holder != "" && got.Status.Holder != tc.holder {
					t.Fatalf("holder %q, want %q", got.Status.Holder, tc.holder)
				}
				ord = got
				if (done(got) && !presented(got)) || tc.paused || tc.holder != "" {
					break
				}
			}
			if strings.Join(seen, " → ") != strings.Join(tc.states, " → ") {
				t.Errorf("states %v, want %v", seen, tc.states)
			}
			if ord.Status.Reason != tc.reason || !strings.Contains(ord.Status.Message, tc.detail) {
				t.Errorf("reason %q message %q, want %q with %q", ord.Status.Reason, ord.Status.Message, tc.reason, tc.detail)
			}
			if tc.requeue != 0 && (res.RequeueAfter-tc.requeue).Abs() > 200*time.Millisecond {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.requeue)
			}
			if n := zone.records(); n != 0 {
				t.Errorf("%d TXT records left", n)
			}
			if ord.Status.State == hubapi.ACMEOrderValid {
				chain, err := pki.DecodeX509CertificateChainBytes(ord.Status.Certificate)
				if err != nil || len(chain) != 2 || chain[0].DNSNames[0] != "web.example.test" {
					t.Errorf("chain %v (%v), want the leaf for web.example.test and the CA", chain, err)
				}
			}
			if ca.orders > 1 {
				t.Errorf("%d orders at the CA, want at most one", ca.orders)
			}
			cm := &corev1.ConfigMap{}
			err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: LedgerPrefix + "le"}, cm)
			paused := err == nil && strings.Contains(cm.Data[budget.LedgerKey], `"pausedUntil"`)
			if paused != tc.paused {
				t.Errorf("orders paused in the budget: %t, want %t", paused, tc.paused)
			}
			if tc.holder != "" { // the claim expires: this replica takes the same order over
				clk.Step(11 * time.Second)
				for range 2 { // the CA's order (stored at once), then its authorizations
					if _, err := s.reconcileOrder(ctx, req); err != nil {
						t.Fatal(err)
					}
				}
				got := &hubapi.ACMEOrder{}
				if err := hub.Get(ctx, req.NamespacedName, got); err != nil {
					t.Fatal(err)
				}
				if got.Status.Holder != "replica-0" || got.Status.State != hubapi.ACMEOrderPresenting || ca.orders != 1 {
					t.Errorf("after the claim expired: holder %q state %s, %d orders; want replica-0 to have resumed it", got.Status.Holder, got.Status.State, ca.orders)
				}
			}
		})
	}
}

// A deleted order (by hand, or after its retention) keeps its finalizer
// until its TXT records are gone, trying again after a failed clean-up.
func TestDeletedOrderRemovesItsRecords(t *testing.T) {
	ca := newFakeCA(t)
	zone := newFakeZone(t, "example.test.")
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	dns := &flakyProvider{Provider: zone, cleanupFails: 1}
	s, hub := newTestService(t, ca.Server, clk, func(o *Options) {
		o.DNS01Nameservers = []string{zone.addr}
		o.newProvider = func(cmacme.ACMEChallengeSolver) (dns01.Provider, error) { return dns, nil }
	})
	ctx := context.Background()
	ord := newTestOrder(t)
	ord.Finalizers = []string{hubapi.TXTCleanupFinalizer}
	if err := hub.Create(ctx, ord); err != nil {
		t.Fatal(err)
	}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ord)}
	for got := ord; got.Status.State != hubapi.ACMEOrderPropagating; {
		if _, err := s.reconcileOrder(ctx, req); err != nil {
			t.Fatal(err)
		}
		got = &hubapi.ACMEOrder{}
		if err := hub.Get(ctx, req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
	}
	if zone.records() == 0 {
		t.Fatal("no TXT record written")
	}
	if err := hub.Delete(ctx, ord); err != nil {
		t.Fatal(err)
	}
	res, err := s.reconcileOrder(ctx, req)
	if err != nil || res.RequeueAfter != cleanupRetry || zone.records() == 0 {
		t.Fatalf("a failed clean-up: requeue %s (%v), %d records; want it kept and tried again after %s", res.RequeueAfter, err, zone.records(), cleanupRetry)
	}
	if err := hub.Get(ctx, req.NamespacedName, &hubapi.ACMEOrder{}); err != nil {
		t.Fatalf("the order went before its records: %v", err)
	}
	if _, err := s.reconcileOrder(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := zone.records(); n != 0 {
		t.Errorf("%d TXT records left", n)
	}
	if err := hub.Get(ctx, req.NamespacedName, &hubapi.ACMEOrder{}); !apierrors.IsNotFound(err) {
		t.Errorf("the order is still there (%v)", err)
	}
}
