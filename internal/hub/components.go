package hub

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/certhub/certhub/internal/certsync"
	"github.com/certhub/certhub/internal/crsign"
	"github.com/certhub/certhub/internal/shim"
	"github.com/certhub/certhub/internal/trust"
)

// component is one part of a replica, as New sets it up: one line of
// components. Adding a controller is its package and one line here.
type component struct {
	// name names it in errors and logs.
	name string
	// controllers are the --controllers names that turn it on (any one
	// of them); none: it is always on. Every name listed is an optional
	// controller (OptionalControllers).
	controllers []string
	// setup builds it on the manager, from the Options and the shared
	// dependencies (setupShared); it may not depend on another
	// component's setup having run, except through the fields named in
	// its comment.
	setup func(h *Hub) error
	// informers are the downstream informers it needs warm before a
	// cluster is engaged (scoped: a namespace-scoped registration).
	informers func(o *Options, scoped bool) []client.Object
	// cacheOption narrows what a downstream cluster's cache holds for it.
	cacheOption func() cluster.Option
}

// components is every component, in the order New sets them up: after the
// inventory, the manager and the shared dependencies (setupShared).
// Dependencies between them: certsync and trust read the rotation
// (h.rotator), certsync the revocation (h.revoker).
var components = []component{
	{name: "issuance-policies", setup: (*Hub).setupPolicy},
	{name: "ca-rotation", setup: (*Hub).setupRotation},
	{name: "revocation", setup: (*Hub).setupRevocation},
	{name: "certificates", setup: (*Hub).setupCertsync,
		informers: func(*Options, bool) []client.Object { return certsync.Informers() }, cacheOption: certsync.CacheOptions},
	{name: "certificate-requests", setup: (*Hub).setupCRSign, cacheOption: crsign.CacheOptions},
	{name: "shim", controllers: []string{ControllerIngressShim, ControllerGatewayShim}, setup: (*Hub).setupShim,
		informers: func(o *Options, _ bool) []client.Object {
			return shim.Informers(shim.Options{Ingress: o.IngressShim, Gateway: o.GatewayShim})
		}},
	{name: ControllerTrustBundles, controllers: []string{ControllerTrustBundles}, setup: (*Hub).setupTrust,
		informers: func(_ *Options, scoped bool) []client.Object {
			if scoped {
				return nil // a namespace-scoped registration gets no bundles
			}
			return trust.Informers()
		}, cacheOption: trust.CacheOptions},
	{name: ControllerDiscovery, controllers: []string{ControllerDiscovery}, setup: (*Hub).setupDiscovery},
	{name: ControllerStandbyPairs, controllers: []string{ControllerStandbyPairs}, setup: (*Hub).setupStandby},
	{name: "health", setup: (*Hub).setupHealth},
}

// on reports whether c runs under o.
func (c component) on(o *Options) bool {
	if len(c.controllers) == 0 {
		return true
	}
	for _, name := range c.controllers {
		if o.Enabled(name) {
			return true
		}
	}
	return false
}

// setupComponents sets up every component that is on.
func (h *Hub) setupComponents() error {
	for _, c := range components {
		if !c.on(h.opts) {
			continue
		}
		if err := c.setup(h); err != nil {
			return fmt.Errorf("component %s: %w", c.name, err)
		}
	}
	return nil
}

// componentInformers are the downstream informers of the components that
// are on.
func componentInformers(o *Options, scoped bool) []client.Object {
	var out []client.Object
	for _, c := range components {
		if c.informers != nil && c.on(o) {
			out = append(out, c.informers(o, scoped)...)
		}
	}
	return out
}

// componentCacheOptions are every component's cache options (a component
// that is off narrows nothing it would read).
func componentCacheOptions() []cluster.Option {
	var out []cluster.Option
	for _, c := range components {
		if c.cacheOption != nil {
			out = append(out, c.cacheOption())
		}
	}
	return out
}

// optionalControllers are the names --controllers turns on and off, in
// the table's order.
func optionalControllers() []string {
	var out []string
	for _, c := range components {
		out = append(out, c.controllers...)
	}
	return out
}
