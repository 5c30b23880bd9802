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
	o.Namespace, o.Identity = "", ""
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--namespace") || !strings.Contains(err.Error(), "--identity") {
		t.Fatalf("err = %v, want both problems named", err)
	}
}
