package acme

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// acmeDNSFake is an acme-dns server: it records the updates it accepts
// from the one account it knows.
type acmeDNSFake struct {
	*httptest.Server
	mu      sync.Mutex
	updates []string // subdomain=txt
}

func newACMEDNSFake(t *testing.T) *acmeDNSFake {
	f := &acmeDNSFake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/update" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("X-Api-User") != "user-1" || r.Header.Get("X-Api-Key") != "key-1" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error": "forbidden"}`))
			return
		}
		var u struct{ Subdomain, Txt string }
		if err := json.NewDecoder(r.Body).Decode(&u); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.updates = append(f.updates, u.Subdomain+"="+u.Txt)
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"txt": u.Txt})
	}))
	t.Cleanup(f.Close)
	return f
}

// The acmeDNS solver: its accounts come from a hub Secret, its updates
// reach the acme-dns server with that account's credentials, a name
// without an account and a missing Secret are each a clear error.
func TestACMEDNSProvider(t *testing.T) {
	srv := newACMEDNSFake(t)
	accounts := `{"web.example.test": {"fulldomain": "d420c923.auth.example.test", "subdomain": "d420c923", "username": "user-1", "password": "key-1"},
	              "bad.example.test": {"subdomain": "x", "username": "user-1", "password": "wrong"}}`
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(secret("acme-dns", map[string][]byte{"accounts.json": []byte(accounts)})).Build()
	solver := func(secretName string) cmacme.ACMEChallengeSolver {
		return cmacme.ACMEChallengeSolver{DNS01: &cmacme.ACMEChallengeSolverDNS01{AcmeDNS: &cmacme.ACMEIssuerDNS01ProviderAcmeDNS{Host: srv.URL,
			AccountSecret: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: secretName}, Key: "accounts.json"}}}}
	}
	if err := checkSolver(solver("acme-dns"), 0); err != nil {
		t.Fatalf("acmeDNS refused: %v", err)
	}
	ctx := context.Background()
	p, err := newProvider(ctx, hub, ns, nil, solver("acme-dns"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Present(ctx, "web.example.test", "_acme-challenge.web.example.test.", "example.test.", "token-value"); err != nil {
		t.Fatalf("present: %v", err)
	}
	srv.mu.Lock()
	got := strings.Join(srv.updates, ",")
	srv.mu.Unlock()
	if got != "d420c923=token-value" {
		t.Errorf("acme-dns updates %q, want d420c923=token-value", got)
	}
	if err := p.CleanUp(ctx, "web.example.test", "_acme-challenge.web.example.test.", "example.test.", "token-value"); err != nil {
		t.Errorf("clean-up (acme-dns keeps records): %v", err)
	}
	if err := p.Present(ctx, "other.example.test", "_acme-challenge.other.example.test.", "example.test.", "v"); err == nil || !strings.Contains(err.Error(), "other.example.test") {
		t.Errorf("a name without an acme-dns account: %v, want an error naming it", err)
	}
	if err := p.Present(ctx, "bad.example.test", "_acme-challenge.bad.example.test.", "example.test.", "v"); err == nil {
		t.Error("the acme-dns server refused the credentials, Present did not say so")
	}
	if _, err := newProvider(ctx, hub, ns, nil, solver("missing")); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a missing account Secret: %v, want not found", err)
	}
}
