package policy

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	hubapi "github.com/certhub/certhub/internal/apis/certhub/v1alpha1"
)

// The Engine answers pending until its first load, then decides with what
// it read, tells subscribers of every load, and keeps a policy that does not
// compile as one that allows nothing, named in every denial.
func TestEngineLoadsAndNotifies(t *testing.T) {
	e, err := New(Options{Default: Allow, ClusterLabels: func(string) map[string]string { return map[string]string{"env": "dev"} }})
	if err != nil {
		t.Fatal(err)
	}
	crt := &cmapi.Certificate{}
	crt.Namespace = "team"
	crt.Spec.DNSNames = []string{"a.dev.example.com"}
	if _, pending := e.Evaluate("east", crt, nil); !pending {
		t.Fatal("Evaluate before the first load must be pending")
	}
	var calls atomic.Int32
	e.Subscribe(func() { calls.Add(1) })

	devOnly := &hubapi.IssuancePolicy{ObjectMeta: metav1.ObjectMeta{Name: "dev"}, Spec: hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Clusters: &hubapi.ClusterSelector{MatchLabels: map[string]string{"env": "dev"}}},
		Allowed:  hubapi.PolicyAllowed{DNSNames: &hubapi.StringValues{Values: []string{"*.dev.example.com"}}},
	}}
	// An operator the label selector does not know: the CRD's schema lets
	// it through (metav1's type has no enum), compiling refuses it.
	broken := &hubapi.IssuancePolicy{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Spec: hubapi.IssuancePolicySpec{
		Selector: hubapi.PolicySelector{Clusters: &hubapi.ClusterSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Sometimes"}}}},
	}}
	scheme := runtime.NewScheme()
	if err := hubapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	e.reader = fake.NewClientBuilder().WithScheme(scheme).WithObjects(devOnly, broken).Build()
	e.log = logr.Discard()
	if err := e.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Errorf("subscribers called %d times, want 1", calls.Load())
	}
	d, pending := e.Evaluate("east", crt, nil)
	if pending || !d.Allowed || d.Policy != "dev" {
		t.Errorf("decision %+v pending %v, want allowed by dev", d, pending)
	}
	crt.Spec.DNSNames = []string{"a.prod.example.com"}
	d, _ = e.Evaluate("east", crt, nil)
	if d.Allowed || !strings.Contains(d.Message, "broken: the policy is invalid") {
		t.Errorf("decision %+v: want denied, naming the invalid policy", d)
	}
	e.Changed()
	if calls.Load() != 2 {
		t.Errorf("Changed: subscribers called %d times in all, want 2", calls.Load())
	}
}
