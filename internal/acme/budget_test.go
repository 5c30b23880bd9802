package acme

import (
	"strings"
	"testing"
	"time"

	cmacme "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certhub/certhub/internal/budget"
)

func TestLimits(t *testing.T) {
	issuer := func(server, annotation string) *cmapi.ClusterIssuer {
		ci := &cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{ACME: &cmacme.ACMEIssuer{Server: server}}}}
		if annotation != "-" {
			ci.Annotations = map[string]string{LimitsAnnotation: annotation}
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
