package acme

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/miekg/dns"

	"github.com/certhub/certhub/internal/dns01"
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
	hub := fakeHub(t, secret("acme-dns", map[string][]byte{"accounts.json": []byte(accounts)}))
	solver := func(secretName string) cmacme.ACMEChallengeSolver {
		return cmacme.ACMEChallengeSolver{DNS01: &cmacme.ACMEChallengeSolverDNS01{AcmeDNS: &cmacme.ACMEIssuerDNS01ProviderAcmeDNS{Host: srv.URL,
			AccountSecret: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: secretName}, Key: "accounts.json"}}}}
	}
	if err := checkSolver(solver("acme-dns"), 0); err != nil {
		t.Fatalf("acmeDNS refused: %v", err)
	}
	ctx := context.Background()
	p, err := newProvider(ctx, dns01.Env{Hub: hub, Namespace: ns, UserAgent: "certhub-test"}, solver("acme-dns"))
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
	if _, err := newProvider(ctx, dns01.Env{Hub: hub, Namespace: ns, UserAgent: "certhub-test"}, solver("missing")); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a missing account Secret: %v, want not found", err)
	}
}

// cloudflareFake is Cloudflare's v4 API for one zone, example.test (id
// z1): zone lookup by name, TXT record list, create and delete. It
// accepts only the API token "token-1".
type cloudflareFake struct {
	mu      sync.Mutex
	records map[string]string // id → name=content
	next    int
	authz   []string
}

func (f *cloudflareFake) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.authz = append(f.authz, r.Header.Get("Authorization"))
	reply := func(code int, result any) (*http.Response, error) {
		raw, _ := json.Marshal(map[string]any{"success": code < 300, "errors": []any{}, "result": result})
		rec := httptest.NewRecorder()
		rec.WriteHeader(code)
		_, _ = rec.Write(raw)
		resp := rec.Result()
		resp.Request = r // as a real transport sets it (godo's errors print it)
		return resp, nil
	}
	if r.URL.Host != "api.cloudflare.com" {
		return nil, fmt.Errorf("unexpected request to %s", r.URL)
	}
	if r.Header.Get("Authorization") != "Bearer token-1" {
		return reply(http.StatusForbidden, nil)
	}
	path := strings.TrimPrefix(r.URL.Path, "/client/v4")
	switch {
	case r.Method == http.MethodGet && path == "/zones":
		if r.URL.Query().Get("name") == "example.test" {
			return reply(http.StatusOK, []map[string]string{{"id": "z1", "name": "example.test"}})
		}
		return reply(http.StatusOK, []any{})
	case r.Method == http.MethodGet && path == "/zones/z1/dns_records":
		var out []map[string]string
		for id, rec := range f.records {
			name, content, _ := strings.Cut(rec, "=")
			if name == r.URL.Query().Get("name") {
				out = append(out, map[string]string{"id": id, "type": "TXT", "name": name, "content": content})
			}
		}
		return reply(http.StatusOK, out)
	case r.Method == http.MethodPost && path == "/zones/z1/dns_records":
		var rec struct{ Name, Content string }
		if err := json.NewDecoder(r.Body).Decode(&rec); err != nil {
			return reply(http.StatusBadRequest, nil)
		}
		f.next++
		id := fmt.Sprintf("r%d", f.next)
		f.records[id] = rec.Name + "=" + rec.Content
		return reply(http.StatusOK, map[string]string{"id": id})
	case r.Method == http.MethodDelete && strings.HasPrefix(path, "/zones/z1/dns_records/"):
		delete(f.records, strings.TrimPrefix(path, "/zones/z1/dns_records/"))
		return reply(http.StatusOK, map[string]string{})
	}
	return reply(http.StatusNotFound, nil)
}

