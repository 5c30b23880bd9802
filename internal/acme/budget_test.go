package acme

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
	"github.com/certhub/certhub/internal/budget"
)

func TestLimits(t *testing.T) {
	issuer := func(server, annotation string) *cmapi.ClusterIssuer {
		ci := &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{ACME: &cmacme.ACMEIssuer{Server: server}}}}
		if annotation != "-" {
			ci.Annotations = map[string]string{hubapi.ACMELimitsAnnotation: annotation}
		}
		return ci
	}
	cases := []struct {
		name    string
		ci      *cmapi.ClusterIssuer
		want    map[string]budget.Limit
		wantErr string
	}{
		{name: "Let's Encrypt production gets its published limits", ci: issuer(LetsEncryptProduction, "-"), want: letsEncryptLimits},
		{name: "another server has no budget by default", ci: issuer("https://acme.zerossl.com/v2/DV90", "-"), want: nil},
		{name: "none turns it off", ci: issuer(LetsEncryptProduction, "none"), want: nil},
		{name: "explicit", ci: issuer("https://ca.test/dir", "orders=2/30s, set=5/168h"), want: map[string]budget.Limit{
			LimitOrders: {Capacity: 2, Period: 30 * time.Second}, LimitSet: {Capacity: 5, Period: 168 * time.Hour}}},
		{name: "unknown limit", ci: issuer("https://ca.test/dir", "accounts=10/3h"), wantErr: "unknown limit"},
		{name: "no period", ci: issuer("https://ca.test/dir", "orders=10"), wantErr: "<count>/<period>"},
		{name: "zero count", ci: issuer("https://ca.test/dir", "orders=0/1h"), wantErr: "count"},
		{name: "bad period", ci: issuer("https://ca.test/dir", "orders=1/soon"), wantErr: "period"},
	}
	for _, tc := range cases {
		got, err := limits(tc.ci)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want one saying %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s = %v, want %v", tc.name, k, got[k], v)
			}
		}
	}
}

// One order draws one order token, one per registered domain (public
// suffix aware), one for its exact set; failure buckets are per name.
func TestDraws(t *testing.T) {
	take, check := draws(letsEncryptLimits, []string{"a.shop.example.co.uk", "*.shop.example.co.uk", "b.example.org"})
	var buckets []string
	for _, d := range take {
		buckets = append(buckets, d.Bucket)
	}
	want := []string{"orders", "domain:example.co.uk", "domain:example.org", "set:" + setHash([]string{"b.example.org", "*.shop.example.co.uk", "A.shop.example.co.uk"})}
	if strings.Join(buckets, " ") != strings.Join(want, " ") {
		t.Errorf("draws %v, want %v", buckets, want)
	}
	if len(check) != 3 || check[1].Bucket != "authz-failures:shop.example.co.uk" {
		t.Errorf("failure buckets %v, want one per name, wildcard as its base", check)
	}
}

// `certhub status` says what is left of an issuer's budget: every bucket
// used, refilled to now, with its capacity and refill; a pause; waiting
// issuances. An issuer without a budget says nothing.
func TestDescribeBudget(t *testing.T) {
	now := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(now)
	pause := now.Add(time.Minute)
	ledger := budget.LedgerData{
		Buckets: map[string]*budget.Bucket{
			LimitOrders:                  {Tokens: 1, Last: now.Add(-36 * time.Second), PausedUntil: &pause}, // refills one in 36 s
			LimitDomain + ":example.com": {Tokens: 10, Last: now},
			"gone:bucket":                {Tokens: 1, Last: now},
		},
		Waiting: map[string]budget.Waiter{
			"a": {Due: now.Add(2 * time.Hour), Expires: now.Add(time.Minute)},
			"b": {Due: now.Add(time.Hour), Expires: now.Add(time.Minute)},
			"c": {Due: now, Expires: now.Add(-time.Second)}, // forgotten
		},
	}
	raw, err := json.Marshal(ledger)
	if err != nil {
		t.Fatal(err)
	}
	hub := fakeHub(t, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LedgerPrefix + "le"}, Data: map[string]string{budget.LedgerKey: string(raw)}})
	le := issuer("acct", "", false)
	le.Spec.ACME.Server = LetsEncryptProduction
	got, err := DescribeBudget(context.Background(), hub, ns, le, clk)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ACME budget of ClusterIssuer le: ",
		"orders 2/300 (+1 per 36s) paused by the CA until 2027-01-01T12:01:00Z",
		"domain:example.com 10/50 (+1 per 3h21m36s)",
		"2 issuance(s) waiting, nearest due 2027-01-01T13:00:00Z",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("%q\nlacks %q", got, want)
		}
	}
	if strings.Contains(got, "gone:bucket") {
		t.Errorf("%q shows a bucket of no configured limit", got)
	}
	// A ledger rebuilt an hour ago (history unknown before): orders hold
	// what refilled since, and the line says why.
	rebuilt := fakeHub(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LedgerPrefix + "le"},
		Data: map[string]string{budget.LedgerKey: `{"since":"` + now.Add(-time.Hour).Format(time.RFC3339) + `"}`}})
	got, err = DescribeBudget(context.Background(), rebuilt, ns, le, clk)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"orders 100/300 (+1 per 36s)", "spending before 2027-01-01T11:00:00Z unknown"} {
		if !strings.Contains(got, want) {
			t.Errorf("rebuilt: %q\nlacks %q", got, want)
		}
	}
	other := issuer("acct", "", false) // another server: no budget
	if got, err := DescribeBudget(context.Background(), hub, ns, other, clk); err != nil || got != "" {
		t.Errorf("an issuer without a budget: %q, %v", got, err)
	}
}

// A 429 pauses the bucket the CA named, read from its problem detail as
// Let's Encrypt writes them; anything else pauses the account's orders.
func TestRateLimitNamesTheBucket(t *testing.T) {
	names := []string{"www.shop.example.com", "shop.example.com"}
	for _, tc := range []struct{ detail, want string }{
		{`too many new orders (300) from this account in the last 3h0m0s, retry after 2026-12-03 18:00:00 UTC: see https://letsencrypt.org/docs/rate-limits/#new-orders-per-account`, LimitOrders},
		{`too many certificates (50) already issued for "example.com" in the last 168h0m0s, retry after 2026-12-04 10:00:00 UTC: see https://letsencrypt.org/docs/rate-limits/#new-certificates-per-registered-domain`, LimitDomain + ":example.com"},
		{`too many certificates (5) already issued for this exact set of identifiers in the last 168h0m0s, retry after 2026-12-05 10:00:00 UTC: see https://letsencrypt.org/docs/rate-limits/#new-certificates-per-exact-set-of-identifiers`, LimitSet + ":" + setHash(names)},
		{`too many failed authorizations (5) for "*.shop.example.com" in the last 1h0m0s, retry after 2026-12-03 17:00:00 UTC: see https://letsencrypt.org/docs/rate-limits/#authorization-failures-per-hostname-per-account`, LimitAuthzFailures + ":shop.example.com"},
		{`slow down`, LimitOrders},
		{``, LimitOrders},
	} {
		if got := rateLimit(tc.detail, names); got != tc.want {
			t.Errorf("rateLimit(%.60q) = %s, want %s", tc.detail, got, tc.want)
		}
	}
}
