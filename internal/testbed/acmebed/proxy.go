package acmebed

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Proxy is an HTTPS reverse proxy in front of Pebble (which has no rate
// limits) that counts the new orders reaching it and can answer some with
// 429 rateLimited, as a CA's limits would.
type Proxy struct {
	// DirectoryURL is Pebble's directory through the proxy; ServerCA
	// trusts the proxy's listener (a ClusterIssuer's caBundle).
	DirectoryURL string
	ServerCA     []byte

	srv    *httptest.Server
	inject func(attempt int) (retryAfter time.Duration, limited bool)

	mu       sync.Mutex
	domains  map[string]time.Duration // registered domains answered 429 (LimitDomain)
	attempts int
	orders   []time.Time // new orders Pebble accepted, when
	limited  int
}

// StartProxy starts a Proxy. inject, when set, is asked for every new
// order request (attempt counts from 1) whether to answer it 429 with
// Retry-After instead of passing it on.
func (b *Bed) StartProxy(inject func(attempt int) (retryAfter time.Duration, limited bool)) (*Proxy, error) {
	target, err := url.Parse(b.DirectoryURL)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.ServerCAs)
	p := &Proxy{inject: inject}
	rp := &httputil.ReverseProxy{
		// Pebble builds every URL it answers with from the request's Host:
		// keeping the proxy's makes the client stay on the proxy.
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: target.Scheme, Host: target.Host})
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		ModifyResponse: func(res *http.Response) error {
			if res.Request.Method == http.MethodPost && res.Request.URL.Path == "/order-plz" && res.StatusCode == http.StatusCreated {
				p.mu.Lock()
				p.orders = append(p.orders, time.Now())
				p.mu.Unlock()
			}
			return nil
		},
	}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/order-plz" {
			if domain, wait, ok := p.limitedDomain(r); ok {
				// As Let's Encrypt words its per-registered-domain limit.
				p.rateLimited(w, wait, fmt.Sprintf(`too many certificates (50) already issued for \"%s\" in the last 168h0m0s, retry after %s: see https://letsencrypt.org/docs/rate-limits/#new-certificates-per-registered-domain`,
					domain, time.Now().Add(wait).UTC().Format("2006-01-02 15:04:05 UTC")))
				return
			}
			p.mu.Lock()
			p.attempts++
			n := p.attempts
			p.mu.Unlock()
			if p.inject != nil {
				if wait, limited := p.inject(n); limited {
					p.rateLimited(w, wait, "injected by the test proxy: too many new orders")
					return
				}
			}
		}
		rp.ServeHTTP(w, r)
	}))
	p.DirectoryURL = p.srv.URL + "/dir"
	p.ServerCA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	return p, nil
}

// rateLimited answers 429 rateLimited with Retry-After wait and detail
// (JSON-escaped already), and counts it.
func (p *Proxy) rateLimited(w http.ResponseWriter, wait time.Duration, detail string) {
	p.mu.Lock()
	p.limited++
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = fmt.Fprintf(w, `{"type":"urn:ietf:params:acme:error:rateLimited","detail":"%s","status":429}`, detail)
}

// LimitDomain answers every new order naming domain or a name below it
// 429, as Let's Encrypt's per-registered-domain limit does, with
// Retry-After retryAfter (counted in Limited, not in inject's attempts).
func (p *Proxy) LimitDomain(domain string, retryAfter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.domains == nil {
		p.domains = map[string]time.Duration{}
	}
	p.domains[domain] = retryAfter
}

// limitedDomain reads the identifiers of a new order request (the JWS
// payload, not verified: Pebble does that) and reports a limited domain
// among them; the body is left for the proxy to pass on.
func (p *Proxy) limitedDomain(r *http.Request) (string, time.Duration, bool) {
	p.mu.Lock()
	domains := maps.Clone(p.domains)
	p.mu.Unlock()
	if len(domains) == 0 {
		return "", 0, false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return "", 0, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var jws struct {
		Payload string `json:"payload"`
	}
	var order struct {
		Identifiers []struct{ Value string } `json:"identifiers"`
	}
	if json.Unmarshal(body, &jws) != nil {
		return "", 0, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(jws.Payload)
	if err != nil || json.Unmarshal(raw, &order) != nil {
		return "", 0, false
	}
	for _, id := range order.Identifiers {
		for d, wait := range domains {
			if id.Value == d || strings.HasSuffix(id.Value, "."+d) {
				return d, wait, true
			}
		}
	}
	return "", 0, false
}

// Orders returns when Pebble accepted each new order that came through.
func (p *Proxy) Orders() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.orders...)
}

// Limited is how many new order requests the proxy answered 429.
func (p *Proxy) Limited() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limited
}

// Close stops the proxy.
func (p *Proxy) Close() { p.srv.Close() }