// The cloudflare solver: its API token comes from a hub Secret; Present
// finds the zone through the API and adds the TXT record once, CleanUp
// removes it; a wrong token is a clear error.
func TestCloudflareProvider(t *testing.T) {
	api := &cloudflareFake{records: map[string]string{}}
	prev := http.DefaultTransport // cert-manager's provider uses a plain http.Client
	http.DefaultTransport = api
	t.Cleanup(func() { http.DefaultTransport = prev })

	hub := fakeHub(t,
		secret("cf", map[string][]byte{"token": []byte("token-1\n")}),
		secret("cf-wrong", map[string][]byte{"token": []byte("token-2")}))
	solver := func(secretName string) cmacme.ACMEChallengeSolver {
		return cmacme.ACMEChallengeSolver{DNS01: &cmacme.ACMEChallengeSolverDNS01{Cloudflare: &cmacme.ACMEIssuerDNS01ProviderCloudflare{
			APIToken: &cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: secretName}, Key: "token"}}}}
	}
	if err := checkSolver(solver("cf"), 0); err != nil {
		t.Fatalf("cloudflare refused: %v", err)
	}
	ctx := context.Background()
	p, err := newProvider(ctx, dns01.Env{Hub: hub, Namespace: ns, UserAgent: "certhub-test"}, solver("cf"))
	if err != nil {
		t.Fatal(err)
	}
	const fqdn = "_acme-challenge.web.example.test."
	presentTwiceAndCleanUp(t, p, fqdn, "map[r1:_acme-challenge.web.example.test=token-value]", func() string {
		api.mu.Lock()
		defer api.mu.Unlock()
		return fmt.Sprint(api.records)
	})
	wrong, err := newProvider(ctx, dns01.Env{Hub: hub, Namespace: ns, UserAgent: "certhub-test"}, solver("cf-wrong"))
	if err != nil {
		t.Fatal(err)
	}
	if err := wrong.Present(ctx, "web.example.test", fqdn, "", "v"); err == nil {
		t.Error("Cloudflare refused the token, Present did not say so")
	}
	if _, err := newProvider(ctx, dns01.Env{Hub: hub, Namespace: ns, UserAgent: "certhub-test"}, solver("missing")); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a missing token Secret: %v, want not found", err)
	}
}

// fakeZone is a DNS server on loopback authoritative for one zone: SOA
// (cert-manager's zone discovery), the TXT records set in it, NXDOMAIN
// for other names in the zone.
type fakeZone struct {
	zone string
	addr string
	mu   sync.Mutex
	txt  map[string]string // fqdn → value
}

func newFakeZone(t *testing.T, zone string) *fakeZone {
	t.Helper()
	z := &fakeZone{zone: zone, txt: map[string]string{}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z.addr = pc.LocalAddr().String()
	soa := &dns.SOA{Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
		Ns: "ns." + zone, Mbox: "admin." + zone, Serial: 1, Refresh: 60, Retry: 60, Expire: 600, Minttl: 60}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		q := r.Question[0]
		z.mu.Lock()
		v, ok := z.txt[q.Name]
		z.mu.Unlock()
		switch {
		case q.Name == zone && q.Qtype == dns.TypeSOA:
			m.Answer = append(m.Answer, soa)
		case ok && q.Qtype == dns.TypeTXT:
			m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{v}})
		case dns.IsSubDomain(zone, q.Name):
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, soa)
		default:
			m.Rcode = dns.RcodeRefused
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return z
}

// Present and CleanUp make the zone a dns01.Provider.
func (z *fakeZone) Present(_ context.Context, _, fqdn, _, value string) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.txt[fqdn] = value
	return nil
}

func (z *fakeZone) CleanUp(_ context.Context, _, fqdn, _, _ string) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	delete(z.txt, fqdn)
	return nil
}

func (z *fakeZone) records() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return len(z.txt)
}

// digitalOceanFake is DigitalOcean's v2 domain records API for
// example.test; it accepts only the token "do-1".
type digitalOceanFake struct {
	mu      sync.Mutex
	records map[int]string // id → relative name=data
	next    int
}

