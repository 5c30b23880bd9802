package app

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestOptionsFlagsAndValidation(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--namespace=hub", "--cluster-secret-namespace=gitops", "--identity=r1"}); err != nil {
		t.Fatal(err)
	}
	if o.Namespace != "hub" || o.ClusterSecretNamespace != "gitops" || o.Identity != "r1" || o.MetricsAddr != DefaultMetricsAddr {
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
