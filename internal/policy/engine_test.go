package policy

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func policyObject(name string, spec map[string]any) *unstructured.Unstructured {
	u := NewObject()
	u.SetName(name)
	u.Object["spec"] = spec
	return u
}

// The Engine answers pending until its first load, then decides with what
// it read, tells subscribers of every load, and keeps a policy that does not
// even decode as one that allows nothing.
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

	devOnly := policyObject("dev", map[string]any{
		"selector": map[string]any{"clusters": map[string]any{"matchLabels": map[string]any{"env": "dev"}}},
		"allowed":  map[string]any{"dnsNames": map[string]any{"values": []any{"*.dev.example.com"}}},
	})
	broken := policyObject("broken", map[string]any{"selector": map[string]any{}, "allowed": map[string]any{"isCA": "yes"}})
	e.reader = fake.NewClientBuilder().WithScheme(runtime.NewScheme()).WithObjects(devOnly, broken).Build()
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