func (f *digitalOceanFake) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reply := func(code int, body any) (*http.Response, error) {
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", "application/json")
		rec.WriteHeader(code)
		if body != nil {
			_ = json.NewEncoder(rec).Encode(body)
		}
		resp := rec.Result()
		resp.Request = r // as a real transport sets it (godo's errors print it)
		return resp, nil
	}
	if r.URL.Host != "api.digitalocean.com" {
		return nil, fmt.Errorf("unexpected request to %s", r.URL)
	}
	if r.Header.Get("Authorization") != "Bearer do-1" {
		return reply(http.StatusUnauthorized, map[string]string{"id": "unauthorized", "message": "Unable to authenticate you"})
	}
	const base = "/v2/domains/example.test/records"
	switch {
	case r.Method == http.MethodGet && r.URL.Path == base:
		var out []map[string]any
		for id, rec := range f.records {
			name, data, _ := strings.Cut(rec, "=")
			out = append(out, map[string]any{"id": id, "type": "TXT", "name": name, "data": data})
		}
		return reply(http.StatusOK, map[string]any{"domain_records": out, "links": map[string]any{}, "meta": map[string]int{"total": len(out)}})
	case r.Method == http.MethodPost && r.URL.Path == base:
		var rec struct{ Type, Name, Data string }
		if err := json.NewDecoder(r.Body).Decode(&rec); err != nil {
			return reply(http.StatusBadRequest, nil)
		}
		f.next++
		f.records[f.next] = strings.TrimSuffix(strings.TrimSuffix(rec.Name, "."), ".example.test") + "=" + rec.Data
		return reply(http.StatusCreated, map[string]any{"domain_record": map[string]any{"id": f.next, "type": rec.Type, "name": rec.Name, "data": rec.Data}})
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, base+"/"):
		var id int
		_, _ = fmt.Sscan(strings.TrimPrefix(r.URL.Path, base+"/"), &id)
		delete(f.records, id)
		return reply(http.StatusNoContent, nil)
	}
	return reply(http.StatusNotFound, nil)
}

// The digitalocean solver: its token comes from a hub Secret; the zone is
// found through the configured nameservers; Present adds the TXT record
// once, CleanUp removes it; a refused token is a clear error.
func TestDigitalOceanProvider(t *testing.T) {
	api := &digitalOceanFake{records: map[int]string{}}
	prev := http.DefaultTransport // godo's OAuth2 client uses the default transport
	http.DefaultTransport = api
	t.Cleanup(func() { http.DefaultTransport = prev })
	nameserver := newFakeZone(t, "example.test.").addr

	hub := fakeHub(t,
		secret("do", map[string][]byte{"token": []byte("do-1")}), secret("do-wrong", map[string][]byte{"token": []byte("do-2")}))
	solver := func(secretName string) cmacme.ACMEChallengeSolver {
		return cmacme.ACMEChallengeSolver{DNS01: &cmacme.ACMEChallengeSolverDNS01{DigitalOcean: &cmacme.ACMEIssuerDNS01ProviderDigitalOcean{
			Token: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: secretName}, Key: "token"}}}}
	}
	if err := checkSolver(solver("do"), 0); err != nil {
		t.Fatalf("digitalocean refused: %v", err)
	}
	ctx := context.Background()
	p, err := newProvider(ctx, dns01.Env{Hub: hub, Namespace: ns, Nameservers: []string{nameserver}, UserAgent: "certhub-test"}, solver("do"))
	if err != nil {
		t.Fatal(err)
	}
	const fqdn = "_acme-challenge.web.example.test."
	presentTwiceAndCleanUp(t, p, fqdn, "map[1:_acme-challenge.web=token-value]", func() string {
		api.mu.Lock()
		defer api.mu.Unlock()
		return fmt.Sprint(api.records)
	})
	wrong, err := newProvider(ctx, dns01.Env{Hub: hub, Namespace: ns, Nameservers: []string{nameserver}, UserAgent: "certhub-test"}, solver("do-wrong"))
	if err != nil {
		t.Fatal(err)
	}
	if err := wrong.Present(ctx, "web.example.test", fqdn, "", "v"); err == nil {
		t.Error("DigitalOcean refused the token, Present did not say so")
	}
}

// presentTwiceAndCleanUp presents the TXT record of web.example.test twice
// (the second finds it and adds none: records then shows want) and
// removes it (records then shows none).
func presentTwiceAndCleanUp(t *testing.T, p dns01.Provider, fqdn, want string, records func() string) {
	t.Helper()
	ctx := context.Background()
	for range 2 {
		if err := p.Present(ctx, "web.example.test", fqdn, "", "token-value"); err != nil {
			t.Fatalf("present: %v", err)
		}
	}
	if got := records(); got != want {
		t.Errorf("records %s, want the one TXT record %s", got, want)
	}
	if err := p.CleanUp(ctx, "web.example.test", fqdn, "", "token-value"); err != nil {
		t.Fatalf("clean-up: %v", err)
	}
	if got := records(); got != "map[]" {
		t.Errorf("records %s after clean-up, want none", got)
	}
}
