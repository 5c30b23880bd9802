// Package acme holds the ACME integration tier: real Pebble and real BIND
// (test/fixture/testbed/acmebed) on loopback.
package acme

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	"github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/rfc2136"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/cert-manager/cert-manager/third_party/forked/acme"
	"github.com/miekg/dns"

	"github.com/certhub/certhub/test/fixture/testbed/acmebed"
)

// The bed itself: an account, an order for a name in BIND's zone, its
// DNS-01 challenge presented with cert-manager's rfc2136 provider
// (TSIG-signed), validated by Pebble against BIND, the certificate fetched
// and verified against Pebble's root, and the TXT record gone afterwards.
// Pebble's default 5 % nonce rejection is on: the client retries badNonce.
func TestBedIssuesWithDNS01OverRFC2136(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bed, err := acmebed.Start(ctx, acmebed.Options{Env: []string{"PEBBLE_VA_NOSLEEP=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bed.Stop() }()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cl := &acme.Client{Key: key, DirectoryURL: bed.DirectoryURL, HTTPClient: bed.HTTPClient()}
	if _, err := cl.Register(ctx, &acme.Account{}, acme.AcceptTOS); err != nil {
		t.Fatalf("register: %v\n%s", err, bed.Logs())
	}
	name := "a." + bed.Zone
	order, err := cl.AuthorizeOrder(ctx, acme.DomainIDs(name))
	if err != nil {
		t.Fatalf("order: %v", err)
	}
	orderURL := order.URI
	provider, err := rfc2136.NewDNSProviderCredentials(bed.Nameserver, bed.TSIGAlgorithm, bed.TSIGKeyName, bed.TSIGSecret, rfc2136.WithNetwork("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	fqdn := "_acme-challenge." + name + "."
	for _, u := range order.AuthzURLs {
		z, err := cl.GetAuthorization(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		var chal *acme.Challenge
		for _, c := range z.Challenges {
			if c.Type == "dns-01" {
				chal = c
			}
		}
		if chal == nil {
			t.Fatalf("authorization %s offers no dns-01", u)
		}
		value, err := cl.DNS01ChallengeRecord(chal.Token)
		if err != nil {
			t.Fatal(err)
		}
		if err := provider.Present(name, fqdn, bed.Zone+".", value); err != nil {
			t.Fatalf("present: %v\n%s", err, bed.Logs())
		}
		if got := txt(t, bed.Nameserver, fqdn); len(got) != 1 || got[0] != value {
			t.Fatalf("TXT %s = %v after present, want [%s]", fqdn, got, value)
		}
		if _, err := cl.Accept(ctx, chal); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.WaitAuthorization(ctx, u); err != nil {
			t.Fatalf("authorization: %v\n%s", err, bed.Logs())
		}
		if err := provider.CleanUp(name, fqdn, bed.Zone+".", value); err != nil {
			t.Fatal(err)
		}
	}
	if got := txt(t, bed.Nameserver, fqdn); len(got) != 0 {
		t.Errorf("TXT %s = %v after clean-up, want none", fqdn, got)
	}

	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}, DNSNames: []string{name}}, leafKey)
	if err != nil {
		t.Fatal(err)
	}
	// Pebble answers finalize without a Location header, so the client
	// loses the order URL (reference/acme.md): poll the order by the URL
	// kept from AuthorizeOrder when it does.
	der, _, err := cl.CreateOrderCert(ctx, order.FinalizeURL, csr, true)
	if err != nil {
		o, werr := waitValid(ctx, cl, orderURL)
		if werr != nil {
			t.Fatalf("finalize: %v; order %s: %v", err, orderURL, werr)
		}
		if der, err = cl.FetchCert(ctx, o.CertURL, true); err != nil {
			t.Fatal(err)
		}
	}
	rootPEM, err := bed.Root(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("no root in %q", rootPEM)
	}
	leaf, err := x509.ParseCertificate(der[0])
	if err != nil {
		t.Fatal(err)
	}
	inter := x509.NewCertPool()
	for _, d := range der[1:] {
		c, err := x509.ParseCertificate(d)
		if err != nil {
			t.Fatal(err)
		}
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inter}); err != nil {
		t.Errorf("chain of %s does not verify against Pebble's root: %v\n%s", name, err, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der[0]}))
	}
}

func waitValid(ctx context.Context, cl *acme.Client, url string) (*acme.Order, error) {
	for {
		o, err := cl.GetOrder(ctx, url)
		if err != nil {
			return nil, err
		}
		switch o.Status {
		case acme.StatusValid:
			return o, nil
		case acme.StatusInvalid:
			return nil, &acme.OrderError{OrderURL: url, Status: o.Status, Problem: o.Error}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// txt asks BIND (over TCP, authoritative) for fqdn's TXT values.
func txt(t *testing.T, server, fqdn string) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(fqdn, dns.TypeTXT)
	c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
	in, _, err := c.Exchange(m, server)
	if err != nil {
		t.Fatalf("TXT %s @%s: %v", fqdn, server, err)
	}
	var out []string
	for _, rr := range in.Answer {
		if r, ok := rr.(*dns.TXT); ok {
			out = append(out, r.Txt...)
		}
	}
	return out
}

// pebbleRoots is Pebble's root as a pool.
func pebbleRoots(ctx context.Context, t *testing.T, ca *acmebed.Bed) *x509.CertPool {
	t.Helper()
	rootPEM, err := ca.Root(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	return roots
}

// verifyChain decodes chainPEM and reports (naming what) every name the
// leaf does not verify for against roots; it returns the chain.
func verifyChain(t *testing.T, what string, chainPEM []byte, roots *x509.CertPool, names ...string) []*x509.Certificate {
	t.Helper()
	chain, err := pki.DecodeX509CertificateChainBytes(chainPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := chain[0].Verify(x509.VerifyOptions{DNSName: n, Roots: roots, Intermediates: pool(chain[1:])}); err != nil {
			t.Errorf("%s: chain does not verify for %s against Pebble's root: %v", what, n, err)
		}
	}
	return chain
}

// pool holds certs.
func pool(certs []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}
