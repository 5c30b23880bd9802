package hub

import (
	"slices"
	"testing"
)

// The table names every optional controller once, and a component is on
// when any of its controllers is.
func TestComponentTable(t *testing.T) {
	for _, name := range []string{ControllerIngressShim, ControllerGatewayShim, ControllerTrustBundles, ControllerDiscovery, ControllerStandbyPairs} {
		if n := len(slices.DeleteFunc(slices.Clone(OptionalControllers), func(s string) bool { return s != name })); n != 1 {
			t.Errorf("OptionalControllers %v lists %s %d times, want once", OptionalControllers, name, n)
		}
	}
	seen := map[string]bool{}
	for _, c := range components {
		if seen[c.name] {
			t.Errorf("component %s listed twice", c.name)
		}
		seen[c.name] = true
	}
	o := NewOptions()
	o.Controllers = "*,-ingress-shim,-discovery"
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	on := map[string]bool{}
	for _, c := range components {
		on[c.name] = c.on(o)
	}
	if !on["shim"] || on[ControllerDiscovery] || !on[ControllerTrustBundles] || !on["certificates"] {
		t.Errorf("on: %v; want the shim (gateway), trust and certificates on, discovery off", on)
	}
	o.Controllers = "-ingress-shim,-gateway-shim"
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	for _, c := range components {
		if c.name == "shim" && c.on(o) {
			t.Error("the shim is on with both its controllers off")
		}
	}
}
