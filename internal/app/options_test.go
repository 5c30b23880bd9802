package app

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/certhub/certhub/internal/hub"
)

func TestOptionsFlagsAndValidation(t *testing.T) {
	o := hub.NewOptions()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	addRunFlags(fs, o)
	if err := fs.Parse([]string{"--namespace=hub", "--cluster-secret-namespace=gitops", "--identity=r1"}); err != nil {
		t.Fatal(err)
	}
	if o.Namespace != "hub" || o.ClusterSecretNamespace != "gitops" || o.Identity != "r1" || o.MetricsAddr != hub.DefaultMetricsAddr {
		t.Fatalf("flags not applied: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("valid options rejected: %v", err)
	}
	o.Namespace, o.Identity, o.ClusterSelector = "", "", "certhub.io/enabled in (true"
	o.Workers, o.WorkersPerCluster = 2, 3
	err := o.Validate()
	for _, flag := range []string{"--namespace", "--identity", "--cluster-selector", "--concurrent-workers-per-cluster"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Fatalf("err = %v, want %s named", err, flag)
		}
	}
}

// --controllers reads cert-manager's syntax; the old switches still work,
// deprecated, by appending to it; an unknown name is refused.
func TestControllersFlag(t *testing.T) {
	for _, tc := range []struct {
		args                  []string
		trust, ingress, gatew bool
		err                   string
	}{
		{args: nil, trust: true, ingress: true, gatew: true},
		{args: []string{"--controllers=*,-gateway-shim"}, trust: true, ingress: true},
		{args: []string{"--controllers=trust-bundles"}, trust: true},
		{args: []string{"--trust-bundles=false"}, ingress: true, gatew: true},
		{args: []string{"--controllers=*", "--ingress-shim=false", "--gateway-shim"}, trust: true, gatew: true},
		{args: []string{"--controllers=*,-cainjector"}, err: `unknown controller "cainjector"`},
	} {
		o := hub.NewOptions()
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		addRunFlags(fs, o)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.Complete()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || o.TrustBundles != tc.trust || o.IngressShim != tc.ingress || o.GatewayShim != tc.gatew {
			t.Errorf("%v: trust %v ingress %v gateway %v (%v), want %v %v %v", tc.args, o.TrustBundles, o.IngressShim, o.GatewayShim, err, tc.trust, tc.ingress, tc.gatew)
		}
	}
}

// Renamed flags keep their old names for a release, hidden and deprecated;
// `certhub run --help` prints the flags by component, with no default
// taken from the machine it runs on.
func TestRenamedFlagsAndGroupedHelp(t *testing.T) {
	o := hub.NewOptions()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	addRunFlags(fs, o)
	if err := fs.Parse([]string{"--lease-duration=7s", "--dns01-settle-delay=3s", "--standby=2"}); err != nil {
		t.Fatal(err)
	}
	if o.Shard.LeaseDuration != 7*time.Second || o.ACME.DNS01Settle != 3*time.Second || o.Shard.Standby != 2 {
		t.Errorf("old names did not set the options: %+v %+v", o.Shard, o.ACME)
	}
	if f := fs.Lookup("lease-duration"); f == nil || !f.Hidden || f.Deprecated == "" {
		t.Errorf("--lease-duration: %+v, want hidden and deprecated", f)
	}
	out, err := runCerthub("", "run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	for _, section := range []string{"Hub flags:", "Inventory (Argo CD cluster Secrets) flags:", "Sharding flags:", "Certificates flags:",
		"Issuance policy flags:", "Issuance budget flags:", "ACME flags:", "Trust bundles flags:", "CA rotation flags:", "Ingress and Gateway shims flags:", "Logging flags:"} {
		i := strings.Index(out, section)
		if i <= last {
			t.Errorf("section %q missing or out of order in:\n%s", section, out)
		}
		last = i
	}
	host, _ := os.Hostname()
	if strings.Contains(out, "--lease-duration ") || strings.Contains(out, "--trust-bundles ") || (host != "" && strings.Contains(out, `"`+host+`"`)) {
		t.Errorf("help shows a deprecated flag or the machine's hostname:\n%s", out)
	}
}
