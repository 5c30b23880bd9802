package acme

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	acmeapi "github.com/cert-manager/cert-manager/third_party/forked/acme"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// ariServer is an ACME directory with a renewalInfo endpoint whose window
// the test sets; it counts the renewalInfo requests.
type ariServer struct {
	*httptest.Server
	mu           sync.Mutex
	start, end   time.Time
	retryAfter   int
	requests     int
	withoutARI   bool
	lastCertPath string
}

func newARIServer(t *testing.T) *ariServer {
	a := &ariServer{}
	a.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch {
		case r.URL.Path == "/dir":
			dir := map[string]string{"newNonce": a.URL + "/nonce", "newAccount": a.URL + "/acct", "newOrder": a.URL + "/order"}
			if !a.withoutARI {
				dir["renewalInfo"] = a.URL + "/renewalInfo"
			}
			_ = json.NewEncoder(w).Encode(dir)
		case strings.HasPrefix(r.URL.Path, "/renewalInfo/"):
			a.requests++
			a.lastCertPath = strings.TrimPrefix(r.URL.Path, "/renewalInfo/")
			w.Header().Set("Retry-After", itoa(a.retryAfter))
			_ = json.NewEncoder(w).Encode(map[string]any{"suggestedWindow": map[string]time.Time{"start": a.start, "end": a.end}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.Close)
	return a
}

func itoa(n int) string { return big.NewInt(int64(n)).String() }

func (a *ariServer) set(start, end time.Time, retryAfter int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.start, a.end, a.retryAfter = start, end, retryAfter
}

func (a *ariServer) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.requests
}

// leaf is a certificate with an authority key identifier, as a CA issues.
func leaf(t *testing.T, serial int64) *x509.Certificate {
	t.Helper()
	key, err := pki.GenerateECPrivateKey(256)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "web"}, AuthorityKeyId: []byte{1, 2, 3, 4},
		NotBefore: time.Now(), NotAfter: time.Now().Add(90 * 24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newARIService is a Service whose ClusterIssuer "le" has a registered
// account at srv.
func newARIService(t *testing.T, srv *ariServer, clk *clocktesting.FakeClock) *Service {
	t.Helper()
	s, _ := newTestService(t, srv.Server, clk, func(o *Options) { o.RenewalInfoInterval = time.Hour })
	return s
}

// newTestService is a Service with a fake hub whose ClusterIssuer "le"
// (an rfc2136 solver, ns "certhub") has a registered account at the ACME
// server srv; tune adjusts the options before their defaults.
func newTestService(t *testing.T, srv *httptest.Server, clk *clocktesting.FakeClock, tune func(*Options)) (*Service, client.Client) {
	t.Helper()
	key, err := pki.GenerateRSAPrivateKey(2048)
	if err != nil {
		t.Fatal(err)
	}
	ci := issuer("acct", "", false)
	ci.Spec.ACME.Server = srv.URL + "/dir"
	ci.Spec.ACME.CABundle = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ci.Spec.ACME.Solvers = []cmacme.ACMEChallengeSolver{{DNS01: &cmacme.ACMEChallengeSolverDNS01{RFC2136: &cmacme.ACMEIssuerDNS01ProviderRFC2136{Nameserver: "127.0.0.1:53"}}}}
	ci.Status.ACME = &cmacme.ACMEIssuerStatus{URI: srv.URL + "/acct/1", LastPrivateKeyHash: keyHash(key)}
	hub := fakeHub(t, ci, secret("acct", map[string][]byte{"tls.key": pki.EncodePKCS1PrivateKey(key)}))
	opts := Options{Namespace: ns, Identity: "replica-0", Clock: clk, Registerer: prometheus.NewRegistry()}
	if tune != nil {
		tune(&opts)
	}
	opts.defaults()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		t.Fatal(err)
	}
	return &Service{hub: hub, live: hub, opts: opts, metrics: m, clients: clientCache{m: map[string]*acmeapi.Client{}},
		ariSlots: make(chan struct{}, 2), ari: ariCache{m: map[string]*ariEntry{}}}, hub
}

// RenewalTime never waits for the CA: the first call starts a fetch and
// says nothing; the answer (a point fixed in the window) wakes the
// Certificate; it is asked again after min(Retry-After, the interval); a
// moved window wakes it again; a CA without ARI gives nothing.
func TestRenewalTimeFromTheCAsWindow(t *testing.T) {
	srv := newARIServer(t)
	clk := clocktesting.NewFakeClock(time.Now())
	s := newARIService(t, srv, clk)
	woken := make(chan string, 10)
	s.Subscribe(func(cluster, namespace, name string) { woken <- cluster + "/" + namespace + "/" + name })
	ref := cmmeta.IssuerReference{Name: "le", Kind: cmapi.ClusterIssuerKind}
	cert := leaf(t, 42)
	ctx := context.Background()
	ask := func() (time.Time, bool, time.Time) {
		a := s.RenewalTime(ctx, "east", "shop", "web", ref, cert)
		return a.At, !a.At.IsZero(), a.Recheck
	}
	awaitWake := func(what string) {
		t.Helper()
		select {
		case got := <-woken:
			if got != "east/shop/web" {
				t.Fatalf("woke %q", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("not woken: %s", what)
		}
	}

	start := clk.Now().Add(10 * 24 * time.Hour).Truncate(time.Second)
	end := start.Add(48 * time.Hour)
	srv.set(start, end, 600)
	if _, ok, _ := ask(); ok {
		t.Fatal("an answer before the CA was asked")
	}
	awaitWake("first answer")
	at, ok, recheck := ask()
	if !ok || at.Before(start) || !at.Before(end) {
		t.Fatalf("renewal time %s (ok %t), want in [%s, %s)", at, ok, start, end)
	}
	if want := clk.Now().Add(600 * time.Second); !recheck.Equal(want) {
		t.Errorf("recheck at %s, want the CA's Retry-After (%s)", recheck, want)
	}
	if id, _ := acmeapi.CertificateARIID(cert); srv.lastCertPath != id {
		t.Errorf("asked for %q, want the certificate's ARI identifier %q", srv.lastCertPath, id)
	}
	if got := s.RenewalTime(ctx, "east", "shop", "web", ref, cert).Status; got == nil || got.SuggestedWindow == nil ||
		!got.SuggestedWindow.Start.Equal(&metav1.Time{Time: start}) || !got.SuggestedWindow.End.Equal(&metav1.Time{Time: end}) ||
		!got.NextCheck.Time.Equal(clk.Now().Add(600*time.Second).Truncate(time.Second)) || got.LastError != "" {
		t.Errorf("status.acme.ari %+v; want the window [%s, %s), next check at the Retry-After", got, start, end)
	}
	if again := s.RenewalTime(ctx, "west", "shop", "web", ref, cert).At; !again.Equal(at) {
		t.Errorf("the same certificate got %s, then %s: the point in the window must be fixed", at, again)
	}
	if n := srv.count(); n != 1 {
		t.Errorf("%d renewalInfo requests before Retry-After passed, want 1", n)
	}

	// Retry-After passed, the window moved into the past (after the
	// certificate was issued: a revocation event): woken, renew now.
	clk.Step(3 * time.Hour)
	srv.set(clk.Now().Add(-2*time.Hour), clk.Now().Add(-time.Hour), 600)
	clk.Step(601 * time.Second)
	if at2, _, _ := ask(); !at2.Equal(at) {
		t.Errorf("a stale answer must be kept while it is refreshed: %s, want %s", at2, at)
	}
	awaitWake("moved window")
	if at3, ok, _ := ask(); !ok || !at3.Before(clk.Now()) {
		t.Errorf("renewal time %s after the window moved into the past, want before now (%s)", at3, clk.Now())
	}

	// Not an ACME issuer, or a CA without ARI: nothing.
	// A window that opens before the certificate was issued describes an
	// earlier one (cert-manager ignores it too): no advice, the spec holds.
	srv.set(cert.NotBefore.Add(-time.Hour), cert.NotBefore.Add(time.Hour), 600)
	clk.Step(601 * time.Second)
	ask()
	awaitWake("a window from before the certificate")
	if at4, ok, _ := ask(); ok {
		t.Errorf("advice %s from a window opening before the certificate was issued", at4)
	}

	if a := s.RenewalTime(ctx, "east", "shop", "web", cmmeta.IssuerReference{Name: "ca", Kind: cmapi.IssuerKind}, cert); !a.At.IsZero() || a.Status != nil {
		t.Error("a namespaced Issuer got ARI advice")
	}
	srv.mu.Lock()
	srv.withoutARI = true
	srv.mu.Unlock()
	s.clients = clientCache{m: map[string]*acmeapi.Client{}} // a fresh directory
	other := leaf(t, 43)
	_ = s.RenewalTime(ctx, "east", "shop", "api", ref, other)
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		id, _ := acmeapi.CertificateARIID(other)
		e := s.ari.m[id]
		return e != nil && !e.fetching, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if a := s.RenewalTime(ctx, "east", "shop", "api", ref, other); !a.At.IsZero() || a.Status != nil || !a.Recheck.Equal(clk.Now().Add(time.Hour)) {
		t.Errorf("a CA without ARI: %+v; want no advice and no status.acme, asked again after the interval", a)
	}
}

// The point in a window is inside it and fixed by the identifier; the
// identifiers of different certificates spread over the window.
func TestPointInWindow(t *testing.T) {
	start := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(48 * time.Hour)
	seen := map[time.Time]bool{}
	for i := range 50 {
		id := "aki." + itoa(i)
		p := pointInWindow(id, start, end)
		if p.Before(start) || !p.Before(end) {
			t.Fatalf("%s: %s outside [%s, %s)", id, p, start, end)
		}
		if !pointInWindow(id, start, end).Equal(p) {
			t.Fatalf("%s: not fixed", id)
		}
		seen[p] = true
	}
	if len(seen) < 45 {
		t.Errorf("50 identifiers chose %d distinct times: not spread", len(seen))
	}
}

// Only a renewal's first attempt replaces the current certificate (ARI),
// and only a certificate that names its issuer's key.
func TestReplacesID(t *testing.T) {
	cert := leaf(t, 7)
	noAKI := leaf(t, 8)
	noAKI.AuthorityKeyId = nil
	want, _ := acmeapi.CertificateARIID(cert)
	for name, tc := range map[string]struct {
		current *x509.Certificate
		attempt int
		want    string
	}{
		"first issuance":                {nil, 0, ""},
		"renewal":                       {cert, 0, want},
		"renewal, after a failed order": {cert, 1, ""},
		"a certificate without its AKI": {noAKI, 0, ""},
	} {
		if got := replacesID(tc.current, tc.attempt); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

// fakeHub is a fake hub client holding objs, with certhub's and
// cert-manager's types and ACMEOrder's status subresource.
func fakeHub(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, cmapi.AddToScheme, hubapi.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&hubapi.ACMEOrder{}).WithObjects(objs...).Build()
}
