package acme

import (
	"crypto/x509"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certhub/certhub/internal/issuers"
)

func TestChooseSolver(t *testing.T) {
	rfc := &cmacme.ACMEChallengeSolverDNS01{RFC2136: &cmacme.ACMEIssuerDNS01ProviderRFC2136{Nameserver: "127.0.0.1"}}
	sel := func(names, zones []string, labels map[string]string) cmacme.ACMEChallengeSolver {
		return cmacme.ACMEChallengeSolver{DNS01: rfc, Selector: &cmacme.CertificateDNSNameSelector{DNSNames: names, DNSZones: zones, MatchLabels: labels}}
	}
	plain := cmacme.ACMEChallengeSolver{DNS01: rfc}
	team := map[string]string{"team": "a"}
	cases := []struct {
		name    string
		solvers []cmacme.ACMEChallengeSolver
		dnsName string
		labels  map[string]string
		want    int
		wantErr string
	}{
		{name: "no selector serves everything", solvers: []cmacme.ACMEChallengeSolver{plain}, dnsName: "a.example.test", want: 0},
		{name: "a zone beats no selector", solvers: []cmacme.ACMEChallengeSolver{plain, sel(nil, []string{"example.test"}, nil)}, dnsName: "a.example.test", want: 1},
		{name: "the longest zone wins", solvers: []cmacme.ACMEChallengeSolver{sel(nil, []string{"example.test"}, nil), sel(nil, []string{"b.example.test"}, nil)}, dnsName: "a.b.example.test", want: 1},
		{name: "a zone is matched on label boundaries", solvers: []cmacme.ACMEChallengeSolver{sel(nil, []string{"ample.test"}, nil)}, dnsName: "a.example.test", wantErr: ReasonNoSolver},
		{name: "the zone itself", solvers: []cmacme.ACMEChallengeSolver{sel(nil, []string{"example.test."}, nil)}, dnsName: "example.test", want: 0},
		{name: "a wildcard's zone is its base", solvers: []cmacme.ACMEChallengeSolver{sel(nil, []string{"apps.example.test"}, nil)}, dnsName: "*.apps.example.test", want: 0},
		{name: "an exact name beats the longest zone", solvers: []cmacme.ACMEChallengeSolver{sel(nil, []string{"a.example.test"}, nil), sel([]string{"a.example.test"}, nil, nil)}, dnsName: "a.example.test", want: 1},
		{name: "labels must all match", solvers: []cmacme.ACMEChallengeSolver{sel(nil, nil, team)}, dnsName: "a.example.test", labels: map[string]string{"team": "b"}, wantErr: ReasonNoSolver},
		{name: "matching labels beat no selector", solvers: []cmacme.ACMEChallengeSolver{plain, sel(nil, nil, team)}, dnsName: "a.example.test", labels: team, want: 1},
		{name: "the first of equals", solvers: []cmacme.ACMEChallengeSolver{plain, plain}, dnsName: "a.example.test", want: 0},
		{name: "no solver at all", dnsName: "a.example.test", wantErr: ReasonNoSolver},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chooseSolver(tc.solvers, tc.dnsName, tc.labels)
			if tc.wantErr != "" {
				if se := (*solverError)(nil); !errors.As(err, &se) || se.reason != tc.wantErr {
					t.Fatalf("err = %v, want reason %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("chooseSolver = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestCheckSolverNamesWhatTheHubSupports(t *testing.T) {
	dns := func(d cmacme.ACMEChallengeSolverDNS01) cmacme.ACMEChallengeSolver {
		return cmacme.ACMEChallengeSolver{DNS01: &d}
	}
	cases := map[string]struct {
		s      cmacme.ACMEChallengeSolver
		reason string // "": served
	}{
		"http01":             {cmacme.ACMEChallengeSolver{HTTP01: &cmacme.ACMEChallengeSolverHTTP01{}}, ReasonUnsupportedSolver},
		"empty":              {cmacme.ACMEChallengeSolver{}, ReasonUnsupportedSolver},
		"dns01, no provider": {dns(cmacme.ACMEChallengeSolverDNS01{}), ReasonUnsupportedSolver},
		"two providers": {dns(cmacme.ACMEChallengeSolverDNS01{Route53: &cmacme.ACMEIssuerDNS01ProviderRoute53{},
			RFC2136: &cmacme.ACMEIssuerDNS01ProviderRFC2136{}}), ReasonSolverConfig},
		"webhook without a solver name": {dns(cmacme.ACMEChallengeSolverDNS01{Webhook: &cmacme.ACMEIssuerDNS01ProviderWebhook{GroupName: "acme.example.com"}}), ReasonSolverConfig},
		"webhook":                       {dns(cmacme.ACMEChallengeSolverDNS01{Webhook: &cmacme.ACMEIssuerDNS01ProviderWebhook{GroupName: "acme.example.com", SolverName: "bind"}}), ""},
		"rfc2136":                       {dns(cmacme.ACMEChallengeSolverDNS01{RFC2136: &cmacme.ACMEIssuerDNS01ProviderRFC2136{}}), ""},
		"route53":                       {dns(cmacme.ACMEChallengeSolverDNS01{Route53: &cmacme.ACMEIssuerDNS01ProviderRoute53{}}), ""},
		"cloudDNS":                      {dns(cmacme.ACMEChallengeSolverDNS01{CloudDNS: &cmacme.ACMEIssuerDNS01ProviderCloudDNS{}}), ""},
		"azureDNS":                      {dns(cmacme.ACMEChallengeSolverDNS01{AzureDNS: &cmacme.ACMEIssuerDNS01ProviderAzureDNS{}}), ""},
		"akamai":                        {dns(cmacme.ACMEChallengeSolverDNS01{Akamai: &cmacme.ACMEIssuerDNS01ProviderAkamai{}}), ""},
	}
	for name, tc := range cases {
		err := checkSolver(tc.s, 2)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("%s: %v, want served", name, err)
			}
			continue
		}
		se := (*solverError)(nil)
		if !errors.As(err, &se) || se.reason != tc.reason {
			t.Errorf("%s: err = %v, want %s", name, err, tc.reason)
			continue
		}
		if !strings.Contains(se.message, "solver 2") || (tc.reason == ReasonUnsupportedSolver && !strings.Contains(se.message, SupportedSolvers)) {
			t.Errorf("%s: message %q does not say which solver and what is supported", name, se.message)
		}
	}
}

func TestIdentifiers(t *testing.T) {
	cases := []struct {
		name    string
		spec    cmapi.CertificateSpec
		want    []string
		wantErr bool
	}{
		{name: "names", spec: cmapi.CertificateSpec{DNSNames: []string{"a.test", "*.a.test"}}, want: []string{"a.test", "*.a.test"}},
		{name: "common name added", spec: cmapi.CertificateSpec{CommonName: "c.test", DNSNames: []string{"a.test"}}, want: []string{"a.test", "c.test"}},
		{name: "common name already there", spec: cmapi.CertificateSpec{CommonName: "a.test", DNSNames: []string{"a.test"}}, want: []string{"a.test"}},
		{name: "IP address", spec: cmapi.CertificateSpec{DNSNames: []string{"a.test"}, IPAddresses: []string{"10.0.0.1"}}, wantErr: true},
		{name: "URI", spec: cmapi.CertificateSpec{DNSNames: []string{"a.test"}, URIs: []string{"spiffe://x"}}, wantErr: true},
		{name: "nothing", spec: cmapi.CertificateSpec{}, wantErr: true},
	}
	for _, tc := range cases {
		got, err := identifiers(&tc.spec)
		if tc.wantErr {
			if ie := (*issuers.Error)(nil); !errors.As(err, &ie) || ie.Reason != ReasonUnsupportedIdentifier {
				t.Errorf("%s: err = %v, want %s", tc.name, err, ReasonUnsupportedIdentifier)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

// One issuance has one order name on every replica; a different
// Certificate, cluster, name set or replaced certificate has another.
func TestOrderNameIsTheIssuance(t *testing.T) {
	crt := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "Web.Front", UID: "u1"}}
	req := issuers.OrderRequest{Cluster: "c1", Certificate: crt}
	base := orderName("le", req, []string{"a.test", "b.test"})
	if got := orderName("le", req, []string{"b.test", "a.test"}); got != base {
		t.Errorf("name order changed the order name: %s vs %s", got, base)
	}
	if len(base) > 63 || base[:9] != "web.front" {
		t.Errorf("order name %q: want the Certificate's name as prefix, a DNS label length", base)
	}
	other := func(name string, r issuers.OrderRequest, issuer string, names ...string) {
		if got := orderName(issuer, r, names); got == base {
			t.Errorf("%s: same order name %s", name, got)
		}
	}
	other("issuer", req, "zerossl", "a.test", "b.test")
	other("names", req, "le", "a.test")
	other("cluster", issuers.OrderRequest{Cluster: "c2", Certificate: crt}, "le", "a.test", "b.test")
	recreated := crt.DeepCopy()
	recreated.UID = "u2"
	other("recreated Certificate", issuers.OrderRequest{Cluster: "c1", Certificate: recreated}, "le", "a.test", "b.test")
	other("renewal", issuers.OrderRequest{Cluster: "c1", Certificate: crt, Current: &x509.Certificate{SerialNumber: big.NewInt(7)}}, "le", "a.test", "b.test")
}

func TestBackoffDoublesToItsCap(t *testing.T) {
	s := &Service{opts: Options{RetryBase: 5 * time.Minute, RetryMax: time.Hour}}
	want := []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute, time.Hour, time.Hour}
	for attempt, w := range want {
		if got := s.backoff(attempt); got != w {
			t.Errorf("backoff(%d) = %s, want %s", attempt, got, w)
		}
	}
	if got := s.backoff(1000); got != time.Hour {
		t.Errorf("backoff(1000) = %s, want the cap", got)
	}
}

// Identical requests share one order name whoever asks (cluster,
// namespace, name, UID) and whatever certificate their Secret holds (a
// pasted tls.crt chooses nothing); another name, key or usage is another
// order.
func TestSharedOrderNameIsTheRequest(t *testing.T) {
	base := func(mutate func(*cmapi.Certificate)) issuers.OrderRequest {
		c := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"},
			Spec: cmapi.CertificateSpec{DNSNames: []string{"web.example.test", "www.example.test"}}}
		if mutate != nil {
			mutate(c)
		}
		return issuers.OrderRequest{Cluster: "east", Certificate: c}
	}
	name := func(req issuers.OrderRequest) string {
		t.Helper()
		n, err := sharedOrderName("le", req, req.Certificate.Spec.DNSNames)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	want := name(base(nil))
	same := map[string]issuers.OrderRequest{
		"another cluster":           {Cluster: "west", Certificate: base(nil).Certificate},
		"another namespace and UID": base(func(c *cmapi.Certificate) { c.Namespace, c.UID = "blog", "u2" }),
		"names in another order":    base(func(c *cmapi.Certificate) { c.Spec.DNSNames = []string{"www.example.test", "web.example.test"} }),
		"a pasted certificate":      {Cluster: "east", Certificate: base(nil).Certificate, Current: &x509.Certificate{SerialNumber: big.NewInt(7)}},
	}
	for what, req := range same {
		if got := name(req); got != want {
			t.Errorf("%s: %s, want the shared %s", what, got, want)
		}
	}
	other := map[string]issuers.OrderRequest{
		"other names": base(func(c *cmapi.Certificate) { c.Spec.DNSNames = []string{"web.example.test"} }),
		"an ECDSA key": base(func(c *cmapi.Certificate) {
			c.Spec.PrivateKey = &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm}
		}),
		"client auth too": base(func(c *cmapi.Certificate) {
			c.Spec.Usages = []cmapi.KeyUsage{cmapi.UsageServerAuth, cmapi.UsageClientAuth}
		}),
	}
	for what, req := range other {
		if got := name(req); got == want {
			t.Errorf("%s: shares %s with the base request", what, got)
		}
	}
}
